"""Writing a micro-batch: one ``foreachBatch`` per pipeline, idempotent by batch id and event id.

A micro-batch Spark replays after a crash holds the same rows, so every write is one that a replay repeats
harmlessly:

* ``file``: the batch's records go to ``part-b<batch id>-<pipeline>.ndjson``, written aside and renamed into
  place (a replay rewrites the same file with the same lines);
* ``parquet``: ``<path>/batch=<id>/`` is overwritten;
* every other sink (``postgres``, ``sqlite``, ``http``, ``nats``, ``redis``, ``mqtt``, ``edgewise``) is the local
  engine's own sink class, run on the executors partition by partition, with its retries; each of them writes
  idempotently by event id (upsert, ``Nats-Msg-Id``, an id check), so a replayed batch writes nothing twice.

Rows reach the writer as ``(id, event_time, source, _to, _record, _late_at)``: ``_to`` is ``''`` for the
pipeline's results (they go to each of its ``to`` sinks, or to stdout) or the sink a step routed the row to.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from edgewise.engine.spark.frame import MALFORMED, MALFORMED_METRIC
from edgewise.engine.spark.progress import Unseen
from edgewise.engine.spark.steps import STATELESS
from edgewise.engine.spark.windows import LATE_ROUTE
from edgewise.errors import SinkError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row
    from pyspark.sql.streaming.query import StreamingQuery

    from edgewise.config.plan import Plan
    from edgewise.steps.base import Step

RESULTS = ""
NATIVE_STATEFUL = ("window", "dedupe", "aggregate", "complete")
"""Stateful steps the job compiles itself; they route only to their ``on_error`` and ``late`` sinks."""

Collector = Callable[[str, int, list[tuple[str, str]]], None]
"""Receives (sink id, or ``RESULTS`` for the pipeline's results; batch id; [(event id, record JSON)]) instead of
the sinks (``edgewise test``)."""


@dataclass
class BatchStats:
    batches: int = 0
    written: dict[str, int] = field(default_factory=dict)
    malformed: int = 0
    late: dict[str, int] = field(default_factory=dict)


END = "_end"
"""``_to`` of the end-of-input marker (``job.py``): never written."""


def possible_routes(plan: Plan, pipeline_id: str) -> list[str]:
    """Every ``_to`` a pipeline's rows can have, known from its steps (no pass over a batch to find them)."""
    routes = [RESULTS, MALFORMED]
    for step in plan.pipeline(pipeline_id).steps:
        routes += step_routes(plan, step)
    return list(dict.fromkeys(routes))


def step_routes(plan: Plan, step: Step) -> list[str]:
    """The sinks (``_to``) a step can route rows to."""
    config = step.config
    routes = []
    if config.on_error not in ("fail", "skip"):
        routes.append(config.on_error)
    if step.kind == "tee":
        routes.append(config.to)  # type: ignore[attr-defined]
    if step.kind == "window" and config.late != "drop":  # type: ignore[attr-defined]
        routes.append(LATE_ROUTE + config.late)  # type: ignore[attr-defined]
    if step.kind not in STATELESS and step.kind not in NATIVE_STATEFUL:
        routes += list(plan.sinks)  # a step run in Python (spawn, a plugin) may send to any sink
    return routes


def late_watermark_us(checkpoint: str, batch_id: int) -> int | None:
    """The watermark Spark drops late rows by in ``batch_id``: the micro-batch's own (one watermark for late rows
    and eviction, ``session.py``), from the checkpoint's offset log, so a replayed batch decides the same."""
    return batch_watermark_us(checkpoint, batch_id)


def batch_watermark_us(checkpoint: str, batch_id: int) -> int | None:
    """The watermark of ``batch_id``, from the checkpoint's offset log."""
    path = os.path.join(checkpoint, "offsets", str(batch_id))
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines[1:2]:
        try:
            meta = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        if isinstance(meta, dict) and "batchWatermarkMs" in meta:
            return int(meta["batchWatermarkMs"]) * 1000
    return None


def _examples(rows: list[Any]) -> str:
    """The first malformed lines of a micro-batch, as a report shows them."""
    return "; ".join(f"{r['id']}: {r['_record'][:80]!r}" for r in rows[:5])


class BatchWriter:
    """The ``foreachBatch`` function of one pipeline's query."""

    def __init__(self, plan: Plan, pipeline_id: str, checkpoint: str, *, collect: Collector | None = None,
                 stdout: Any = None, report: Callable[[str], None] | None = None,
                 malformed_upstream: bool = False, after_shuffle: bool = False) -> None:
        self.plan = plan
        self.pipeline = plan.pipeline(pipeline_id)
        self.checkpoint = checkpoint
        self.collect = collect
        self.stdout = stdout
        self.report = report or (lambda text: print(text, file=sys.stderr))
        self.stats = BatchStats()
        self.routes = possible_routes(plan, pipeline_id)
        self.written_by_batch: dict[int, dict[str, int]] = {}
        """Rows written per sink in each micro-batch (``progress.MicroBatchLines`` reports them)."""
        self.malformed_upstream = malformed_upstream
        """The query counts malformed lines before they reach the writer (``frame.count_malformed``)."""
        self.after_shuffle = after_shuffle
        """The rows come out of a stateful operator, which runs one task per shuffle partition: a file segment then
        gathers them with a shuffle of its own (``_file``)."""
        self.query: StreamingQuery | None = None
        """The query it writes for (set when it starts): its progress holds the malformed lines counted upstream."""
        self._unseen = Unseen()

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        if self.malformed_upstream and self.query is not None:
            # the micro-batches before this one are complete: their metrics are in
            self.take_progress(self.query.recentProgress)
        before = dict(self.stats.written)
        if self.collect is not None:
            self._collect_routes(batch, batch_id)
        elif self._one_pass():
            self._write_one_pass(batch, batch_id)
        else:
            batch = batch.persist()  # computed once, then each route reads its rows from the cache
            try:
                for route in self.routes:
                    self._write_route(route, batch, batch_id)
            finally:
                batch.unpersist()
        self.stats.batches += 1
        self.written_by_batch[batch_id] = {sink: n - before.get(sink, 0) for sink, n in self.stats.written.items()}

    def take_progress(self, progress: list[Any]) -> None:
        """Report the malformed lines counted upstream (``count_malformed``) in micro-batches not yet reported."""
        for p in self._unseen.take(progress):
            metrics = (p.get("observedMetrics") or {}).get(MALFORMED_METRIC)
            if metrics is not None and metrics["lines"]:
                self._malformed(int(metrics["lines"]), f"e.g. {metrics['example'][:80]!r}")

    def _malformed(self, count: int, shown: str) -> None:
        self.stats.malformed += count
        self.report(f"pipeline {self.pipeline.id}: {count} malformed input records skipped ({shown})")

    def _destinations(self) -> list[str]:
        return [RESULTS] if self.collect is not None else list(self.pipeline.to or ["stdout"])

    def _one_pass(self) -> bool:
        """The results go to one place and nothing else is routed (malformed lines are only counted): one pass
        over the micro-batch writes them, counting the malformed lines on the way, without caching the batch.
        Only where that write is a DataFrame action (collected, a file, a Parquet table): the count is an
        ``Observation``, which a ``foreachPartition`` (an RDD action) never completes."""
        destinations = self._destinations()
        if len(destinations) != 1 or not set(self.routes) <= {RESULTS, MALFORMED}:
            return False
        sink = self.plan.sinks.get(destinations[0])
        return sink is not None and sink.type in ("file", "parquet")

    def _collect_routes(self, batch: DataFrame, batch_id: int) -> None:
        """``edgewise test``: the micro-batch collected once and its rows routed here, as ``_write_route`` routes
        them in Spark (one Spark job a micro-batch, where a job per route made each one plan the batch again)."""
        collect = self.collect
        assert collect is not None
        by_route: dict[str, list[Any]] = {}
        for row in batch.select("id", "_to", "_record", "_late_at").collect():
            by_route.setdefault(row["_to"], []).append(row)
        for route in self.routes:
            rows = by_route.get(route, [])
            if route == MALFORMED:
                if rows:
                    self._malformed(len(rows), _examples(rows))
                continue
            if route == END:
                continue
            sink_id = route
            if route.startswith(LATE_ROUTE):
                watermark = late_watermark_us(self.checkpoint, batch_id)
                rows = [] if watermark is None else [
                    r for r in rows if r["_late_at"] is not None and r["_late_at"] <= watermark]
                sink_id = route[len(LATE_ROUTE):]
                self.stats.late[sink_id] = self.stats.late.get(sink_id, 0) + len(rows)
            collect(sink_id, batch_id, [(r["id"], r["_record"]) for r in rows])
            self.stats.written[sink_id] = self.stats.written.get(sink_id, 0) + len(rows)

    def _write_one_pass(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import Observation
        from pyspark.sql import functions as f

        seen = Observation(f"edgewise-{self.pipeline.id}-{batch_id}")
        observed = batch.observe(seen, f.count(f.when(f.col("_to") == MALFORMED, 1)).alias("malformed"))
        self._write(self._destinations()[0], observed.where(f.col("_to") == RESULTS), batch_id)
        if seen.get.get("malformed", 0):  # rare: read the batch again for the lines to show
            self._write_route(MALFORMED, batch, batch_id)

    def _write_route(self, route: str, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as f

        rows = batch.where(f.col("_to") == route)
        if route == RESULTS:
            for sink_id in self._destinations():
                self._write(sink_id, rows, batch_id)
        elif route == MALFORMED:
            count = rows.count()
            if not count:
                return
            self._malformed(count, _examples(rows.select("id", "_record").limit(5).collect()))
        elif route == END:
            return
        elif route.startswith(LATE_ROUTE):
            watermark = late_watermark_us(self.checkpoint, batch_id)
            if watermark is None:
                return
            late = rows.where(f.col("_late_at") <= f.lit(watermark))
            sink_id = route[len(LATE_ROUTE):]
            n = self._write(sink_id, late, batch_id)
            self.stats.late[sink_id] = self.stats.late.get(sink_id, 0) + n
        else:
            self._write(route, rows, batch_id)

    def _write(self, sink_id: str, rows: DataFrame, batch_id: int) -> int:
        if self.collect is not None:
            got = [(r["id"], r["_record"]) for r in rows.select("id", "_record").collect()]
            self.collect(sink_id, batch_id, got)
            n = len(got)
        elif sink_id == "stdout" and sink_id not in self.plan.sinks:
            n = self._stdout(rows)
        else:
            config = self.plan.sinks[sink_id]
            if config.type == "file":
                n = self._file(config, rows, batch_id)
            elif config.type == "parquet":
                n = self._parquet(config, rows, batch_id)
            elif config.type == "stdout":
                n = self._stdout(rows)
            else:
                n = self._partitions(sink_id, rows)
        self.stats.written[sink_id] = self.stats.written.get(sink_id, 0) + n
        return n

    def _stdout(self, rows: DataFrame) -> int:
        out = self.stdout or sys.stdout.buffer
        n = 0
        for row in rows.select("_record").toLocalIterator():
            out.write(row["_record"].encode() + b"\n")
            n += 1
        out.flush()
        return n

    def _path(self, relative: str) -> str:
        from edgewise.engine.local import _base

        return _base(self.plan).path(relative)

    def _file(self, config: Any, rows: DataFrame, batch_id: int) -> int:
        """One segment per micro-batch, written by an executor (one task: the segment's name and content are the
        same when Spark replays the batch), then renamed into the spool."""
        from pyspark.sql import functions as f

        directory = self._path(config.path)
        os.makedirs(directory, exist_ok=True)
        final = os.path.join(directory, f"part-b{batch_id:012d}-{self.pipeline.id}.ndjson")
        staging = os.path.join(directory, f"_staging-b{batch_id:012d}-{self.pipeline.id}")
        if config.envelope:  # {"id", "event_time" (µs), "source", "payload"}: what the file sink's envelope is
            head = "to_json(named_struct('id', id, 'event_time', unix_micros(event_time), 'source', source))"
            line = f.expr(f"concat(substr({head}, 1, length({head}) - 1), ',\"payload\":', _record, '}}')")
        else:
            line = f.col("_record")
        # one task writes the segment: after a stateful operator through a shuffle (coalescing would run the
        # operator's partitions in that one task, one after the other: a keyed step took twice as long), else by
        # coalescing (a stateless query's read and steps then run in the writing task, cheaper than a shuffle)
        selected = rows.select(line.alias("value"))
        lines = selected.repartition(1) if self.after_shuffle else selected.coalesce(1)
        lines.write.mode("overwrite").text(staging)
        parts = sorted(p for p in os.listdir(staging) if p.startswith("part-") and not p.endswith(".crc"))
        n = 0
        if parts:
            produced = os.path.join(staging, parts[0])
            with open(produced, "rb") as fh:
                n = sum(1 for _ in fh)
            if n:
                if config.fsync:
                    _fsync_file(produced)
                os.replace(produced, final)
                if config.fsync:
                    _fsync_file(directory)
        shutil.rmtree(staging, ignore_errors=True)
        return n

    def _parquet(self, config: Any, rows: DataFrame, batch_id: int) -> int:
        spark = rows.sparkSession
        records = rows.select("_record")
        n = records.count()
        if n == 0:
            return 0
        table = spark.read.json(records.rdd.map(lambda r: r[0]))
        table.write.mode("overwrite").parquet(os.path.join(self._path(config.path), f"batch={batch_id}"))
        return n

    def _partitions(self, sink_id: str, rows: DataFrame) -> int:
        """The local sink class on the executors, one instance per partition, with its retries."""
        config = self.plan.sinks[sink_id]
        sink_class = self.plan.sink_classes[sink_id]
        from edgewise.engine.local import _base

        base = _base(self.plan)
        counter = rows.sparkSession.sparkContext.accumulator(0)

        def write_partition(part: Iterator[Row]) -> None:
            written = _write_with_local_sink(sink_class, config, base, part)
            counter.add(written)

        rows.select("id", "event_time", "source", "_record").foreachPartition(write_partition)
        return int(counter.value)


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _micros(value: Any) -> int | None:
    if value is None:
        return None
    from datetime import UTC

    return int(value.replace(tzinfo=value.tzinfo or UTC).timestamp() * 1_000_000)


def _write_with_local_sink(sink_class: Any, config: Any, base: Any, rows: Iterable[Row],
                           chunk: int = 1000) -> int:
    """Write rows through a local sink (on an executor): open, write in chunks with retries, flush, close."""
    import time

    from edgewise.clock import SystemClock
    from edgewise.events import Batch
    from edgewise.sinks.base import SinkContext, SinkRunner

    sink = sink_class(config, base)
    sink.open(SinkContext(SystemClock(), sys.stdout.buffer))
    runner = SinkRunner(sink, time.sleep)
    n = 0
    try:
        pending: list[Row] = []

        def flush_rows() -> None:
            payloads = [orjson.loads(r["_record"]) for r in pending]
            times = [_micros(r["event_time"]) or 0 for r in pending]
            runner.write(Batch(payloads, source=pending[0]["source"] or config.id, ingest_time_us=0,
                               event_times=times, ids=[r["id"] for r in pending]))

        for row in rows:
            pending.append(row)
            if len(pending) >= chunk:
                flush_rows()
                n += len(pending)
                pending = []
        if pending:
            flush_rows()
            n += len(pending)
        sink.flush()
    except SinkError:
        raise
    finally:
        sink.close()
    return n
