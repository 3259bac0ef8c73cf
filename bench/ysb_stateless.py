"""YSB, stateless part: parse NDJSON, keep views, join the campaign table, project, write NDJSON.

Runs the edgewise local engine (examples/ysb/pipeline.yaml, through the same NDJSON reader the file source uses)
and a hand-written single-thread orjson loop doing the same work, on the same in-memory input, alternating
rounds in one process so both see the same machine. Reports events/s per core and the ratio.

    .venv/bin/python bench/ysb_stateless.py [--events 1000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from common import campaign_table, make_input, ratio_stats, timed, write_result  # noqa: E402

from edgewise.config import load  # noqa: E402
from edgewise.engine.local import LocalEngine  # noqa: E402
from edgewise.sources.lines import line_batches  # noqa: E402

PIPELINE = ROOT / "examples" / "ysb" / "pipeline.yaml"






def hand_written(data: bytes, table: dict[str, str]) -> int:
    """What a careful engineer writes by hand for this job: one loop, orjson, a dict join."""
    out = io.BytesIO()
    loads, dumps, write = orjson.loads, orjson.dumps, out.write
    n = 0
    for line in io.BytesIO(data):
        event = loads(line)
        if event["event_type"] != "view":
            continue
        ad = event["ad_id"]
        write(dumps({"campaign_id": table.get(ad), "ad_id": ad, "event_time": event["event_time"]}) + b"\n")
        n += 1
    return n


def edgewise_engine(data: bytes) -> int:
    plan = load(str(PIPELINE))
    out = io.BytesIO()
    engine = LocalEngine(plan, stdout=out, errors=io.StringIO())
    engine.open()
    ctx = engine.source_context()  # what `edgewise run` gives a file source: the fused head where it applies
    for batch in line_batches(io.BytesIO(data), source_id="ads", id_prefix="ads:", where="<bench>", decoder=None,
                              ctx=ctx):
        engine.process(batch)
    engine.close()
    return engine.stats.events_out["views"]




def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ysb_stateless.json"))
    args = parser.parse_args()
    data = make_input(args.events)
    table = campaign_table()
    hand_times, engine_times = [], []
    for r in range(args.rounds):
        t_hand, n_hand = timed(hand_written, data, table)
        t_engine, n_engine = timed(edgewise_engine, data)
        if n_hand != n_engine:
            raise SystemExit(f"outputs differ: hand-written {n_hand} events, edgewise {n_engine}")
        hand_times.append(t_hand)
        engine_times.append(t_engine)
        print(f"round {r + 1}: hand-written {args.events / t_hand:,.0f} ev/s, edgewise {args.events / t_engine:,.0f} "
              f"ev/s, ratio {t_hand / t_engine:.2f}", file=sys.stderr)
    result = {
        "benchmark": "ysb-stateless",
        "events": args.events,
        "input_bytes_per_event": round(len(data) / args.events, 1),
        "rounds": args.rounds,
        "hand_written_events_per_s_median": round(args.events / statistics.median(hand_times)),
        "edgewise_events_per_s_median": round(args.events / statistics.median(engine_times)),
        **ratio_stats(hand_times, engine_times),
    }
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
