"""What Spark compiles and analyses for YSB: edgewise's query against the hand-written PySpark job's.

Counts that do not move with the machine's load, beside the times that do: the Java source Spark generates for
each side's queries (characters, classes compiled) and the milliseconds its compiler took (Spark's
``CodegenMetrics``), and the py4j round trips of building the query, with the seconds the slowest of them took.
Each side runs in a fresh process (a new JVM) on the same spool, with the same declared schema, as in
``bench/spark_ysb_start.py``:

    .venv/bin/python bench/spark_codegen.py [--events 100000] [--rounds 1]

Writes bench/results/spark_codegen.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from spark_ysb import write_spool  # noqa: E402

CHILD = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[4])
side, kind, spool, _, work = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4], Path(sys.argv[5])
import py4j.clientserver as cs
calls = []
send = cs.ClientServerConnection.send_command
def timed(self, command):
    t = time.perf_counter()
    try:
        return send(self, command)
    finally:
        calls.append(time.perf_counter() - t)
if side == "hand-written":
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").appName("hand-written")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false").getOrCreate())
else:
    from edgewise.engine.spark.session import spark_session
    spark = spark_session("local[2]")
spark.sparkContext.setLogLevel("ERROR")
metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
def codegen():  # the snapshots hold up to 1,028 values each (Spark's histograms): far more than one job compiles
    compile_ms, source = metrics.METRIC_COMPILATION_TIME(), metrics.METRIC_SOURCE_CODE_SIZE()
    return source.getCount(), sum(source.getSnapshot().getValues()), sum(compile_ms.getSnapshot().getValues())
before = codegen()
cs.ClientServerConnection.send_command = timed
started = time.perf_counter()
if side == "hand-written":
    from spark_ysb import hand_written_query
    query = hand_written_query(spark, kind == "windowed", spool, work).trigger(availableNow=True)
else:
    import spark_ysb
    query = spark_ysb.edgewise_job(spark, "windowed.yaml" if kind == "windowed" else "pipeline.yaml", spool, work,
                                   flush=True)  # as `edgewise spark --once` runs it
built = time.perf_counter() - started
cs.ClientServerConnection.send_command = send
query.start().awaitTermination() if side == "hand-written" else query.run()
after = codegen()
print(json.dumps({"classes_compiled": after[0] - before[0], "java_source_chars": after[1] - before[1],
                  "compile_ms": after[2] - before[2], "build_s": round(built, 2), "build_round_trips": len(calls),
                  "build_round_trips_over_10ms_s": round(sum(c for c in calls if c > 0.01), 2)}))
"""


def measure(side: str, kind: str, spool: Path, work: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", CHILD, side, kind, str(spool), str(ROOT / "bench"), str(work)],
                          env=env, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{side} {kind} failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    results: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="edgewise-codegen-") as tmp:
        spool = Path(tmp) / "spool"
        write_spool(spool, args.events, 10)
        for kind in ("stateless", "windowed"):
            for side in ("hand-written", "edgewise"):
                rounds = [measure(side, kind, spool, Path(tmp) / f"{kind}-{side}-{r}") for r in range(args.rounds)]
                results.setdefault(kind, {})[side] = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
                print(f"{kind} {side}: {results[kind][side]}", file=sys.stderr, flush=True)
    result = {"benchmark": "spark-codegen", "events": args.events, "rounds": args.rounds, **results}
    (ROOT / "bench" / "results" / "spark_codegen.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
