"""YSB, the whole benchmark: parse NDJSON, keep views, join the campaign table, count views per campaign in 10 s
event-time tumbling windows.

Three implementations run on the same in-memory input, in one process so they see the same machine, the order of
the sides alternating round by round: the edgewise local engine (examples/ysb/windowed.yaml, through the reader
and the fused head `edgewise run` gives a file), Bytewax (single worker, ``run_main``) and a plain Python loop as
a competent user writes it (orjson, open windows in a dict keyed by window end, closed from a heap). Every round
checks that all three give the same window counts, by content. Wall and CPU time are both reported.

Two inputs, both 100 campaigns of 10 ads with events in time order: ``project`` (the generator's default,
10,000 events/s: a new largest time every 10 events) and ``dense`` (125,000 events/s, about what YSB's own
generator gives: a new largest time every 125 events).

    .venv/bin/pip install bytewax   # not a dependency of edgewise; only this benchmark uses it
    .venv/bin/python bench/ysb_windowed.py [--events 1000000] [--rounds 5] [--input project|dense|both]
"""

from __future__ import annotations

import argparse
import heapq
import io
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from common import campaign_table  # noqa: E402

from edgewise.config import load  # noqa: E402
from edgewise.engine.local import LocalEngine  # noqa: E402
from edgewise.sources.lines import line_batches  # noqa: E402
from edgewise.sources.ysb import YsbWorkload  # noqa: E402

PIPELINE = ROOT / "examples" / "ysb" / "windowed.yaml"
WINDOW_MS = 10_000
INPUTS = {"project": 10_000, "dense": 125_000}
"""Input name -> events per second of event time."""
TARGET_VS_PLAIN = 0.8
TARGET_VS_BYTEWAX = 2.5
Counts = dict[tuple[str, int], int]  # (campaign, window start in ms) -> views


def make_input(events: int, events_per_second: int) -> bytes:
    workload = YsbWorkload(seed=1, events_per_second=events_per_second)
    return b"".join(orjson.dumps(e) + b"\n" for e in workload.events(events))


def plain_loop(data: bytes, table: dict[str, str]) -> Counts:
    """What a competent engineer writes by hand: one loop, orjson, a dict join; open windows in a dict keyed by
    window end, closed from a heap of ends as event time passes them (late events dropped, as edgewise does with
    its default watermark of 0)."""
    loads = orjson.loads
    open_windows: dict[int, dict[str, int]] = {}  # window end -> campaign -> views
    ends: list[int] = []
    done: Counts = {}
    max_time = -1
    for line in io.BytesIO(data):
        event = loads(line)
        if event["event_type"] != "view":
            continue
        t = int(event["event_time"])
        if t > max_time:
            max_time = t
            while ends and ends[0] <= t:
                end = heapq.heappop(ends)
                for campaign, n in open_windows.pop(end).items():
                    done[(campaign, end - WINDOW_MS)] = n
        end = t - t % WINDOW_MS + WINDOW_MS
        if end <= max_time:
            continue  # late
        views = open_windows.get(end)
        if views is None:
            views = open_windows[end] = {}
            heapq.heappush(ends, end)
        campaign = table[event["ad_id"]]
        views[campaign] = views.get(campaign, 0) + 1
    for end, views in open_windows.items():
        for campaign, n in views.items():
            done[(campaign, end - WINDOW_MS)] = n
    return done


def edgewise_engine(data: bytes) -> Counts:
    """The pipeline file as `edgewise run` runs it on a file: its reader, with the fused head the engine gives it."""
    plan = load(str(PIPELINE))
    counts: Counts = {}

    def collect(_: str, batch: Any) -> None:
        for r in batch.payloads:
            counts[(r["campaign_id"], int(r["window_start"].timestamp() * 1000))] = r["views"]

    engine = LocalEngine(plan, stdout=io.BytesIO(), errors=io.StringIO(), collect=collect)
    engine.open()
    ctx = engine.source_context()
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
    return {(campaign, window_id * WINDOW_MS): n for campaign, (window_id, n) in out}




def timed(fn: Callable[..., Counts], *args: Any) -> tuple[float, float, Counts]:
    """Wall and CPU seconds of ``fn(*args)`` (after a garbage collection, so one run does not pay for another)."""
    import gc

    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(*args)
    return time.perf_counter() - wall, time.process_time() - cpu, result


def measure(name: str, events: int, rounds: int, table: dict[str, str]) -> dict[str, Any]:
    data = make_input(events, INPUTS[name])
    sides: dict[str, Callable[[bytes], Counts]] = {
        "plain_loop": lambda d: plain_loop(d, table), "edgewise": edgewise_engine,
        "bytewax": lambda d: bytewax_flow(d, table)}
    wall: dict[str, list[float]] = {k: [] for k in sides}
    cpu: dict[str, list[float]] = {k: [] for k in sides}
    for r in range(rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        results: dict[str, Counts] = {}
        for side in order:
            w, c, results[side] = timed(sides[side], data)
            wall[side].append(w)
            cpu[side].append(c)
        if not results["plain_loop"] == results["edgewise"] == results["bytewax"]:
            raise SystemExit(f"{name}: window counts differ: " + ", ".join(
                f"{k} {len(v)} windows ({sum(v.values())} views)" for k, v in results.items()))
        print(f"{name} round {r + 1} ({' → '.join(order)}): " + ", ".join(
            f"{k} {events / wall[k][-1]:,.0f} ev/s" for k in sides) + f"; {len(results['edgewise'])} windows",
            file=sys.stderr)

    def ratios(baseline: str, by: dict[str, list[float]]) -> list[float]:
        return [b / e for b, e in zip(by[baseline], by["edgewise"], strict=True)]

    vs_plain, vs_bytewax = ratios("plain_loop", wall), ratios("bytewax", wall)
    return {
        "events_per_second_of_event_time": INPUTS[name],
        "wall_s_median": {k: round(statistics.median(v), 4) for k, v in wall.items()},
        "cpu_s_median": {k: round(statistics.median(v), 4) for k, v in cpu.items()},
        "edgewise_vs_plain_loop": {"median": round(statistics.median(vs_plain), 3),
                                   "min": round(min(vs_plain), 3), "max": round(max(vs_plain), 3),
                                   "by_cpu_median": round(statistics.median(ratios("plain_loop", cpu)), 3)},
        "edgewise_vs_bytewax": {"median": round(statistics.median(vs_bytewax), 3),
                                "min": round(min(vs_bytewax), 3), "max": round(max(vs_bytewax), 3),
                                "by_cpu_median": round(statistics.median(ratios("bytewax", cpu)), 3)},
        "met": {f"vs plain loop >= {TARGET_VS_PLAIN}": statistics.median(vs_plain) >= TARGET_VS_PLAIN,
                f"vs bytewax >= {TARGET_VS_BYTEWAX}": statistics.median(vs_bytewax) >= TARGET_VS_BYTEWAX},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--input", choices=[*INPUTS, "both"], default="both")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ysb_windowed.json"))
    args = parser.parse_args()
    import importlib.metadata

    table = campaign_table()
    names = list(INPUTS) if args.input == "both" else [args.input]
    result = {
        "benchmark": "ysb-windowed (10 s event-time tumbling count per campaign), in one process, sides alternating",
        "command": " ".join(["bench/ysb_windowed.py", *sys.argv[1:]]),
        "events": args.events,
        "rounds": args.rounds,
        "inputs": {name: measure(name, args.events, args.rounds, table) for name in names},
        "bytewax": importlib.metadata.version("bytewax"),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores; every implementation on one core",
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
