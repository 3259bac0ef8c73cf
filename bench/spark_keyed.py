"""Spark's keyed steps (``dedupe``, ``aggregate``, ``complete``) against Spark's own operator, counted from process
start: ``edgewise spark --once`` against a hand-written PySpark job doing ``withWatermark(...)
.dropDuplicatesWithinWatermark(["k"])`` with the RocksDB state store, each a fresh process (a new JVM) from start
to exit, on the same NDJSON files, the same cores and the same declared schema. ``edgewise run`` (the local engine)
runs the same pipelines beside them. Rounds alternate the order of the sides.

    .venv/bin/python bench/spark_keyed.py [--events 300000] [--keys 90000] [--rounds 3] [--cores 2]

The input is redelivery, what ``dedupe`` is for: ``--keys`` distinct events (key ``k``, a time ``t`` in ms, a
sequence number, a value and a part ``a``/``b``), each delivered one to a few times, the copies a few seconds of
event time later in the stream (within the 10 s watermark), ``--events`` lines in all over 10 files. Every copy is
the same event, so any kept copy is the right one, and the hand-written job's output must equal edgewise's by
content (checked each round: the multiset of kept events). ``aggregate`` (count and sum per key, written onto each
event) and ``complete`` (parts ``a`` and ``b`` per key, event time, 1 min timeout) run on the same input; the
issue's target compares their time with the same hand-written dedupe job, and their outputs are checked against
the local engine's (by content: the multiset of output records). The start-up help is equal: no side gets Spark's
class archive (``EDGEWISE_SPARK_ARCHIVE=off``), and the dedupe is timed once more with the archive on both sides
(edgewise's, made by one recording run first, given to the hand-written job's JVM by hand: the sides marked
"archive"). ``edgewise spark --once`` over an input this small starts its JVM with Java's quick compiler only
(``sources.short_job``); the comparison is made twice more with the compilers equal: the hand-written job given the
quick compiler too (the side marked "quick"), and edgewise given Java's default back ("optimising").
Writes bench/results/spark_keyed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "src"))

from common import write_result  # noqa: E402
from spark_ysb_start import built_archive, run  # noqa: E402

# what `edgewise spark --once` gives its JVM over an input this small (`sources.short_job`); the "quick" side gives
# the hand-written job the same, by SPARK_SUBMIT_OPTS
from edgewise.engine.spark.session import QUICK_COMPILER  # noqa: E402

SCHEMA = "k STRING, t BIGINT, seq BIGINT, v DOUBLE, part STRING"
OPTIMISING_COMPILER = "-XX:TieredStopAtLevel=4"
"""Java's default, which the "optimising" side gives edgewise back (the last of two options wins)."""

HAND_WRITTEN = r"""
import sys
from pyspark.sql import SparkSession, functions as F
source, out, ck, cores, schema = sys.argv[1:6]
builder = SparkSession.builder
if len(sys.argv) > 6:  # the "archive" side: edgewise's class archive given to this JVM by hand
    builder = builder.config("spark.driver.extraJavaOptions", f"-XX:SharedArchiveFile={sys.argv[6]} -Xlog:cds=off")
spark = (builder.master(f"local[{cores}]").appName("hand-written")
         .config("spark.sql.shuffle.partitions", cores).config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.streaming.stateStore.providerClass",
                 "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
         .config("spark.ui.enabled", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
events = spark.readStream.schema(schema).json(source).withColumn("event_time", F.timestamp_millis("t"))
kept = events.withWatermark("event_time", "10 seconds").dropDuplicatesWithinWatermark(["k"])
query = (kept.drop("event_time").writeStream.format("json").option("path", out).option("checkpointLocation", ck)
         .trigger(availableNow=True).start())
query.awaitTermination()
"""

STEPS = {
    "dedupe": "      - dedupe: {id: once, key: k, within: 60s, watermark: 10s}\n",
    "aggregate": "      - aggregate: {id: per_key, key: [k], aggs: {n: count(), total: sum(v)}, into: running}\n",
    "complete": ("      - complete: {id: pair, key: k, parts: {a: \"part = 'a'\", b: \"part = 'b'\"}, timeout: 1m,\n"
                 "                   watermark: 10s, into: pairing}\n"),
}

PIPELINE = """\
version: 1
sources: [{{id: events, type: file, path: "{source}", schema: "{schema}"}}]
event_time: "timestamp_millis(t)"
pipelines:
  - id: keyed
    steps:
{steps}    to: [out]
sinks: [{{id: out, type: file, path: "{out}", fsync: false}}]
"""


def write_input(directory: Path, events: int, keys: int, files: int = 10, seed: int = 43) -> None:
    """``keys`` events delivered ``events`` times in all: each copy 0–5 s of event time after its original."""
    rng = random.Random(seed)
    copies = [1] * keys
    for _ in range(events - keys):
        copies[rng.randrange(keys)] += 1
    start_ms = 1_700_000_000_000
    deliveries: list[tuple[int, int]] = []  # (delivery time, key index)
    for i in range(keys):
        t = start_ms + i * 20  # 50 new events per second of event time
        deliveries.append((t, i))
        deliveries.extend((t + rng.randrange(5000), i) for _ in range(copies[i] - 1))
    deliveries.sort()
    directory.mkdir(parents=True)
    per_file = -(-len(deliveries) // files)
    for n in range(files):
        with open(directory / f"events-{n:02d}.ndjson", "w") as fh:
            for _, i in deliveries[n * per_file:(n + 1) * per_file]:
                event = {"k": f"key-{i}", "t": start_ms + i * 20, "seq": i, "v": round((i % 97) * 0.5, 1),
                         "part": "a" if i % 3 else "b"}
                fh.write(json.dumps(event, separators=(",", ":")) + "\n")


def records(directory: Path) -> Counter[str]:
    """The multiset of output records, each as canonical JSON."""
    found: Counter[str] = Counter()
    for path in sorted(directory.rglob("*")):
        hidden = any(part.startswith((".", "_")) for part in path.relative_to(directory).parts)  # _spark_metadata
        if not path.is_file() or hidden or path.suffix in (".crc", ".open"):
            continue
        for line in path.read_text().splitlines():
            if line:
                found[json.dumps(json.loads(line, parse_int=float), sort_keys=True)] += 1  # 5 and 5.0: one number
    return found


def make_archive(source: Path, base: Path, env: dict[str, str], cores: int) -> Path:
    """Spark's class archive as edgewise makes it: one run records the driver's classes, its helper builds it."""
    work = base / "archive-run"
    work.mkdir()
    pipeline = work / "keyed.yaml"
    pipeline.write_text(PIPELINE.format(source=source, schema=SCHEMA, steps=STEPS["dedupe"], out=work / "out"))
    run([sys.executable, "-m", "edgewise", "spark", str(pipeline), "--quiet", "--once", "--master", f"local[{cores}]",
         "--checkpoint", str(work / "ck")], env)
    return built_archive(Path(env["EDGEWISE_CACHE_DIR"]))


def input_arguments(parser: argparse.ArgumentParser) -> None:
    """The input's size, the rounds and the cores: the options of this benchmark and of ``spark_keyed_apis.py``."""
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--keys", type=int, default=90_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    input_arguments(parser)
    parser.add_argument("--steps", default="dedupe,aggregate,complete")
    args = parser.parse_args()
    kinds = args.steps.split(",")
    sides = ["hand-written dedupe", "hand-written dedupe archive", "hand-written dedupe quick"]
    sides += [f"edgewise spark {k}" for k in kinds]
    sides += ["edgewise spark dedupe archive", "edgewise spark dedupe optimising"]
    sides += [f"edgewise run {k}" for k in kinds]
    times: dict[str, list[float]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="edgewise-keyed-") as tmp:
        base = Path(tmp)
        # bytecode caches written, as an installed edgewise has them (pip compiles a package's modules as it
        # installs it; PySpark, the hand-written job's one library, has its own): a PYTHONDONTWRITEBYTECODE
        # inherited from this shell would have edgewise's driver and every Python worker compile its modules
        # from source on every run. The first, uncounted run (the archive's) writes them
        env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
               "PYTHONPATH": str(ROOT / "src"), "EDGEWISE_SPARK_ARCHIVE": "off",
               "EDGEWISE_CACHE_DIR": str(base / "cache")}
        source = base / "events"
        write_input(source, args.events, args.keys)
        archive = make_archive(source, base, {**env, "EDGEWISE_SPARK_ARCHIVE": "on"}, args.cores)
        for r in range(args.rounds):
            outputs: dict[str, Counter[str]] = {}
            for side in sides[r % len(sides):] + sides[:r % len(sides)]:
                work = base / f"{side.replace(' ', '-')}-{r}"
                work.mkdir()
                if side.startswith("hand-written"):
                    seconds = run([sys.executable, "-c", HAND_WRITTEN, str(source), str(work / "out"),
                                   str(work / "ck"), str(args.cores), SCHEMA,
                                   *([str(archive)] if side.endswith("archive") else [])],
                                  {**env, "SPARK_SUBMIT_OPTS": QUICK_COMPILER} if side.endswith("quick") else env)
                else:
                    engine, kind = side.split()[1:3]
                    pipeline = work / "keyed.yaml"
                    pipeline.write_text(PIPELINE.format(source=source, schema=SCHEMA, steps=STEPS[kind],
                                                        out=work / "out"))
                    command = [sys.executable, "-m", "edgewise", engine, str(pipeline), "--quiet"]
                    if engine == "spark":
                        command += ["--once", "--master", f"local[{args.cores}]", "--checkpoint", str(work / "ck")]
                    if side.endswith("optimising"):  # Java's default compilers, as the hand-written job has them
                        command += ["--conf", f"spark.driver.extraJavaOptions={OPTIMISING_COMPILER}"]
                    seconds = run(command, {**env, "EDGEWISE_SPARK_ARCHIVE": "on"} if side.endswith("archive")
                                  else env)
                times[side].append(seconds)
                outputs[side] = records(work / "out")
            expected = outputs["hand-written dedupe"]
            checks = [("edgewise spark dedupe", "hand-written dedupe"), ("edgewise run dedupe", "hand-written dedupe"),
                      ("edgewise spark dedupe archive", "hand-written dedupe"),
                      ("hand-written dedupe archive", "hand-written dedupe"),
                      ("hand-written dedupe quick", "hand-written dedupe"),
                      ("edgewise spark dedupe optimising", "hand-written dedupe")]
            checks += [(f"edgewise spark {k}", f"edgewise run {k}") for k in kinds if k != "dedupe"]
            for side, oracle in checks:
                if side in outputs and outputs[side] != outputs[oracle]:
                    missing = outputs[oracle] - outputs[side]
                    extra = outputs[side] - outputs[oracle]
                    raise SystemExit(f"{side} and {oracle} differ: {sum(missing.values())} records missing, e.g. "
                                     f"{next(iter(missing), None)}; {sum(extra.values())} extra, e.g. "
                                     f"{next(iter(extra), None)}")
            print(f"round {r + 1}: " + ", ".join(f"{side} {times[side][-1]:.1f} s" for side in sides)
                  + f"; {sum(expected.values()):,} events kept, outputs equal", flush=True)
    medians = {side: statistics.median(t) for side, t in times.items()}
    baseline = times["hand-written dedupe"]
    result: dict[str, Any] = {
        "benchmark": "spark-keyed-steps-from-process-start", "events": args.events, "keys": args.keys,
        "rounds": args.rounds, "cores": args.cores,
        "median_s": {side: round(m, 2) for side, m in medians.items()},
        "spark_over_hand_written_time": {
            k: [round(e / h, 3) for e, h in zip(times[f"edgewise spark {k}"], baseline, strict=True)] for k in kinds},
        "spark_over_hand_written_median": {
            k: round(statistics.median(e / h for e, h in zip(times[f"edgewise spark {k}"], baseline, strict=True)), 3)
            for k in kinds},
        "with the archive on both sides: spark_over_hand_written_median": {
            "dedupe": round(statistics.median(e / h for e, h in zip(times["edgewise spark dedupe archive"],
                                                                    times["hand-written dedupe archive"],
                                                                    strict=True)), 3)},
        "with the quick compiler on both sides: spark_over_hand_written_median": {
            "dedupe": round(statistics.median(e / h for e, h in zip(times["edgewise spark dedupe"],
                                                                    times["hand-written dedupe quick"],
                                                                    strict=True)), 3)},
        "with the optimising compiler on both sides: spark_over_hand_written_median": {
            "dedupe": round(statistics.median(e / h for e, h in zip(times["edgewise spark dedupe optimising"],
                                                                    baseline, strict=True)), 3)},
        "spark_over_local_time_median": {
            k: round(medians[f"edgewise spark {k}"] / medians[f"edgewise run {k}"], 2) for k in kinds},
    }
    write_result(str(ROOT / "bench" / "results" / "spark_keyed.json"), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
