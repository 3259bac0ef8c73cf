"""YSB with running counts: parse NDJSON, keep views, join the campaign table, and give each view its campaign's
count of views so far (``aggregate``), written as NDJSON. edgewise runs ``examples/ysb/running.yaml`` through the
reader and fused head `edgewise run` gives a file; the baseline is a plain loop as a competent user writes it
(orjson, a dict of counts, the event copied with its counts added). Same in-memory input, one process, the order
alternating round by round, outputs compared byte for byte.

    .venv/bin/python bench/ysb_running.py [--events 1000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from common import campaign_table, make_input, ratio_stats, timed, write_result  # noqa: E402

from edgewise.config import load  # noqa: E402
from edgewise.engine.local import LocalEngine  # noqa: E402
from edgewise.sources.lines import line_batches  # noqa: E402

PIPELINE = ROOT / "examples" / "ysb" / "running.yaml"


def plain_loop(data: bytes, table: dict[str, str]) -> bytes:
    loads, dumps = orjson.loads, orjson.dumps
    out = io.BytesIO()
    write = out.write
    views: dict[str, int] = {}
    for line in io.BytesIO(data):
        event = loads(line)
        if event["event_type"] != "view":
            continue
        campaign = table[event["ad_id"]]
        n = views[campaign] = views.get(campaign, 0) + 1
        write(dumps({**event, "campaign_id": campaign, "so_far": {"views": n}}) + b"\n")
    return out.getvalue()


def edgewise_engine(data: bytes) -> bytes:
    out = io.BytesIO()
    engine = LocalEngine(load(str(PIPELINE)), stdout=out, errors=io.StringIO())
    engine.open()
    for batch in line_batches(io.BytesIO(data), source_id="ads", id_prefix="ads:", where="<bench>", decoder=None,
                              ctx=engine.source_context()):
        engine.process(batch)
    engine.finish()
    engine.close()
    return out.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ysb_running.json"))
    args = parser.parse_args()
    data, table = make_input(args.events), campaign_table()
    times: dict[str, list[float]] = {"plain_loop": [], "edgewise": []}
    sides: dict[str, Any] = {"plain_loop": lambda: plain_loop(data, table), "edgewise": lambda: edgewise_engine(data)}
    for r in range(args.rounds):
        outputs = {}
        for side in sides if r % 2 == 0 else reversed(sides):
            t, outputs[side] = timed(sides[side])
            times[side].append(t)
        if outputs["plain_loop"] != outputs["edgewise"]:
            raise SystemExit("the outputs differ")
        print(f"round {r + 1}: " + ", ".join(f"{k} {args.events / v[-1]:,.0f} ev/s" for k, v in times.items()),
              file=sys.stderr)
    write_result(args.out, {
        "benchmark": "ysb-running (a running count per campaign, aggregate), in one process, sides alternating",
        "command": " ".join(["bench/ysb_running.py", *sys.argv[1:]]),
        "events": args.events, "rounds": args.rounds,
        "wall_s_median": {k: round(statistics.median(v), 4) for k, v in times.items()},
        "edgewise_vs_plain_loop": ratio_stats(times["plain_loop"], times["edgewise"]),
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
