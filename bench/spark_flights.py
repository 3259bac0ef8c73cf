"""A year of NYC flights through 1-day windows on Spark, counted from process start: ``edgewise spark --once``
against a hand-written PySpark *batch* job doing the same aggregation, each a fresh process (a new JVM) from start
to exit, on the same NDJSON files and the same cores. Rounds alternate; every round checks that both give the same
windows with the same values.

    .venv/bin/python bench/spark_flights.py [--flights 336776] [--rounds 3] [--cores 2] [--work windows|dedupe]

The input is generated (seeded) with the size and shape of nycflights13's ``flights`` table: 336,776 flights out
of EWR, JFK and LGA in 2013, in date order, one file per month, each flight's scheduled hour in ``time_hour``,
delays in minutes with ~2.7% missing (cancelled). The work: per origin and UTC day, the number of flights, the
average departure delay and the longest arrival delay. The hand-written job is what a PySpark developer writes
for it: ``spark.read.schema(...).json``, ``groupBy(window(...), origin).agg(...)``, ``write.json``. edgewise runs
the same aggregation as a ``window`` step (tumbling 1d, watermark 1h) in ``--once``; it is given the same schema
(``schema:`` on its source) and, as a third side, run without it (types from the input: what a user gets by
default). Writes bench/results/spark_flights.json.

``--work dedupe`` (issue 43): a tenth of the flights is delivered twice (the copy up to 20 lines later, in the
same hour), and edgewise's ``dedupe`` on the flight's identity (within 1 h) runs against a hand-written batch
job's ``dropDuplicates`` of it, and beside ``edgewise run``; every side must keep each flight once, the same
records.
Writes bench/results/spark_flights_dedupe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

from spark_ysb_start import run  # noqa: E402

SCHEMA = ("year INT, month INT, day INT, dep_time INT, sched_dep_time INT, dep_delay INT, arr_time INT, "
          "sched_arr_time INT, arr_delay INT, carrier STRING, flight INT, tailnum STRING, origin STRING, "
          "dest STRING, air_time INT, distance INT, hour INT, minute INT, time_hour STRING")

HAND_WRITTEN = r"""
import sys
from pyspark.sql import SparkSession, functions as F
source, out, cores, schema = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
spark = (SparkSession.builder.master(f"local[{cores}]").appName("hand-written")
         .config("spark.sql.shuffle.partitions", cores).config("spark.sql.session.timeZone", "UTC")
         .config("spark.ui.enabled", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
flights = spark.read.schema(schema).json(source)
daily = (flights.groupBy(F.window(F.to_timestamp("time_hour"), "1 day"), "origin")
         .agg(F.count("*").alias("flights"), F.avg("dep_delay").alias("avg_dep_delay"),
              F.max("arr_delay").alias("max_arr_delay")))
(daily.select(F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_start"), "origin", "flights",
              "avg_dep_delay", "max_arr_delay")
 .write.json(out))
"""

PIPELINE = """\
version: 1
name: flights-daily
sources: [{{id: flights, type: file, path: "{source}"{schema}}}]
event_time: "to_timestamp(time_hour)"
pipelines:
  - id: per-origin-day
    steps:
      - window:
          id: daily
          key: [origin]
          tumbling: 1d
          watermark: 1h
          aggs: {{flights: count(), avg_dep_delay: avg(dep_delay), max_arr_delay: max(arr_delay)}}
    to: [out]
sinks: [{{id: out, type: file, path: "{out}", fsync: false}}]
"""

CARRIERS = ["UA", "B6", "EV", "DL", "AA", "MQ", "US", "9E", "WN", "VX", "FL", "AS", "F9", "YV", "HA", "OO"]
DESTS = ["ATL", "ORD", "LAX", "BOS", "MCO", "CLT", "SFO", "FLL", "MIA", "DCA", "DTW", "DFW", "RDU", "TPA", "DEN"]


def write_flights(directory: Path, count: int, seed: int = 13) -> None:
    """``count`` flights of 2013 in date and hour order, one NDJSON file per month."""
    rng = random.Random(seed)
    directory.mkdir(parents=True)
    start = datetime(2013, 1, 1, tzinfo=UTC)
    per_day = [count // 365 + (1 if d < count % 365 else 0) for d in range(365)]
    files: dict[int, Any] = {}
    try:
        for d, n in enumerate(per_day):
            day = start + timedelta(days=d)
            hours = sorted(rng.randint(5, 23) for _ in range(n))
            fh = files.get(day.month)
            if fh is None:
                fh = files[day.month] = open(directory / f"flights-2013-{day.month:02d}.ndjson", "w")  # noqa: SIM115
            for hour in hours:
                minute = rng.randrange(60)
                cancelled = rng.random() < 0.027
                dep_delay = None if cancelled else int(rng.expovariate(1 / 15)) - 5
                row = {"year": 2013, "month": day.month, "day": day.day,
                       "dep_time": None if cancelled else hour * 100 + minute, "sched_dep_time": hour * 100 + minute,
                       "dep_delay": dep_delay, "arr_time": None,
                       "sched_arr_time": (hour + 3) % 24 * 100 + minute,
                       "arr_delay": None if dep_delay is None else dep_delay + rng.randint(-20, 20),
                       "carrier": rng.choice(CARRIERS), "flight": rng.randint(1, 6000),
                       "tailnum": f"N{rng.randint(100, 999)}{rng.choice('ABCDEFGH')}{rng.choice('ABCDEFGH')}",
                       "origin": rng.choice(["EWR", "JFK", "LGA"]), "dest": rng.choice(DESTS),
                       "air_time": None if cancelled else rng.randint(30, 600), "distance": rng.randint(80, 4983),
                       "hour": hour, "minute": minute,
                       "time_hour": (day + timedelta(hours=hour)).strftime("%Y-%m-%dT%H:%M:%SZ")}
                fh.write(json.dumps(row, separators=(",", ":")) + "\n")
    finally:
        for fh in files.values():
            fh.close()


IDENTITY = ["carrier", "flight", "tailnum", "origin", "time_hour", "sched_dep_time"]
"""What names one flight: the dedupe's key (generated flights never share it)."""

HAND_WRITTEN_DEDUPE = r"""
import sys
from pyspark.sql import SparkSession
source, out, cores, schema, identity = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5].split(",")
spark = (SparkSession.builder.master(f"local[{cores}]").appName("hand-written")
         .config("spark.sql.shuffle.partitions", cores).config("spark.sql.session.timeZone", "UTC")
         .config("spark.ui.enabled", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
spark.read.schema(schema).json(source).dropDuplicates(identity).write.json(out)
"""

DEDUPE_PIPELINE = """\
version: 1
name: flights-once
sources: [{{id: flights, type: file, path: "{source}"{schema}}}]
event_time: "to_timestamp(time_hour)"
pipelines:
  - id: once
    steps:
      - dedupe: {{id: redelivered, key: "concat_ws('/', {key})", within: 1h, watermark: 1h}}
    to: [out]
sinks: [{{id: out, type: file, path: "{out}", fsync: false}}]
"""


def redeliver(directory: Path, share: float = 0.1, seed: int = 17) -> int:
    """Deliver ``share`` of the flights twice (the copy up to 20 lines later in its file and in the same hour of
    event time, as an at-least-once link redelivers); the number of lines added."""
    rng = random.Random(seed)
    added = 0
    for path in sorted(directory.glob("*.ndjson")):
        lines = path.read_text().splitlines()
        out: list[str] = []
        pending: list[tuple[int, str]] = []
        hours = [line[line.index('"time_hour"'):] for line in lines]
        for i, line in enumerate(lines):
            out.append(line)
            if rng.random() < share:  # the copy within the same hour of event time, so within the watermark
                later = i + rng.randint(0, 20)
                while later > i and (later >= len(lines) or hours[later] != hours[i]):
                    later -= 1
                pending.append((later, line))
            due = [p for p in pending if p[0] <= i]
            pending = [p for p in pending if p[0] > i]
            out.extend(copy for _, copy in due)
            added += len(due)
        out.extend(copy for _, copy in pending)
        added += len(pending)
        path.write_text("\n".join(out) + "\n")
    return added


def records(directory: Path) -> Counter[str]:
    """The multiset of output records (canonical JSON, numbers as numbers, JSON nulls as missing fields: Spark's
    JSON writer leaves NULL fields out)."""
    found: Counter[str] = Counter()
    for path in directory.rglob("part-*"):
        if path.name.endswith((".crc", ".open")):
            continue
        for line in path.read_text().splitlines():
            record = {k: v for k, v in json.loads(line, parse_int=float).items() if v is not None}
            found[json.dumps(record, sort_keys=True)] += 1
    return found


def windows(directory: Path) -> dict[tuple[str, str], tuple[int, float | None, int | None]]:
    """The results of either side by (origin, window start)."""
    found = {}
    for path in directory.rglob("part-*"):
        if path.name.endswith(".crc") or path.name.endswith(".open"):
            continue
        for line in path.read_text().splitlines():
            r = json.loads(line)
            avg = r.get("avg_dep_delay")
            found[(r["origin"], r["window_start"])] = (r["flights"], None if avg is None else round(avg, 9),
                                                       r.get("max_arr_delay"))
    return found


def alternating_rounds(base: Path, count: int, sides: list[str], run_side: Callable[[str, Path], tuple[float, Any]],
                       check: Callable[[dict[str, Any]], str]) -> dict[str, list[float]]:
    """``count`` rounds of every side, each in a fresh work directory under ``base``, the first side rotating round
    by round; ``run_side(side, work)`` gives its seconds and its output, and ``check(outputs)`` compares the
    outputs (raising ``SystemExit`` where they differ) and says what they hold."""
    times: dict[str, list[float]] = {side: [] for side in sides}
    for r in range(count):
        outputs = {}
        for side in sides[r % len(sides):] + sides[:r % len(sides)]:  # each side goes first in turn
            work = base / f"{side.replace(' ', '-')}-{r}"
            work.mkdir()
            seconds, outputs[side] = run_side(side, work)
            times[side].append(seconds)
        summary = check(outputs)
        print(f"round {r + 1}: " + ", ".join(f"{side} {times[side][-1]:.1f} s" for side in sides) + f"; {summary}",
              flush=True)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flights", type=int, default=336_776)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--work", choices=["windows", "dedupe"], default="windows",
                        help="the daily windows, or a dedupe of redelivered flights (issue 43)")
    args = parser.parse_args()
    if args.work == "dedupe":
        return dedupe_main(args)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def run_side(side: str, work: Path) -> tuple[float, Any]:
        if side == "hand-written":
            seconds = run([sys.executable, "-c", HAND_WRITTEN, str(source), str(work / "out"), str(args.cores),
                           SCHEMA], env)
        else:
            declared = f', schema: "{SCHEMA}"' if side == "edgewise" else ""
            pipeline = work / "flights.yaml"
            pipeline.write_text(PIPELINE.format(source=source, out=work / "out", schema=declared))
            seconds = run([sys.executable, "-m", "edgewise", "spark", str(pipeline), "--once", "--quiet",
                           "--master", f"local[{args.cores}]", "--checkpoint", str(work / "ck")], env)
        return seconds, windows(work / "out")

    def check(results: dict[str, Any]) -> str:
        expected = results["hand-written"]
        for side in ("edgewise", "edgewise-inferred"):
            if results[side] != expected:
                differ = sorted(k for k in expected.keys() | results[side].keys()
                                if expected.get(k) != results[side].get(k))
                raise SystemExit(f"{side} and the hand-written job differ in {len(differ)} windows, e.g. "
                                 f"{differ[0]}: {results[side].get(differ[0])} vs {expected.get(differ[0])}")
        return f"{len(expected):,} windows, equal"

    with tempfile.TemporaryDirectory(prefix="edgewise-flights-") as tmp:
        source = Path(tmp) / "flights"
        write_flights(source, args.flights)
        times = alternating_rounds(Path(tmp), args.rounds, ["edgewise", "hand-written", "edgewise-inferred"],
                                   run_side, check)
    medians = {side: statistics.median(t) for side, t in times.items()}
    result = {"benchmark": "flights-daily-windows-spark-from-process-start", "flights": args.flights,
              "rounds": args.rounds, "cores": args.cores, "python": platform.python_version(),
              **{f"{side.replace('-', '_')}_median_s": round(m, 2) for side, m in medians.items()},
              "edgewise_over_hand_written_time": [round(e / h, 3) for e, h in
                                                  zip(times["edgewise"], times["hand-written"], strict=True)],
              "edgewise_inferred_over_hand_written_time": [round(e / h, 3) for e, h in
                                                           zip(times["edgewise-inferred"], times["hand-written"],
                                                               strict=True)]}
    print(json.dumps(result, indent=1))
    (ROOT / "bench" / "results" / "spark_flights.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


def dedupe_main(args: argparse.Namespace) -> int:
    """``--work dedupe``: a tenth of the flights delivered twice; edgewise's ``dedupe`` on the flight's identity
    (``--once`` on Spark, and the local engine) against a hand-written batch job's ``dropDuplicates`` of it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def run_side(side: str, work: Path) -> tuple[float, Any]:
        if side == "hand-written":
            seconds = run([sys.executable, "-c", HAND_WRITTEN_DEDUPE, str(source), str(work / "out"),
                           str(args.cores), SCHEMA, ",".join(IDENTITY)], env)
        else:
            pipeline = work / "flights.yaml"
            pipeline.write_text(DEDUPE_PIPELINE.format(source=source, out=work / "out", schema=f', schema: "{SCHEMA}"',
                                                       key=", ".join(IDENTITY)))
            command = [sys.executable, "-m", "edgewise", side.split()[1], str(pipeline), "--quiet"]
            if side == "edgewise spark":
                command += ["--once", "--master", f"local[{args.cores}]", "--checkpoint", str(work / "ck")]
            seconds = run(command, env)
        return seconds, records(work / "out")

    def check(results: dict[str, Any]) -> str:
        expected = results["hand-written"]
        if sum(expected.values()) != args.flights:
            raise SystemExit(f"the hand-written job kept {sum(expected.values())} of {args.flights} flights")
        for side in ("edgewise spark", "edgewise run"):
            if results[side] != expected:
                missing, extra = expected - results[side], results[side] - expected
                raise SystemExit(f"{side} and the hand-written job differ: {sum(missing.values())} missing, "
                                 f"{sum(extra.values())} extra, e.g. {next(iter(missing or extra))}")
        return f"{args.flights:,} flights kept of {args.flights + copies:,} lines, equal"

    with tempfile.TemporaryDirectory(prefix="edgewise-flights-") as tmp:
        source = Path(tmp) / "flights"
        write_flights(source, args.flights)
        copies = redeliver(source)
        times = alternating_rounds(Path(tmp), args.rounds, ["edgewise spark", "hand-written", "edgewise run"],
                                   run_side, check)
    medians = {side: statistics.median(t) for side, t in times.items()}
    ratios = [round(e / h, 3) for e, h in zip(times["edgewise spark"], times["hand-written"], strict=True)]
    result = {"benchmark": "flights-dedupe-spark-from-process-start", "flights": args.flights,
              "lines": args.flights + copies, "rounds": args.rounds, "cores": args.cores,
              "python": platform.python_version(),
              "median_s": {side: round(m, 2) for side, m in medians.items()},
              "edgewise_spark_over_hand_written_time": ratios,
              "edgewise_spark_over_hand_written_median": round(statistics.median(ratios), 3),
              "edgewise_spark_over_edgewise_run_median": round(medians["edgewise spark"] / medians["edgewise run"],
                                                               2)}
    print(json.dumps(result, indent=1))
    (ROOT / "bench" / "results" / "spark_flights_dedupe.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
