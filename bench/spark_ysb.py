"""YSB on Spark: the compiled edgewise pipelines against hand-written PySpark jobs doing the same work, and against
the local engine, on the same input (a spool of NDJSON segments) and the same cores, in one invocation.

* stateless: keep views, join the campaign table (broadcast), project ``campaign_id, ad_id, event_time``;
* windowed: the same, then count views per campaign in 10 s event-time tumbling windows.

Each Spark job reads the whole spool with ``availableNow`` from a fresh checkpoint and writes its results through
``foreachBatch`` (edgewise: its writer, counting into the driver; hand-written: ``count()`` per batch). Rounds
alternate the implementations; every round checks that they produced the same number of results. Then the
micro-batch latency: a continuous job over one segment per micro-batch, p50/p99 of the batches' duration.

    .venv/bin/python bench/spark_ysb.py [--events 400000] [--rounds 3] [--cores 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from common import YSB, campaign_table, timed  # noqa: E402

from edgewise.config import load  # noqa: E402
from edgewise.sources.file import FileSourceConfig  # noqa: E402

SCHEMA = ("user_id STRING, page_id STRING, ad_id STRING, ad_type STRING, event_type STRING, event_time STRING, "
          "ip_address STRING")


def write_spool(directory: Path, events: int, segments: int) -> None:
    import orjson

    from edgewise.sources.ysb import YsbWorkload

    directory.mkdir(parents=True)
    per = events // segments
    it = YsbWorkload(seed=1).events(events)
    for s in range(segments):
        path = directory / f"part-{s:05d}.ndjson"
        path.write_bytes(b"".join(orjson.dumps(next(it)) + b"\n" for _ in range(per)))
        os.utime(path, (1_000_000 + s, 1_000_000 + s))


INFER_TYPES = False
"""``--infer-types``: the edgewise source does not declare the schema (types from a sample of the input, and the
reads checked against later values); by default it declares what the hand-written job gives ``from_json``."""


def edgewise_job(spark: Any, pipeline: str, spool: Path, work: Path, max_files: int | None = None,
                 once: bool = True, flush: bool = False) -> Any:
    """The edgewise job for YSB's ``pipeline`` over ``spool``; ``flush``: what ``--once`` does without
    ``--keep-open`` (the windows still open at the end come out too)."""
    from edgewise.engine.spark.job import SparkJob, SparkOptions
    from edgewise.sinks.file import FileSink, FileSinkConfig

    plan = load(str(YSB / pipeline))
    shutil.rmtree(work, ignore_errors=True)
    out = FileSinkConfig(id="out", type="file", path=str(work / "out"), fsync=False)
    source = {"id": "ads", "type": "file", "path": str(spool)} | ({} if INFER_TYPES else {"schema": SCHEMA})
    plan = dataclasses.replace(plan, sources=[FileSourceConfig.model_validate(source)],
                               sinks={"out": out}, sink_classes={"out": FileSink},
                               pipelines=[dataclasses.replace(p, to=["out"]) for p in plan.pipelines])
    job = SparkJob(spark, plan, SparkOptions(checkpoint=str(work / "ck"), once=once, max_files_per_trigger=max_files,
                                             flush=flush))
    return job


def count_lines(directory: Path) -> int:
    total = 0
    for path in directory.rglob("part-*"):
        if not path.name.endswith(".crc"):
            with open(path, "rb") as fh:
                total += sum(1 for _ in fh)
    return total


def run_edgewise(spark: Any, pipeline: str, spool: Path, work: Path) -> tuple[int, float]:
    """(results, seconds the job took to start: compiling and, on a new checkpoint, inferring input types);
    the caller times the whole call."""
    start = time.perf_counter()
    job = edgewise_job(spark, pipeline, spool, work)
    started = time.perf_counter() - start
    job.run()
    return count_lines(work / "out"), started


def hand_written_query(spark: Any, windowed: bool, spool: Path, work: Path, max_files: int | None = None) -> Any:
    """What a PySpark developer writes for YSB: from_json with the schema, filter, broadcast join, (window)."""
    from pyspark.sql import functions as F

    table = campaign_table()
    campaigns = spark.createDataFrame(list(table.items()), "ad_id STRING, campaign_id STRING")
    reader = spark.readStream.format("text")
    if max_files is not None:
        reader = reader.option("maxFilesPerTrigger", str(max_files))
    events = reader.load(str(spool)).select(F.from_json("value", SCHEMA).alias("e")).select("e.*")
    views = events.where(F.col("event_type") == "view").join(F.broadcast(campaigns), "ad_id", "left")
    if windowed:
        out = (views.withColumn("ts", F.timestamp_millis(F.col("event_time").cast("bigint")))
               .withWatermark("ts", "0 seconds").groupBy(F.window("ts", "10 seconds"), "campaign_id").count())
    else:
        out = views.select(F.to_json(F.struct("campaign_id", "ad_id", "event_time")).alias("value"))
    if windowed:
        out = out.select(F.to_json(F.struct("campaign_id", F.col("window.start").alias("window_start"),
                                            F.col("window.end").alias("window_end"), "count")).alias("value"))

    def write(batch: Any, batch_id: int) -> None:  # one file per micro-batch, as the edgewise file sink writes
        batch.coalesce(1).write.mode("overwrite").text(str(work / "out" / f"b{batch_id}"))

    shutil.rmtree(work, ignore_errors=True)
    return out.writeStream.foreachBatch(write).option("checkpointLocation", str(work / "ck")).outputMode("append")


def run_hand_written(spark: Any, windowed: bool, spool: Path, work: Path) -> int:
    hand_written_query(spark, windowed, spool, work).trigger(availableNow=True).start().awaitTermination()
    return count_lines(work / "out")


def run_local(pipeline: str, spool: Path) -> int:
    from edgewise.clock import SystemClock
    from edgewise.engine.local import LocalEngine
    from edgewise.sources.base import SourceContext
    from edgewise.sources.lines import line_batches

    plan = load(str(YSB / pipeline))
    engine = LocalEngine(plan, stdout=io.BytesIO(), errors=io.StringIO())
    engine.open()
    ctx = SourceContext(SystemClock(), print, batch_size=1024)
    for path in sorted(spool.glob("*.ndjson")):
        with open(path, "rb") as fh:
            for batch in line_batches(fh, source_id="ads", id_prefix="ads:", where=str(path), decoder=None, ctx=ctx):
                engine.process(batch)
    if not pipeline.startswith("windowed"):
        engine.close()
        return sum(engine.stats.events_out.values())
    # compare windows closed by the input, as the Spark jobs (no end-of-input flush) give them
    closed = sum(engine.stats.events_out.values())
    engine.close()
    return closed


def latency(spark: Any, pipeline: str, spool: Path, work: Path, batches: int) -> dict[str, float]:
    job = edgewise_job(spark, pipeline, spool, work, max_files=1, once=False)
    queries = job.start()
    query = queries[0]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        if len(progress) >= batches:
            break
        time.sleep(0.5)
    job.stop()
    durations = sorted(p["durationMs"]["triggerExecution"] for p in query.recentProgress if p["numInputRows"] > 0)
    # maxFilesPerTrigger=1: each micro-batch is one segment of 2,000 events
    return {"batches": len(durations), "events_per_batch": 2_000,
            "p50_ms": durations[len(durations) // 2], "p99_ms": durations[min(len(durations) - 1,
                                                                                int(len(durations) * 0.99))]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--segments", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--latency-batches", type=int, default=30)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "spark_ysb.json"))
    parser.add_argument("--infer-types", action="store_true",
                        help="edgewise types the input from a sample instead of declaring the hand-written schema")
    args = parser.parse_args()
    global INFER_TYPES
    INFER_TYPES = args.infer_types
    os.environ.setdefault("EDGEWISE_SPARK_LOG_LEVEL", "OFF")
    from edgewise.engine.spark.session import spark_session

    spark = spark_session(f"local[{args.cores}]", app="edgewise-bench", shuffle_partitions=args.cores)
    work = Path(tempfile.mkdtemp(prefix="edgewise-spark-bench-"))
    try:
        spool = work / "spool"
        write_spool(spool, args.events, args.segments)
        result: dict[str, Any] = {"benchmark": "spark-ysb", "events": args.events, "segments": args.segments,
                                  "cores": args.cores, "rounds": args.rounds}
        # warm-up: the JVM's JIT and the session's caches, for every implementation
        run_edgewise(spark, "pipeline.yaml", spool, work / "warm1")
        run_edgewise(spark, "windowed.yaml", spool, work / "warm3")
        run_hand_written(spark, False, spool, work / "warm2")
        for name, pipeline, windowed in (("stateless", "pipeline.yaml", False), ("windowed", "windowed.yaml", True)):
            times: dict[str, list[float]] = {"edgewise": [], "hand_written": [], "local": [], "start": []}
            for r in range(args.rounds):
                t_e, (n_e, t_start) = timed(run_edgewise, spark, pipeline, spool, work / "e")
                times["start"].append(t_start)
                t_h, n_h = timed(run_hand_written, spark, windowed, spool, work / "h")
                t_l, n_l = timed(run_local, pipeline, spool)
                if n_e != n_h:
                    raise SystemExit(f"{name}: edgewise gave {n_e} results, hand-written PySpark {n_h}")
                times["edgewise"].append(t_e - t_start)
                times["hand_written"].append(t_h)
                times["local"].append(t_l)
                print(f"{name} round {r + 1}: edgewise {args.events / (t_e - t_start):,.0f} ev/s (+{t_start:.1f} s "
                      f"to start), hand-written "
                      f"{args.events / t_h:,.0f} ev/s, local engine {args.events / t_l:,.0f} ev/s "
                      f"({n_e} results; local {n_l})", file=sys.stderr)
            ratios = [h / e for h, e in zip(times["hand_written"], times["edgewise"], strict=True)]
            local_ratios = [lo / e for lo, e in zip(times["local"], times["edgewise"], strict=True)]
            result[name] = {
                "edgewise_spark_events_per_s_median": round(args.events / statistics.median(times["edgewise"])),
                "hand_written_pyspark_events_per_s_median":
                    round(args.events / statistics.median(times["hand_written"])),
                "local_engine_events_per_s_median": round(args.events / statistics.median(times["local"])),
                "edgewise_vs_hand_written_ratio_median": round(statistics.median(ratios), 3),
                "edgewise_vs_hand_written_ratio_min": round(min(ratios), 3),
                "edgewise_vs_hand_written_ratio_max": round(max(ratios), 3),
                "edgewise_spark_vs_local_engine_ratio_median": round(statistics.median(local_ratios), 3),
                "edgewise_start_s_median": round(statistics.median(times["start"]), 2),
                "note": "edgewise times exclude the job's start (compiling; with --infer-types, typing a sample "
                        "of the input), reported as edgewise_start_s_median; "
                        + ("edgewise infers the types the hand-written job declares" if INFER_TYPES else
                           "both declare the same schema"),
            }
        small = work / "small"
        write_spool(small, args.latency_batches * 2_000, args.latency_batches)  # 2,000 events per segment
        result["latency"] = {name: latency(spark, pipeline, small, work / f"lat-{name}", args.latency_batches)
                             for name, pipeline in (("stateless", "pipeline.yaml"), ("windowed", "windowed.yaml"))}
        result["python"] = platform.python_version()
        result["spark"] = spark.version
        result["machine"] = f"{platform.machine()}, {os.cpu_count()} cores"
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
