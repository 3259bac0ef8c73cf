"""Where the seconds of ``edgewise spark PIPELINE --once`` go, phase by phase, in one fresh process.

    .venv/bin/python bench/spark_once_phases.py [--pipeline examples/ysb/windowed.yaml] [--rounds 3]

Each round is a new process (a new JVM) with a new checkpoint. Phases, in the order ``edgewise spark`` runs them:
Python start and imports up to loading the pipeline file; the Spark session (JVM start); the job's construction
split into input preparation and type inference (a generator's spool is written, then one Spark job over the input
to type its fields) and compiling the queries; then each micro-batch as Spark reports it (``durationMs``
``triggerExecution``), and the rest of the run (query start, waiting, stopping). Medians over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
started = float(sys.argv[3])
marks = {}
def mark(name):
    marks[name] = time.time() - started - sum(marks.values())
from edgewise.config import load
from edgewise.engine.spark.job import SparkJob, SparkOptions
from edgewise.engine.spark.session import spark_session
plan = load(sys.argv[1])
mark("python start, imports, load")
spark = spark_session(None, app="phases")
mark("spark session (JVM)")
original = SparkJob._input_types
def timed_types(self):
    t = time.time(); out = original(self); marks["input + type inference"] = time.time() - t; return out
SparkJob._input_types = timed_types
job = SparkJob(spark, plan, SparkOptions(checkpoint=sys.argv[2], once=True))
mark("compile")
job.run()
mark("run")
micro = [p["durationMs"]["triggerExecution"] / 1000 for c in job.compiled for p in c.query.recentProgress]
print(json.dumps({"marks": marks, "micro_batches_s": micro, "total": time.time() - started}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline", type=Path, default=ROOT / "examples" / "ysb" / "windowed.yaml")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rounds = []
    for i in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="edgewise-phases-") as tmp:
            started = time.time()
            done = subprocess.run([sys.executable, "-c", CHILD, str(args.pipeline), str(Path(tmp) / "ck"),
                                   str(started)], cwd=ROOT, capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
            if done.returncode != 0:
                raise SystemExit(done.stderr[-3000:])
            result = json.loads(done.stdout.strip().splitlines()[-1])
            rounds.append(result)
            print(f"round {i + 1}: {result['total']:.1f} s", {k: round(v, 1) for k, v in result["marks"].items()},
                  "micro-batches", [round(s, 1) for s in result["micro_batches_s"]], flush=True)
    phases = {k: round(statistics.median(r["marks"][k] for r in rounds), 2) for k in rounds[0]["marks"]}
    batches = [round(statistics.median(r["micro_batches_s"][j] for r in rounds), 2)
               for j in range(min(len(r["micro_batches_s"]) for r in rounds))]
    result = {"pipeline": str(args.pipeline.relative_to(ROOT)), "rounds": args.rounds, "cpus": os.cpu_count(),
              "median_total_s": round(statistics.median(r["total"] for r in rounds), 2), "median_phases_s": phases,
              "median_micro_batches_s": batches}
    print(json.dumps(result, indent=1))
    (ROOT / "bench" / "results" / "spark_once_phases.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
