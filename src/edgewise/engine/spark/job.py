"""A pipeline file as Spark Structured Streaming queries: one query per pipeline, each with its own checkpoint.

Every source is read into the event frame (``frame.py``); the event time is assigned; each step compiles to
DataFrame operations (``steps.py``, ``windows.py``); a ``foreachBatch`` writer delivers the results, tee copies,
late events and dead letters idempotently (``sinks.py``). Source offsets, Spark's state and the micro-batch ids
live in ``<checkpoint>/<pipeline id>``: a restarted job resumes where the killed one committed, and replays the
micro-batch in flight, which the idempotent writers make harmless (exactly-once results).

``--once`` (Spark's ``availableNow``) processes what the sources hold and stops. Spark's append mode never
emits a window that is still open when the input ends, so ``--once`` also sends an end-of-input marker (an event
time far in the future, routed past every step) through each pipeline with event-time state (a window, an
event-time ``complete``): the watermark passes every window and deadline, and the last results come out, as at
the end of a local run. Where the sources are read in one micro-batch (file spools, generators) the marker is read
with the data, and the one micro-batch after it, without data, gives every result; otherwise it follows in a
run of its own once the data is processed. A checkpoint flushed that way has its
watermark at the end of time, so further input would be late; run ``--once`` on a checkpoint that is done.
``--keep-open`` (``SparkOptions.flush`` false) sends no marker: what is open stays in the checkpoint for the next
run, and results come out as the data's watermark passes them (Spark's own ``availableNow``), for periodic runs on
growing input.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from edgewise.engine.spark import frame as F
from edgewise.engine.spark.chains import emits_behind_watermark, event_time_complete
from edgewise.engine.spark.fields import FieldTypes, types_from_ddl, types_from_variant_schema
from edgewise.engine.spark.keyed import (
    KEYED_STEPS,
    Keyed,
    buckets_for,
    compile_aggregate,
    compile_complete,
    compile_dedupe,
    group_state_allowed,
)
from edgewise.engine.spark.progress import ROWS_IN_METRIC, MicroBatchLines
from edgewise.engine.spark.python_steps import compile_python_step
from edgewise.engine.spark.sinks import END, BatchWriter, Collector, step_routes
from edgewise.engine.spark.sources import (
    HEARTBEAT_ROUTE,
    SPOOL_GLOB,
    check_plan,
    envelope_sql,
    out_of_name_order,
    payload_sql,
    source_frame,
)
from edgewise.engine.spark.sql import SOURCE, to_spark_sql
from edgewise.engine.spark.steps import STATELESS, Stage, compile_stateless, recording_step_sql, runs_in_python
from edgewise.engine.spark.windows import compile_window
from edgewise.errors import ConfigError, EdgewiseError
from edgewise.steps.stateful import StatefulStep

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from edgewise.config.plan import PipelinePlan, Plan
    from edgewise.steps.aggregate import AggregateStep
    from edgewise.steps.base import Step
    from edgewise.steps.complete import CompleteStep
    from edgewise.steps.dedupe import DedupeStep
    from edgewise.steps.window import WindowStep

END_SOURCE = "edgewise:end"
"""The source of the end-of-input marker (a colon cannot occur in a source id)."""
END_TIME_US = 253_370_764_800_000_000  # 9999-01-01T00:00:00Z
TYPES_FILE = "edgewise-types.json"
LAYOUT_FILE = "edgewise-state.json"
"""How a checkpoint keeps edgewise's own state: the number of hash buckets of the keyed steps, and whether the keyed
steps ``applyInPandasWithState`` can run do (``keyed.py``)."""
GROUP_STATE_LAYOUT = "applyInPandasWithState"
"""``LAYOUT_FILE``'s ``keyed_operator`` of a checkpoint whose keyed steps run through ``applyInPandasWithState``
where Spark allows it (absent: every one through ``transformWithStateInPandas``)."""
CLOCK_TRIGGER_S = 1.0
"""The micro-batch interval of a continuous job with processing-time timers when ``--trigger`` is not given:
such a job runs a micro-batch at every trigger, data or not (so its timers fire), and would otherwise spin."""
PROGRESS_POLL_S = 1
"""How often (seconds) a waiting job looks for finished micro-batches to report (``progress.py``)."""
SAMPLE_ROWS = 10_000
"""How many input records (per source) a new job types its fields from: a bounded cost at start, however large
the input; a later value that does not fit fails the job with the field's name (``sql._checked_read``)."""


@dataclass
class SparkOptions:
    checkpoint: str
    once: bool = False
    max_files_per_trigger: int | None = None
    """Spool segments per micro-batch (default: all available)."""
    trigger_seconds: float = 0.0
    """Micro-batch interval of a continuous job (0: as soon as the previous one finished)."""
    now_sql: str = "current_timestamp()"
    """The dead-letter time (tests fix it)."""
    now_us: int | None = None
    """The clock of steps run in Python (tests fix it; None: the system clock)."""
    flush: bool = True
    """With ``once``: flush the windows still open when the input is processed (see the module docs); false is
    ``--keep-open``."""


@dataclass
class CompiledPipeline:
    pipeline: PipelinePlan
    frame: DataFrame
    mode: str
    checkpoint: str
    flushed: bool
    """It holds event-time state (a window, a completion) that ``--once`` flushes with the end-of-input marker."""
    writer: BatchWriter
    lines: MicroBatchLines
    clock_timers: bool = False
    """It has processing-time timers: Spark then wants a micro-batch at every trigger, with data or without."""
    query: StreamingQuery | None = None
    dropped_late: int = 0
    """Rows Spark's state operators dropped as late, over the queries this job ran."""
    failed: bool = False
    """Its query stopped with an error (the job goes on with the others, then fails)."""
    step_sql: list[tuple[str, str]] = field(default_factory=list)
    """``(step id, SQL)`` of the steps' expressions: which step a failing query's SQL belongs to."""


class SparkJob:
    def __init__(self, spark: SparkSession, plan: Plan, options: SparkOptions, *, collect: Collector | None = None,
                 pipelines: list[str] | None = None, report: Callable[[str], None] | None = None,
                 progress: Callable[[str], None] | None = None, running: Callable[[str], None] | None = None) -> None:
        self.spark = spark
        self.plan = plan
        self.options = options
        self.collect = collect
        self.report = report
        self.progress = progress
        """Says a line per finished micro-batch."""
        self.running = running
        """Shows what the queries are doing now, at every poll (a terminal's status line)."""
        self.only = pipelines
        check_plan(plan)
        os.makedirs(options.checkpoint, exist_ok=True)
        self.buckets, self.group_state = self._keyed_layout()
        self.types = self._input_types()
        self.compiled = [self._compile(p) for p in plan.pipelines if not self.only or p.id in self.only]
        self._check_spool_order()

    def _check_spool_order(self) -> None:
        """With ``max_files_per_trigger`` a micro-batch takes the next segments in Spark's order, by modification
        time: where that is not name order (the local engine's), the watermark, late events and windows can differ
        from the local engine's. Said once at the start (issue 39: it went unsaid, and windows came out short)."""
        if self.options.max_files_per_trigger is None or self.report is None:
            return
        from edgewise.engine.local import _base

        for source in self.plan.sources:
            spool: Any = source  # a file source's config (its type checked here)
            if spool.type != "file" or spool.format != "ndjson":
                continue
            problem = out_of_name_order(_base(self.plan).path(spool.path))
            if problem is not None:
                self.report(f"source {source.id}: {problem}. Spark reads a spool's segments in modification-time "
                            "order (the local engine by name), so with --max-files-per-trigger its micro-batches "
                            "take them out of name order, and the watermark, late events and windows can differ "
                            "from the local engine's. Give the segments modification times in name order (touch "
                            "them one by one, in name order), or run without --max-files-per-trigger")

    # ------------------------------------------------------------ input

    def _input_types(self) -> FieldTypes:
        """Types of input fields: pinned in the checkpoint on first start (inferred from a sample of the input then
        available), overridden by declared schemas."""
        path = os.path.join(self.options.checkpoint, TYPES_FILE)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                types = FieldTypes(json.load(fh))
        else:
            types = types_from_variant_schema(self._infer_schema())
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(types.tree, fh, indent=1, sort_keys=True)
            os.replace(tmp, path)
        types.sampled = set(types.leaves())
        for source in self.plan.sources:
            if source.declared_schema:
                try:
                    declared = types_from_ddl(source.declared_schema)
                except ValueError as exc:
                    raise ConfigError(f"source {source.id}: schema: {exc}") from None
                types.tree.update(declared.tree)
                types.sampled = {p for p in types.sampled if p[0] not in declared.tree}
        return types

    def _keyed_layout(self) -> tuple[int, bool]:
        """How the keyed steps keep their state, pinned in the checkpoint on first start: the hash buckets, and
        whether the keyed steps ``applyInPandasWithState`` can run (``keyed.group_state_allowed``) do: a checkpoint
        started before that operator existed keeps its steps in ``transformWithStateInPandas``'s state.
        A checkpoint started before the buckets (it has input types but no layout) kept a keyed step's state per
        key, which these queries cannot find: refused."""
        checkpoint = self.options.checkpoint
        path = os.path.join(checkpoint, LAYOUT_FILE)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                layout = json.load(fh)
            return int(layout["keyed_buckets"]), layout.get("keyed_operator") == GROUP_STATE_LAYOUT
        if os.path.exists(os.path.join(checkpoint, TYPES_FILE)):
            for pipeline in self.plan.pipelines:
                if any(s.kind in KEYED_STEPS for s in pipeline.steps) and \
                        os.path.isdir(os.path.join(checkpoint, pipeline.id, "offsets")):
                    raise ConfigError(
                        f"checkpoint {checkpoint}: pipeline {pipeline.id} keeps the state of its keyed steps per key, "
                        "as edgewise did before it grouped keys in hash buckets; this edgewise cannot read it. Start "
                        "a new checkpoint (the input is read again from its start) or finish this one with the "
                        "edgewise that made it")
        buckets = buckets_for(int(self.spark.conf.get("spark.sql.shuffle.partitions") or 200))
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"keyed_buckets": buckets, "keyed_operator": GROUP_STATE_LAYOUT}, fh)
        os.replace(tmp, path)
        return buckets, True

    def _infer_schema(self) -> str | None:
        schemas = []
        for source in self.plan.sources:
            if source.declared_schema or getattr(source, "is_link", False):
                continue
            if source.type == "file" and getattr(source, "format", "ndjson") != "ndjson":
                row = self._decoded_schema(source)
            else:
                directory = self._spool_dir(source)
                if directory is None or not os.path.isdir(directory):
                    continue
                lines = (self.spark.read.option("pathGlobFilter", SPOOL_GLOB).text(directory).limit(SAMPLE_ROWS)
                         .selectExpr("value", "try_parse_json(value) AS v"))
                payload = payload_sql("v", envelope_sql("v", "value"))
                row = lines.selectExpr(f"schema_of_variant_agg({payload}) AS s").collect()
            if row and row[0]["s"]:
                schemas.append(row[0]["s"])
        if not schemas:
            return None
        if len(schemas) == 1:
            return str(schemas[0])
        # several sources: a field's type is kept only where they agree
        merged = types_from_variant_schema(schemas[0]).tree
        for other in schemas[1:]:
            tree = types_from_variant_schema(other).tree
            merged = {k: v for k, v in merged.items() if tree.get(k, v) == v} | {
                k: v for k, v in tree.items() if k not in merged}
        return None if not merged else _as_object_schema(merged)

    def _decoded_schema(self, source: Any) -> list[Any]:
        """The inferred schema of a file source in a format other than NDJSON: its files decoded in a batch."""
        from edgewise.engine.local import _base
        from edgewise.engine.spark.decoded import decoded_frame
        from edgewise.engine.spark.sources import file_root

        path = _base(self.plan).path(source.path)
        frame = decoded_frame(self.spark.read, source, path, file_root(source, path))
        return frame.where(F.LIVE).limit(SAMPLE_ROWS).selectExpr(f"schema_of_variant_agg({SOURCE}) AS s").collect()

    def _spool_dir(self, source: Any) -> str | None:
        from edgewise.engine.local import _base
        from edgewise.engine.spark.sources import generate_spool

        if source.type == "file":
            return _base(self.plan).path(source.path)
        if source.type == "generator":
            return generate_spool(source, os.path.join(self.options.checkpoint, "_generator", source.id))
        return None

    def _input(self, pipeline: PipelinePlan, *, marker: bool) -> DataFrame:
        """The pipeline's sources as one frame, with the end-of-input marker's spool where ``marker``."""
        from pyspark.sql import functions as f

        line_ids = self._reads_event_ids(pipeline)
        frames = [source_frame(self.spark, self.plan, s, self.options.checkpoint,
                               max_files=self.options.max_files_per_trigger, line_ids=line_ids)
                  for s in self.plan.sources if pipeline.reads(s.id)]
        df = frames[0]
        for other in frames[1:]:
            df = df.unionByName(other)
        if self.plan.event_time is not None:
            df = df.select(*(f.expr(self._event_time_sql(df)).alias(c) if c == "event_time" else c
                             for c in F.FRAME_COLUMNS))
        # the events (and malformed records) each micro-batch read, in its progress: Spark's own count is of the
        # rows its sources gave, which are whole files where a spool's lines are numbered or a format decoded
        df = df.observe(ROWS_IN_METRIC, f.count(f.lit(1)).alias("rows"))
        if marker:
            df = df.unionByName(self._end_frame(pipeline.id))
        return df

    def _reads_link(self, pipeline: PipelinePlan) -> bool:
        """Whether a hub's link (with its heartbeats) feeds the pipeline."""
        return any(getattr(s, "is_link", False) and pipeline.reads(s.id) for s in self.plan.sources)

    def _reads_event_ids(self, pipeline: PipelinePlan) -> bool:
        """Whether anything downstream of the sources reads the input events' ids (a spool then numbers its lines):
        a step that routes copies or dead letters (they carry ids), a step run in Python or with keyed state, a
        sink that writes ids (upserts, envelopes, messages), the test collector. Conservative: only steps that
        never read an id and sinks that write the payload alone (or a window's results, with ids of their own)
        let it go."""
        if self.collect is not None:
            return True
        for step in pipeline.steps:
            if step.kind not in ("filter", "gate", "annotate", "transform", "lookup", "window"):
                return True
            if step_routes(self.plan, step):
                return True
        if any(step.kind == "window" for step in pipeline.steps):
            return False
        for sink_id in pipeline.to or ["stdout"]:
            config = self.plan.sinks.get(sink_id)
            if config is None:  # the default stdout: payloads
                continue
            if config.type not in ("file", "parquet", "stdout") or getattr(config, "envelope", False):
                return True
        return False

    def _end_frame(self, pipeline_id: str) -> DataFrame:
        """The end-of-input marker's spool, its rows routed past every step (``_end``)."""
        from pyspark.sql import functions as f

        lines = (self.spark.readStream.format("text").option("pathGlobFilter", SPOOL_GLOB)
                 .load(self._end_dir(pipeline_id)))
        # each line is a marker edgewise wrote (write_end_marker): its columns are known, nothing to parse (a spool
        # frame here cost a second parse-and-test branch to analyse and compile: BENCHMARKS.md)
        return lines.select(f.lit(END_SOURCE).alias("id"),
                            f.expr(f"timestamp_micros({END_TIME_US})").alias("event_time"),
                            f.lit(END_SOURCE).alias("source"), f.expr("parse_json('{}')").alias(SOURCE),
                            f.lit(END).alias("_to"), f.lit(None).cast("string").alias("_record"))

    def _event_time_sql(self, df: DataFrame) -> str:
        from pyspark.sql import functions as f

        assert self.plan.event_time is not None
        sql = to_spark_sql(self.plan.event_time.text, self.types)
        spark_type = df.select(f.expr(sql).alias("t")).schema["t"].dataType.simpleString()
        if spark_type == "timestamp" or spark_type == "timestamp_ntz":
            value = sql
        elif spark_type in ("string", "variant"):
            value = f"CAST(CAST({sql} AS STRING) AS TIMESTAMP)"
        else:  # epoch seconds, as on the local engine
            value = f"timestamp_micros(CAST(({sql}) * 1000000 AS BIGINT))"
        # a malformed record has no event time: its file's modification time would have moved the watermark (a
        # continuous job closed windows early on a bad line; the local engine never reads its time). Markers and
        # heartbeats keep theirs: moving the watermark is what they are for
        return (f"CASE WHEN _to = '' THEN coalesce({value}, event_time) WHEN _to = {F.quote(F.MALFORMED)} THEN NULL "
                "ELSE event_time END")

    def _end_path(self, pipeline_id: str) -> str:
        """Where the pipeline's end-of-input marker spool is."""
        return os.path.join(self.options.checkpoint, "_end", pipeline_id)

    def _end_dir(self, pipeline_id: str) -> str:
        """The end-of-input marker spool, made if it is not there yet."""
        path = self._end_path(pipeline_id)
        os.makedirs(path, exist_ok=True)
        return path

    # ------------------------------------------------------------ compile

    def _compile(self, pipeline: PipelinePlan) -> CompiledPipeline:
        # the end-of-input marker's spool: only where it has work to do, and read once (by a window's routed
        # branch, or else with the input)
        window_marker = _window_reads_marker(self.plan, pipeline)
        source = self._input(pipeline, marker=holds_event_time_state(pipeline) and not window_marker)
        with recording_step_sql() as step_sql:
            stage, side, mode = self._compile_steps(pipeline, source, window_marker)
        return self._output(pipeline, stage, side, mode, window_marker, step_sql)

    def _compile_steps(self, pipeline: PipelinePlan, source: DataFrame, window_marker: bool
                       ) -> tuple[Stage, list[DataFrame], str]:
        """The pipeline's steps over ``source``: the last stage, the routed branches to add back, the output mode."""
        stage = Stage(source, self.types.copy(), pipeline.id, self.options.now_sql)
        side: list[DataFrame] = []
        mode = "append"
        routing = False  # a step so far can route rows to a sink
        for step in pipeline.steps:
            if step.kind == "window":
                window = cast("WindowStep", step)
                routes_from = None if routing or step_routes(self.plan, step) else source
                if window_marker:  # the routed rows are malformed lines, counted on the window's input, and the
                    # marker: its spool is all the routed branch reads (not the input a second time)
                    routes_from = self._end_frame(pipeline.id)
                    if self._reads_link(pipeline):  # and a link's heartbeats, which Spark's filter of the live
                        # rows (pushed below the window's watermark) keeps from the window's input
                        routes_from = routes_from.unionByName(source.where(f"_to = '{HEARTBEAT_ROUTE}'"))
                stage, routed, mode = compile_window(stage, window, routes_from, marker_only=window_marker)
                if routed is not None:
                    side.append(routed)
            elif not on_python_workers(step):
                stage = compile_stateless(stage, step)
            elif step.kind == "dedupe":
                stage = compile_dedupe(stage, cast("DedupeStep", step), self.plan, self.options.now_us,
                                       self._keyed(pipeline))
            elif step.kind == "aggregate":
                stage = compile_aggregate(stage, cast("AggregateStep", step), self.plan, self.options.now_us,
                                          self._keyed(pipeline))
            elif step.kind == "complete":
                stage = compile_complete(stage, cast("CompleteStep", step), self.plan, self.options.now_us,
                                         self._keyed(pipeline))
            else:  # spawn, plugin steps and transform ops Spark has no form for: the local step on the executors
                stage = compile_python_step(stage, step, self.plan, self.options.now_us)
            routing = routing or bool(step_routes(self.plan, step))
        return stage, side, mode

    def _keyed(self, pipeline: PipelinePlan) -> Keyed:
        return Keyed(self.buckets, self.group_state and group_state_allowed(pipeline.steps))

    def _output(self, pipeline: PipelinePlan, stage: Stage, side: list[DataFrame], mode: str, window_marker: bool,
                step_sql: list[tuple[str, str]]) -> CompiledPipeline:
        """The query's output (results, routed rows, late-event copies in one frame) and the writer it goes to."""
        from pyspark.sql import functions as f

        # the end-of-input marker reaches the writer (which ignores it): a filter here would be pushed below the
        # watermark, which must see it
        out = stage.df.select(
            "id", "event_time", "source", "_to",
            f.expr(f"CASE WHEN _to = '' THEN {F.record_json(stage.types)} ELSE _record END").alias("_record"),
            f.col("_late_at") if "_late_at" in stage.df.columns else f.lit(None).cast("bigint").alias("_late_at"))
        for routed in side:
            if "_late_at" not in routed.columns:
                routed = routed.withColumn("_late_at", f.lit(None).cast("bigint"))
            out = out.unionByName(routed.select(*out.columns))
        checkpoint = os.path.join(self.options.checkpoint, pipeline.id)
        writer = BatchWriter(self.plan, pipeline.id, checkpoint, collect=self.collect, report=self.report,
                             malformed_upstream=window_marker,
                             after_shuffle=any(isinstance(s, StatefulStep) for s in pipeline.steps))
        lines = MicroBatchLines(pipeline.id, self.progress, writer.written_by_batch,
                                marker_dir=self._end_path(pipeline.id))
        clock_timers = any(s.kind == "complete" and not event_time_complete(s) for s in pipeline.steps)
        return CompiledPipeline(pipeline, out, mode, checkpoint, holds_event_time_state(pipeline), writer, lines,
                                clock_timers, step_sql=step_sql)

    # ------------------------------------------------------------ run

    def explain(self, mode: str = "formatted") -> str:
        """Each pipeline's Spark plan (``explain``), as text."""
        import contextlib
        import io

        parts = []
        for c in self.compiled:
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                c.frame.explain(mode=mode)
            parts.append(f"== pipeline {c.pipeline.id} (output mode: {c.mode}, checkpoint {c.checkpoint}) ==\n"
                         + buffer.getvalue().rstrip())
        return "\n\n".join(parts)

    def start(self, compiled: list[CompiledPipeline] | None = None) -> list[StreamingQuery]:
        """Start the queries of ``compiled`` (default: every pipeline of the job)."""
        chosen = compiled or self.compiled
        for c in chosen:
            writer = c.frame.writeStream.foreachBatch(c.writer).outputMode(c.mode)
            writer = writer.option("checkpointLocation", c.checkpoint).queryName(f"edgewise-{c.pipeline.id}")
            if self.options.once:
                writer = writer.trigger(availableNow=True)
            elif self.options.trigger_seconds or c.clock_timers:
                seconds = self.options.trigger_seconds or CLOCK_TRIGGER_S
                writer = writer.trigger(processingTime=f"{seconds} seconds")
            # processing-time timers ask Spark for a micro-batch after every one, data or not: availableNow would
            # never end, so a --once run of such a pipeline runs micro-batches with data only (its timers fire in
            # those, and in the next run's)
            with _no_data_batches(self.spark, not (self.options.once and c.clock_timers)):
                c.query = writer.start()
            c.writer.query = c.query
            c.lines.started()
        return [c.query for c in chosen if c.query is not None]

    def run(self, stop: threading.Event | None = None) -> None:
        """Run until the queries stop (``--once``: until the input is processed and event-time state flushed). A
        continuous job also stops when ``stop`` is set (SIGINT, SIGTERM): between two polls of its queries, never
        inside a call into the JVM, so the queries stop as Spark stops them and the checkpoint is whole."""
        flushed = [c for c in self.compiled if c.flushed] if self.options.once and self.options.flush else []
        # the marker goes with the data where the data is read in one micro-batch: the next one, with no data,
        # then closes every window and deadline (two micro-batches in all, not four)
        with_data = [c for c in flushed if not c.clock_timers] if self._read_in_one_batch() else []
        for c in with_data:
            write_end_marker(self._end_dir(c.pipeline.id))
        if not self.options.once:  # queries an earlier job of this session ended would end the wait at once
            self.spark.streams.resetTerminated()
        self.start()
        if not self.options.once:
            try:
                while not self.spark.streams.awaitAnyTermination(PROGRESS_POLL_S):
                    for c in self.compiled:
                        self._report_batches(c)
                    if stop is not None and stop.is_set():
                        self.stop(between_batches=True)
                        return
                    self._show_running(self.compiled)
            except Exception as exc:  # reported as the job's failure, with Spark's message
                failed = [(c, error) for c in self.compiled
                          if c.query is not None and (error := c.query.exception()) is not None]
                self.stop(between_batches=True)  # the others stop as on SIGTERM: what they computed is delivered
                if not failed:
                    raise SparkJobFailed(f"a Spark query failed: {_first_line(exc)}") from exc
                raise SparkJobFailed("; ".join(_query_failed(c, error) for c, error in failed)) from exc
            return
        failures = self.await_all()
        flushed = [c for c in flushed if c not in with_data and not c.failed]
        if flushed:
            for c in flushed:
                write_end_marker(self._end_dir(c.pipeline.id))
            self.start(flushed)
            failures += self.await_all(flushed)
            # without micro-batches that have no data, what the marker's watermark closes comes out in the next
            # micro-batch that has some: a second marker's. So too over a NATS stream: its availableNow run ends
            # with the marker's micro-batch (the last windows were lost: found by the NATS link's test, issue 38)
            one_batch = self._read_in_one_batch()
            again = [c for c in flushed if (c.clock_timers or not one_batch) and not c.failed]
            if again:
                for c in again:
                    write_end_marker(self._end_dir(c.pipeline.id), "part-end-2")
                self.start(again)
                failures += self.await_all(again)
        if failures:
            raise SparkJobFailed("; ".join(failures))

    def _read_in_one_batch(self) -> bool:
        """``availableNow`` reads everything the sources hold in its first micro-batch: file spools and
        generators, without ``max_files_per_trigger`` (with it, a marker read with the first files would make the
        later ones late). Other sources (NATS) are flushed after their data, in a run of their own."""
        return self.options.max_files_per_trigger is None and all(
            s.type in ("file", "generator") for s in self.plan.sources)

    def await_all(self, compiled: list[CompiledPipeline] | None = None) -> list[str]:
        """Wait until each query has stopped; the failed ones' lines. One pipeline's failure does not cut the
        others short: they finish, and their results are delivered (issue 39: a failed expression case cost the
        other pipelines of a job the results they had computed)."""
        failures: list[str] = []
        for c in compiled or self.compiled:
            if c.query is None:
                continue
            try:
                while not c.query.awaitTermination(PROGRESS_POLL_S):
                    self._report_batches(c)
                    self._show_running([c])
            except Exception as exc:  # noqa: BLE001  # Spark's exception types vary; the message says what
                failures.append(_query_failed(c, exc))
                c.failed = True
                continue
            progress = c.query.recentProgress  # converted from the JVM once, read three ways
            c.lines.report(progress)
            c.dropped_late += _dropped_late(progress)
            if c.writer.malformed_upstream:
                c.writer.take_progress(progress)
            error = c.query.exception()
            if error is not None:
                failures.append(_query_failed(c, error))
                c.failed = True
        return failures

    @staticmethod
    def _report_batches(c: CompiledPipeline) -> None:
        """The lines of the micro-batches ``c``'s query finished since the last call (most calls convert one
        progress from the JVM, not the hundred Spark keeps)."""
        if c.query is None:
            return
        last = c.query.lastProgress
        if last is None:
            return
        c.lines.report([last] if c.lines.unseen.last + 1 >= int(last["batchId"]) else c.query.recentProgress)

    def _show_running(self, compiled: list[CompiledPipeline]) -> None:
        if self.running is None:
            return
        now = time.monotonic()
        doing = [c.lines.running(c.query.status, now) for c in compiled if c.query is not None and c.query.isActive]
        if doing:
            self.running("; ".join(doing))

    def stop(self, *, between_batches: bool = False, wait_s: float = 60) -> None:
        """Stop the queries. ``between_batches``: each once it is between two micro-batches (for up to ``wait_s``):
        a query stopped inside its foreachBatch interrupts the Python writer, and Spark then matches the long Py4J
        error that makes against a regular expression of its own (``StreamExecution``'s test for an interruption),
        which overflows the stream thread's stack (a StackOverflowError on stderr; the run is still exactly-once,
        as the batch is redone by the next run)."""
        deadline = time.monotonic() + (wait_s if between_batches else 0)
        for c in self.compiled:
            if c.query is None:
                continue
            while c.query.isActive and time.monotonic() < deadline and c.query.status.get("isTriggerActive"):
                time.sleep(0.02)
            if c.query.isActive:
                c.query.stop()

    def late_counts(self) -> dict[str, int]:
        """Events Spark dropped as late, per windowed pipeline (from the finished queries' progress)."""
        return {c.pipeline.id: c.dropped_late for c in self.compiled}


class SparkJobFailed(EdgewiseError):
    """A pipeline's query stopped with an error (an event failing with ``on_error: fail``, a sink down after its
    retries, bad input Spark rejects); a restart resumes from the last committed micro-batch."""


USER_RAISED = "[USER_RAISED_EXCEPTION] "

WORKER_LOST = ("Python worker failed to connect back", "waiting for the Python worker to connect back",
               "Python worker exited unexpectedly", "driver worker exited unexpectedly")
"""Spark's words for a Python worker it lost: one that did not connect back in Spark's fixed 10 s (a busy machine
starts Python slowly) or that crashed."""
WORKER_LOST_HINT = (
    " (Spark lost a Python worker after retrying the task: on a busy machine a worker can start too slowly to "
    "connect back within Spark's 10 s, and one that crashed leaves its reason in Spark's log, shown with "
    "EDGEWISE_SPARK_LOG_LEVEL=WARN. Run again: the checkpoint resumes at the failed micro-batch; or give the job "
    "fewer cores, --master local[1], or a quieter machine)")


def _first_line(exc: BaseException) -> str:
    """The line of a Spark exception that says what happened: a message edgewise raised in the query (a sampled
    type that does not fit, ``sql._checked_read``) as it was written, else Spark's error class and message."""
    text = str(exc)
    if not text:
        return type(exc).__name__
    if any(words in text for words in WORKER_LOST):
        return _first_line_of(text)[:300] + WORKER_LOST_HINT
    return _first_line_of(text)


_SPARK_ERROR = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\] ([^\n]*)")
"""Spark's ``[ERROR_CLASS] message``."""
_WRAPPERS = frozenset(("STREAM_FAILED", "FOREACH_BATCH_USER_FUNCTION_ERROR", "PYTHON_EXCEPTION"))
"""Error classes that only say where a cause surfaced: the micro-batch's writer, the stream."""
_SQL_CONTEXT = re.compile(r"== SQL \(line \d+, position \d+\) ==\n([^\n]*)\n( *)(\^+)")
"""Spark's pointer at the SQL an error came from: the SQL, then carets under the failing part."""


def _first_line_of(text: str) -> str:
    """edgewise's own message raised in the query as it was written; else the innermost of Spark's errors (a
    query that fails in a micro-batch's writer is reported as a stream failure, wrapping the writer's failure,
    wrapping a Python traceback that ends in the cause: issue 39); else the first line after ``Reason:``."""
    causes = [m for m in _SPARK_ERROR.finditer(text) if m.group(1) not in _WRAPPERS]
    if USER_RAISED in text:
        line = text[text.index(USER_RAISED):].splitlines()[0][len(USER_RAISED):]
    elif causes:
        line = f"[{causes[-1].group(1)}] {causes[-1].group(2)}"
    else:
        return text[text.find("Reason: ") if "Reason: " in text else 0:].splitlines()[0][:500]
    return re.sub(r" SQLSTATE: \w+$", "", line)[:500]


def _failing_step(text: str, step_sql: list[tuple[str, str]]) -> str | None:
    """The step whose expression holds the SQL Spark points at in ``text``, if it points at one."""
    def plain(sql: str) -> str:
        return " ".join(sql.split()).lower()

    for context in reversed(list(_SQL_CONTEXT.finditer(text))):
        sql, indent, carets = context.groups()
        failing = plain(sql[len(indent):len(indent) + len(carets)])
        for step_id, made in step_sql:
            if failing and failing in plain(made):
                return step_id
    return None


def _query_failed(c: CompiledPipeline, exc: BaseException) -> str:
    """The one line a failed query gives the user: the pipeline, the step where Spark says, the cause."""
    step = _failing_step(str(exc), c.step_sql)
    where = f"pipeline {c.pipeline.id}" + (f", step {step}" if step else "")
    return f"{where}: the Spark query failed: {_first_line(exc)}"


def _window_reads_marker(plan: Plan, pipeline: PipelinePlan) -> bool:
    """The pipeline's window has no step before it that can route and no late sink: its routed branch reads just
    the end-of-input marker (the malformed lines are counted on its input)."""
    for step in pipeline.steps:
        if step.kind == "window":  # its own routes: late events, dead letters of events its key or aggs failed on
            return not step_routes(plan, step)
        if step_routes(plan, step):
            return False
    return False


def on_python_workers(step: Step) -> bool:
    """Whether ``step`` runs in Spark's Python workers (``SparkJob._compile_steps`` compiles it so): a keyed step,
    or a step Spark has no operation for (spawn, plugins, ``runs_in_python``); a window and the other stateless
    steps are Spark's own operations."""
    if step.kind in KEYED_STEPS:
        return True
    return step.kind != "window" and (step.kind not in STATELESS or runs_in_python(step))


def python_worker_modules(plan: Plan, pipelines: list[str] | None = None) -> list[str]:
    """The modules of the steps that run in Spark's Python workers in ``pipelines`` (all: None), in order; empty
    where no step does (``workers.warm_python_workers`` imports them while the driver plans)."""
    modules = [type(step).__module__ for p in plan.pipelines if not pipelines or p.id in pipelines
               for step in p.steps if on_python_workers(step)]
    return list(dict.fromkeys(modules))


def holds_event_time_state(pipeline: PipelinePlan) -> bool:
    """A window or an event-time ``complete``: state that ``--once`` flushes with the end-of-input marker."""
    return any(emits_behind_watermark(step) for step in pipeline.steps)


@contextlib.contextmanager
def _no_data_batches(spark: SparkSession, enabled: bool) -> Iterator[None]:
    """Queries started inside run micro-batches without data (when a stateful operator asks) or not: Spark reads
    the setting when a query starts."""
    key = "spark.sql.streaming.noDataMicroBatches.enabled"
    before = spark.conf.get(key, "true")
    spark.conf.set(key, "true" if enabled else "false")
    try:
        yield
    finally:
        spark.conf.set(key, before or "true")


def _dropped_late(recent_progress: list[Any]) -> int:
    total = 0
    for progress in recent_progress:
        for op in progress.get("stateOperators", []):
            total += int(op.get("numRowsDroppedByWatermark", 0))
    return total


def write_end_marker(directory: str, name: str = "part-end") -> None:
    """The end-of-input marker segment of a pipeline (idempotent)."""
    path = os.path.join(directory, f"{name}.ndjson")
    if os.path.exists(path):
        return
    line = json.dumps({"id": END_SOURCE, "event_time": END_TIME_US, "source": END_SOURCE, "payload": {}})
    with open(path + ".open", "w", encoding="utf-8") as fh:
        fh.write(line + "\n")
    os.replace(path + ".open", path)


def _as_object_schema(tree: dict[str, Any]) -> str:
    def render(node: Any) -> str:
        if isinstance(node, dict):
            return "OBJECT<" + ", ".join(f"`{k}`: {render(v)}" for k, v in node.items()) + ">"
        return str(node).upper()

    return render(tree)


__all__ = ["CompiledPipeline", "SparkJob", "SparkOptions", "write_end_marker"]
