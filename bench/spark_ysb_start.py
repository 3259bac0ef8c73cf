"""YSB on Spark counted from process start: ``edgewise spark PIPELINE --once`` against a hand-written PySpark
script doing the same work, each a fresh process (a new JVM) from start to exit, on the same spool, the same
cores and the same declared knowledge of the input (the edgewise source declares the schema the hand-written job
passes to ``from_json``, so neither reads the input to type it). Rounds alternate; every round checks that both
wrote the same number of results.

    .venv/bin/python bench/spark_ysb_start.py [--events 400000] [--rounds 3] [--cores 2]

The hand-written job is what a PySpark developer writes (``bench/spark_ysb.py``'s query): ``from_json`` with the
schema, filter, broadcast join of the campaign table, (10 s windows with a watermark), ``availableNow``, one output
file per micro-batch; its session sets the master and ``spark.sql.shuffle.partitions`` to the cores and keeps Spark's
other defaults. Windowed, edgewise runs twice: ``--once`` also writes the 100 windows still open at the end, which
the hand-written job leaves in its state; ``--once --keep-open`` leaves them too (the same work; checked).

edgewise's driver JVM maps the archive of Spark's classes that an earlier run on the install recorded
(``engine/spark/startup.py``). The benchmark makes it first, in its own cache directory: one edgewise run records
the classes, and its helper builds the archive (both timed, in ``archive``). Every round then also runs edgewise
without it (``EDGEWISE_SPARK_ARCHIVE=off``), as the first run on an install does (the sides marked "no-archive"),
and the hand-written job with the same archive given to its JVM by hand ("hand-written archive"): how much of the
difference is the archive.
Writes bench/results/spark_ysb_start.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from common import YSB, campaign_table  # noqa: E402
from spark_ysb import SCHEMA, count_lines, write_spool  # noqa: E402

from edgewise.engine.spark.startup import StartupArchive  # noqa: E402

HAND_WRITTEN = r"""
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[5])
from pyspark.sql import SparkSession
from spark_ysb import hand_written_query
cores = sys.argv[4]
builder = (SparkSession.builder.master(f"local[{cores}]").appName("hand-written")
           .config("spark.sql.shuffle.partitions", cores).config("spark.ui.enabled", "false"))
if len(sys.argv) > 6:  # the "hand-written archive" side: edgewise's class archive given to this JVM by hand
    builder = builder.config("spark.driver.extraJavaOptions", f"-XX:SharedArchiveFile={sys.argv[6]} -Xlog:cds=off")
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
query = hand_written_query(spark, sys.argv[1] == "windowed", Path(sys.argv[2]), Path(sys.argv[3]))
query.trigger(availableNow=True).start().awaitTermination()
"""


def pipeline_file(kind: str, spool: Path, out: Path, directory: Path) -> Path:
    """The example pipeline reading the spool with the hand-written job's schema declared, into a file sink."""
    import yaml

    doc = yaml.safe_load((YSB / ("windowed.yaml" if kind == "windowed" else "pipeline.yaml")).read_text())
    doc["sources"] = [{"id": "ads", "type": "file", "path": str(spool), "schema": SCHEMA}]
    doc["sinks"] = [{"id": "out", "type": "file", "path": str(out), "fsync": False}]
    for pipeline in doc["pipelines"]:
        pipeline["to"] = ["out"]
        for step in pipeline["steps"]:
            if "lookup" in step:
                step["lookup"]["table"] = str(YSB / step["lookup"]["table"])
    path = directory / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def make_archive(spool: Path, base: Path, env: dict[str, str], cores: int) -> tuple[Path, dict[str, float]]:
    """One edgewise run that records the driver's classes, then the wait for its helper's archive."""
    work = base / "archive-run"
    work.mkdir()
    pipeline = pipeline_file("stateless", spool, work / "out", work)
    first = run([sys.executable, "-m", "edgewise", "spark", str(pipeline), "--once", "--quiet", "--master",
                 f"local[{cores}]", "--checkpoint", str(work / "ck")], env)
    started = time.perf_counter()
    archive = built_archive(Path(env["EDGEWISE_CACHE_DIR"]))
    return archive, {
        "recording_run_s": round(first, 2), "build_after_exit_s": round(time.perf_counter() - started, 1),
        "size_mb": round(archive.stat().st_size / 1e6)}


def built_archive(cache: Path) -> Path:
    """The class archive a recording run's helper builds in the cache ``cache``, once it is there."""
    (directory,) = (cache / "spark-startup").iterdir()
    archive = StartupArchive(directory)
    while archive.lock.exists():
        time.sleep(0.2)
    if not archive.archive.exists():
        raise SystemExit(f"no class archive was made: {archive.build_log}")
    return archive.archive


def compare(edgewise: list[float], hand_written: list[float]) -> dict[str, float]:
    ratios = [h / e for e, h in zip(edgewise, hand_written, strict=True)]
    return {"edgewise_median_s": round(statistics.median(edgewise), 2),
            "hand_written_median_s": round(statistics.median(hand_written), 2),
            "speed_ratio_median_of_rounds": round(statistics.median(ratios), 3),
            "ratio_min": round(min(ratios), 3), "ratio_max": round(max(ratios), 3)}


def run(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{command[:4]} failed:\n{done.stderr[-3000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--segments", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="edgewise-ysb-start-") as tmp:
        base = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "EDGEWISE_CACHE_DIR": str(base / "cache")}
        env.pop("EDGEWISE_SPARK_ARCHIVE", None)
        spool = base / "spool"
        write_spool(spool, args.events, args.segments)
        archive, results["archive"] = make_archive(spool, base, env, args.cores)
        for kind in ("stateless", "windowed"):
            # windowed: `--once` also closes the windows still open at the end of the input (one per campaign),
            # which the hand-written availableNow job leaves in its state; `--once --keep-open` leaves them too,
            # so it does the same work as the hand-written job (the like-for-like comparison)
            sides = ["edgewise", "hand-written"] + (["edgewise --keep-open"] if kind == "windowed" else [])
            sides.append(f"{sides[-1] if kind == 'windowed' else 'edgewise'} no-archive")
            sides.append("hand-written archive")
            times: dict[str, list[float]] = {side: [] for side in sides}
            for r in range(args.rounds):
                order = sides[r % len(sides):] + sides[:r % len(sides)]
                counts = {}
                for side in order:
                    work = base / f"{kind}-{side.replace(' --', '-').replace(' ', '-')}-{r}"
                    work.mkdir()
                    if side.startswith("edgewise"):
                        pipeline = pipeline_file(kind, spool, work / "out", work)
                        options = [word for word in side.split()[1:] if word.startswith("--")]
                        side_env = {**env, "EDGEWISE_SPARK_ARCHIVE": "off"} if "no-archive" in side else env
                        seconds = run([sys.executable, "-m", "edgewise", "spark", str(pipeline), "--once", "--quiet",
                                       "--master", f"local[{args.cores}]", "--checkpoint", str(work / "ck"),
                                       *options], side_env)
                    else:
                        seconds = run([sys.executable, "-c", HAND_WRITTEN, kind, str(spool), str(work),
                                       str(args.cores), str(ROOT / "bench"),
                                       *([str(archive)] if side.endswith("archive") else [])], env)
                    times[side].append(seconds)
                    counts[side] = count_lines(work / "out")
                extra = len(set(campaign_table().values())) if kind == "windowed" else 0
                flushes = ("edgewise", "edgewise no-archive")  # --once without --keep-open
                expected = {side: counts["hand-written"] + (extra if side in flushes else 0) for side in sides}
                if counts != expected:
                    raise SystemExit(f"{kind}: results differ: {counts}, expected {expected}")
                print(f"{kind} round {r + 1}: " + ", ".join(f"{side} {times[side][-1]:.1f} s" for side in sides)
                      + f"; {counts['hand-written']:,} results (hand-written)", flush=True)
            for side in sides:
                if side.startswith("hand-written"):
                    continue
                name = " ".join([kind, *(word.lstrip("-") for word in side.split()[1:])])
                results[name] = compare(times[side], times["hand-written"])
                if "no-archive" not in side:  # both JVMs mapping the archive
                    results[f"{name} vs hand-written archive"] = compare(times[side], times["hand-written archive"])
    result = {"benchmark": "ysb-spark-from-process-start", "events": args.events, "segments": args.segments,
              "rounds": args.rounds, "cores": args.cores, "python": platform.python_version(), **results}
    print(json.dumps(result, indent=1))
    (ROOT / "bench" / "results" / "spark_ysb_start.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
