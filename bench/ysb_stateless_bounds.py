"""How far step fusion could take the local engine on YSB's stateless part: the bounds between which it sits.

``bench/ysb_stateless.py`` compares the engine with a hand-written loop. This script times, alternating in one
process, on the same in-memory input, what lies between them:

* ``hand-written``: that loop (one event at a time: parse, test, join, write);
* ``reading``: edgewise's NDJSON reading alone (lines, ``orjson``, batches), as the ``file`` source reads;
* ``one pass``: that reading, then the three steps written as one comprehension per batch, with no checks (a
  non-text ``event_type``, an ad without a campaign or a missing field would give wrong results or raise), and
  the sink's ``dumps_lines``: the floor for any fusion of the steps;
* ``passes``: the same reading and sink, with the steps' fast paths as the engine runs them (each a pass over the
  batch: the type checks that keep their results exact, the filter's selection of ids and times);
* ``engine``: the engine, as ``bench/ysb_stateless.py`` runs it (since 2026-11-26 evening with its fused head,
  ``engine/fused.py``: the decoding and the three steps in one pass per line, which no side above has).

Reports ns per event (median over rounds) and the ratio of the hand-written time to each.

    .venv/bin/python bench/ysb_stateless_bounds.py [--events 300000] [--rounds 9]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from itertools import compress
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from common import campaign_table, make_input, write_result  # noqa: E402
from ysb_stateless import edgewise_engine, hand_written  # noqa: E402

from edgewise.clock import SystemClock  # noqa: E402
from edgewise.events import Batch  # noqa: E402
from edgewise.jsonio import dumps_lines  # noqa: E402
from edgewise.sources.base import SourceContext  # noqa: E402
from edgewise.sources.lines import line_batches  # noqa: E402


def batches(data: bytes) -> Iterator[Batch]:
    ctx = SourceContext(SystemClock(), print, batch_size=1024)
    return line_batches(io.BytesIO(data), source_id="ads", id_prefix="ads:", where="<bench>", decoder=None, ctx=ctx)


def reading(data: bytes, rows: dict[str, dict[str, str]]) -> int:
    return sum(len(b) for b in batches(data))


def one_pass(data: bytes, rows: dict[str, dict[str, str]]) -> int:
    out, n = io.BytesIO(), 0
    for batch in batches(data):
        kept = [{"campaign_id": rows[p["ad_id"]]["campaign_id"], "ad_id": p["ad_id"], "event_time": p["event_time"]}
                for p in batch.payloads if p["event_type"] == "view"]
        out.write(dumps_lines(kept))
        n += len(kept)
    return n


def passes(data: bytes, rows: dict[str, dict[str, str]]) -> int:
    out, n = io.BytesIO(), 0
    for batch in batches(data):
        payloads = batch.payloads
        types = [p.get("event_type") for p in payloads]  # the filter: text compared as text, else the slow way
        if set(map(type, types)) != {str}:
            raise SystemExit("not the YSB input")
        mask = [t == "view" for t in types]
        views = Batch(list(compress(payloads, mask)), source=batch.source, ingest_time_us=batch.ingest_time_us,
                      event_times=list(compress(batch.event_times, mask)), id_prefix=batch.id_prefix,
                      offsets=list(compress(batch._offsets, mask)))
        keys = [p.get("ad_id") for p in views.payloads]  # the lookup: text keys, each with a row
        if set(map(type, keys)) != {str}:
            raise SystemExit("not the YSB input")
        found = list(map(rows.get, keys))
        if None in found:
            raise SystemExit("not the YSB input")
        merged = [{**p, **row} for p, row in zip(views.payloads, found, strict=True)]
        kept = [{"campaign_id": p["campaign_id"], "ad_id": p["ad_id"], "event_time": p["event_time"]} for p in merged]
        out.write(dumps_lines(kept))
        n += len(kept)
    return n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ysb_stateless_bounds.json"))
    args = parser.parse_args()
    data = make_input(args.events)
    table = campaign_table()
    rows = {ad: {"campaign_id": campaign} for ad, campaign in table.items()}
    sides: dict[str, Callable[[], int]] = {
        "hand-written": lambda: hand_written(data, table), "reading": lambda: reading(data, rows),
        "one pass": lambda: one_pass(data, rows), "passes": lambda: passes(data, rows),
        "engine": lambda: edgewise_engine(data)}
    times: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(args.rounds):
        counts = set()
        for side, run in sides.items():
            started = time.perf_counter()
            n = run()
            times[side].append(time.perf_counter() - started)
            if side != "reading":
                counts.add(n)
        if len(counts) != 1:
            raise SystemExit(f"the sides wrote different numbers of events: {counts}")
    hand = statistics.median(times["hand-written"])
    result = {"benchmark": "ysb-stateless-bounds", "events": args.events, "rounds": args.rounds,
              **{side: {"ns_per_event": round(statistics.median(t) / args.events * 1e9),
                        "hand_written_ratio": round(hand / statistics.median(t), 3)} for side, t in times.items()}}
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
