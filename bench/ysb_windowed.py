"""YSB, the whole benchmark: parse NDJSON, keep views, join the campaign table, count views per campaign in 10 s
event-time tumbling windows.

Three implementations run on the same in-memory input, alternating rounds in one process so they see the same
machine: the edgewise local engine (examples/ysb/windowed.yaml), Bytewax (single worker, ``run_main``) and a
hand-written single-thread orjson loop. Every round checks that all three produce the same window counts.

    .venv/bin/pip install bytewax   # not a dependency of edgewise; only this benchmark uses it
    .venv/bin/python bench/ysb_windowed.py [--events 1000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from common import campaign_table, make_input, timed  # noqa: E402

from edgewise.clock import SystemClock  # noqa: E402
from edgewise.config import load  # noqa: E402
from edgewise.engine.local import LocalEngine  # noqa: E402
from edgewise.sources.base import SourceContext  # noqa: E402
from edgewise.sources.lines import line_batches  # noqa: E402

PIPELINE = ROOT / "examples" / "ysb" / "windowed.yaml"
WINDOW_MS = 10_000
Counts = Counter[tuple[str, int]]  # (campaign, window start in ms) -> views






def hand_written(data: bytes, table: dict[str, str]) -> Counts:
    """One loop, orjson, a dict join, a dict of counters; windows close when event time passes their end."""
    loads = orjson.loads
    open_windows: Counts = Counter()
    done: Counts = Counter()
    max_time = 0
    for line in io.BytesIO(data):
        event = loads(line)
        t = int(event["event_time"])
        if t > max_time:
            max_time = t
            if open_windows and min(s for _, s in open_windows) + WINDOW_MS <= t:
                for key in [k for k in open_windows if k[1] + WINDOW_MS <= t]:
                    done[key] = open_windows.pop(key)
        if event["event_type"] != "view":
            continue
        open_windows[(table[event["ad_id"]], t - t % WINDOW_MS)] += 1
    done.update(open_windows)
    return done


def edgewise_engine(data: bytes) -> Counts:
    plan = load(str(PIPELINE))
    counts: Counts = Counter()

    def collect(_: str, batch: Any) -> None:
        for r in batch.payloads:
            counts[(r["campaign_id"], int(r["window_start"].timestamp() * 1000))] = r["views"]

    engine = LocalEngine(plan, stdout=io.BytesIO(), errors=io.StringIO(), collect=collect)
    engine.open()
    ctx = SourceContext(SystemClock(), print, batch_size=1024)
    for batch in line_batches(io.BytesIO(data), source_id="ads", id_prefix="ads:", where="<bench>", decoder=None,
                              ctx=ctx):
        engine.process(batch)
    engine.finish()
    engine.close()
    return counts


def bytewax_flow(data: bytes, table: dict[str, str]) -> Counts:
    import bytewax.operators as op
    import bytewax.operators.windowing as win
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    out: list[Any] = []
    flow = Dataflow("ysb")
    lines = op.input("in", flow, TestingSource(data.splitlines(), batch_size=1024))
    events = op.map("parse", lines, orjson.loads)
    views = op.filter("views", events, lambda e: e["event_type"] == "view")
    keyed = op.key_on("campaign", views, lambda e: table[e["ad_id"]])
    # a frozen system clock: Bytewax's watermark otherwise advances with wall time while it replays recorded
    # events as fast as it can, and drops some as late (edgewise's watermark follows event time only)
    frozen = datetime.now(UTC)
    clock = win.EventClock(lambda e: datetime.fromtimestamp(int(e["event_time"]) / 1000, tz=UTC),
                           wait_for_system_duration=timedelta(0), now_getter=lambda: frozen)
    windower = win.TumblingWindower(length=timedelta(milliseconds=WINDOW_MS), align_to=datetime(1970, 1, 1, tzinfo=UTC))
    counted = win.fold_window("count", keyed, clock, windower, lambda: 0, lambda n, _: n + 1, lambda a, b: a + b)
    op.output("out", counted.down, TestingSink(out))
    run_main(flow)
    return Counter({(campaign, window_id * WINDOW_MS): n for campaign, (window_id, n) in out})




def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ysb_windowed.json"))
    args = parser.parse_args()
    data = make_input(args.events)
    table = campaign_table()
    times: dict[str, list[float]] = {"hand_written": [], "edgewise": [], "bytewax": []}
    for r in range(args.rounds):
        t_hand, hand = timed(hand_written, data, table)
        t_edge, edge = timed(edgewise_engine, data)
        t_bw, bw = timed(bytewax_flow, data, table)
        if not (hand == edge == bw):
            raise SystemExit(f"window counts differ: hand-written {len(hand)} windows ({sum(hand.values())} views), "
                             f"edgewise {len(edge)} ({sum(edge.values())}), bytewax {len(bw)} ({sum(bw.values())})")
        for name, t in (("hand_written", t_hand), ("edgewise", t_edge), ("bytewax", t_bw)):
            times[name].append(t)
        print(f"round {r + 1}: hand-written {args.events / t_hand:,.0f} ev/s, edgewise {args.events / t_edge:,.0f}, "
              f"bytewax {args.events / t_bw:,.0f}; {len(edge)} windows", file=sys.stderr)
    vs_bytewax = [b / e for b, e in zip(times["bytewax"], times["edgewise"], strict=True)]
    vs_hand = [h / e for h, e in zip(times["hand_written"], times["edgewise"], strict=True)]
    import importlib.metadata

    result = {
        "benchmark": "ysb-windowed (10 s event-time tumbling count per campaign)",
        "events": args.events,
        "rounds": args.rounds,
        "events_per_s_median": {k: round(args.events / statistics.median(v)) for k, v in times.items()},
        "edgewise_vs_bytewax_median_of_rounds": round(statistics.median(vs_bytewax), 3),
        "edgewise_vs_bytewax_min_max": [round(min(vs_bytewax), 3), round(max(vs_bytewax), 3)],
        "edgewise_vs_hand_written_median_of_rounds": round(statistics.median(vs_hand), 3),
        "bytewax": importlib.metadata.version("bytewax"),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores; every implementation on one core",
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
