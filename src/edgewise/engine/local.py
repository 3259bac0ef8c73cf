"""The local engine: runs a plan's pipelines over batches of events, in this process.

Every event enters every pipeline (each gets the same immutable payloads; steps copy what they change). A pipeline's
results go to its ``to`` sinks, or to stdout when it has none.

With a durable state store the engine commits, at most every ``commit_interval`` seconds of its clock and at the
end, the stateful steps' changes together with how many events of each source were processed (and a digest of them),
after flushing the sinks: what a commit covers has been delivered. A restarted run restores the state, skips the
events the last commit covers where its input starts with exactly them (``resume.py``; other input is read from its
start, the state kept) and reprocesses the rest (at-least-once; results keep their ids, so idempotent sinks see each
result once). When the input ends, every stateful step is finished in pipeline order: open windows and pending
completions are flushed through the rest of their pipeline.

Where one pipeline reads NDJSON lines without a durable store, event-time assignment or an instrument, its first
stateless steps run on each line as it is decoded (``fused.py``); the rest of the pipeline takes their output."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import BinaryIO, Protocol

from edgewise.clock import Clock, SystemClock
from edgewise.config import BuildContext
from edgewise.config.plan import Plan
from edgewise.engine.context import RunContext, RunStats
from edgewise.engine.event_time import assign_event_times
from edgewise.engine.fused import FusedHead, HeadBatch, events_read, head_of
from edgewise.engine.guard import GuardedStep
from edgewise.engine.idle import Idleness
from edgewise.engine.resume import ResumePoint
from edgewise.engine.state import StateRuntime
from edgewise.errors import SinkError
from edgewise.events import Batch
from edgewise.schema import Column, held_columns, misfit, read_as_declared, reads_text
from edgewise.sinks.base import LivePublisher, Sink, SinkContext, SinkRunner
from edgewise.sinks.stdout import StdoutConfig, StdoutSink
from edgewise.sources.base import Heartbeat, Source, SourceContext, new_run_id
from edgewise.state import StateStore
from edgewise.steps.stateful import StatefulStep
from edgewise.wording import count

STDOUT = "<stdout>"
"""The sink id results go to when a pipeline has no ``to``."""

Pipeline = tuple[str, list[GuardedStep], list[str]]


class Instrument(Protocol):
    """Watches the engine work (the daemon's metrics and traces): wraps each pipeline run and each step."""

    def pipeline(self, pipeline_id: str, events: int) -> AbstractContextManager[object]: ...

    def step(self, pipeline_id: str, guarded: GuardedStep, batch: Batch, ctx: RunContext) -> Batch:
        """Run ``guarded.run(batch, ctx)`` and observe it."""
        ...


class Crash(BaseException):
    """Stops a run the way ``kill -9`` does: nothing more is delivered, flushed, committed or closed.

    Raised by ``edgewise.testing``'s crash marker; a ``BaseException`` so that no error handling catches it.
    """


class LocalEngine:
    """Runs a plan. ``open()``, then ``process(batch)`` for each batch, then ``close()``; or ``run(sources)``."""

    def __init__(self, plan: Plan, *, clock: Clock | None = None, stdout: BinaryIO | None = None,
                 errors: object = None, sinks: dict[str, Sink] | None = None, pipelines: list[str] | None = None,
                 sleep: Callable[[float], None] = time.sleep, batch_size: int = 1024,
                 stores: Mapping[str, StateStore] | None = None, commit_interval: float = 1.0,
                 collect: Callable[[str, Batch], None] | None = None, fresh: bool = False,
                 instrument: Instrument | None = None, idle_timeouts: Mapping[str, int | None] | None = None,
                 live: LivePublisher | None = None, state: StateRuntime | None = None) -> None:
        self.plan = plan
        self.clock = clock or SystemClock()
        self.stdout = stdout if stdout is not None else sys.stdout.buffer
        self.batch_size = batch_size
        chosen = plan.pipelines if pipelines is None else [plan.pipeline(p) for p in pipelines]
        self.pipelines: list[Pipeline] = [(p.id, [GuardedStep(s, p.id) for s in p.steps], p.to or [STDOUT])
                                          for p in chosen]
        self.feeds = {p.id: p.sources for p in chosen if p.sources is not None}
        """The pipelines only some sources feed (a hub's, each reading its link), with those sources."""
        build = BuildContext(base_dir=".")
        overrides = sinks or {}
        self.sinks: dict[str, Sink] = {}
        for sink_id, config in plan.sinks.items():
            self.sinks[sink_id] = overrides.get(sink_id) or plan.sink_classes[sink_id](config, _base(plan))
        # made, not validated: its values are constants, and validating would build the models' schemas that a
        # run whose configs came from the cache never builds (config/validated_cache.py)
        self.sinks[STDOUT] = overrides.get(STDOUT) or StdoutSink(StdoutConfig.model_construct(id="stdout"), build)
        self.ctx = RunContext(clock=self.clock, send=self._send, errors=errors, sleep=sleep)  # type: ignore[arg-type]
        self.runners = {sid: SinkRunner(s, sleep, self._sink_dead_letter) for sid, s in self.sinks.items()}
        self.state = state if state is not None else StateRuntime(plan, stores, fresh=fresh)
        """How the steps' state is kept (a partitioned daemon worker's keeps it per partition)."""
        self.positions: dict[str, int] = {}
        """Events of each source processed so far (restored from the last commit on open)."""
        self.runs: dict[str, str] = {}
        """The run id each source's events were named with (kept across restarts)."""
        self.digests: dict[str, str] = {}
        """A digest of the events ``positions`` counts, per source (``resume.py``)."""
        self.commit_interval_us = int(commit_interval * 1_000_000)
        self.collect = collect
        self.instrument = instrument
        self.live = live
        """The daemon's live channels, for ``live`` sinks (None outside the daemon)."""
        self.reports_input = True
        """Whether problems of the input it is given (malformed events, a failing event time) are this engine's to
        count and report: a partitioned daemon worker reads every queue entry and reports only its own entries'."""
        self.declared = {s.id: columns for s in plan.sources if (columns := held_columns(s))}
        """The fields each source's ``schema`` declares, whose values are held to it (``edgewise/schema.py``)."""
        self.read_from_text = {s.id for s in plan.sources if s.id in self.declared and reads_text(s)}
        """The sources whose declared fields are read from text first (a format that decodes text: csv, ...)."""
        self.head: FusedHead | None = None if self.declared else head_of(plan, [s for _, s, _ in self.pipelines])
        """The only pipeline's first steps fused with decoding (``fused.py``), where they can be (not where a
        schema is declared: its events are checked before any step)."""
        self.idleness = Idleness(idle_timeouts or {}, {s.id: s.idle_speed for s in plan.sources})
        """Event time that moves on while every source is quiet (the daemon's ``idle_timeout``s; ``idle.py``)."""
        self._last_commit_us = 0

    @property
    def stats(self) -> RunStats:
        return self.ctx.stats

    def open(self) -> None:
        context = SinkContext(self.clock, self.stdout, self.live)
        for sink in self.sinks.values():
            sink.open(context)
        for _, steps, _ in self.pipelines:
            for g in steps:
                g.step.open(self.ctx)
        self.positions, self.runs, self.digests = self.state.open()
        self._last_commit_us = self.clock.now_us()
        self.idleness.start(self._last_commit_us)

    def source_context(self) -> SourceContext:
        """What a source reading into this engine is given: with the fused head where it applies (a durable run
        digests the decoded events, an instrument times each step)."""
        ctx = SourceContext(self.clock, self._malformed, self.batch_size)
        if not self.state.durable and self.instrument is None:
            ctx.head = self.head
        return ctx

    def ingest(self, batch: Batch) -> Batch:
        """Hold the batch to its source's declared schema, count it in and give it its event times."""
        columns = self.declared.get(batch.source)
        if columns and len(batch):
            batch = self._declared_fit(batch, columns)
        read = events_read(batch)
        if isinstance(batch, HeadBatch):
            for step_id, counter, n in batch.counts:
                self.ctx.count(step_id, counter, n)
        self.ctx.stats.events_in += read
        if read and self.idleness.enabled:
            self.idleness.arrived(batch.source, self.clock.now_us())
        if self.plan.event_time is None or not len(batch) or (isinstance(batch, HeadBatch) and batch.timed):
            return batch

        def failed(i: int, exc: Exception) -> None:
            if self.reports_input:
                self.ctx.stats.failed += 1
                self.ctx.report(f"event {batch.ids()[i]}: event_time failed: {exc}")

        return assign_event_times(batch, self.plan.event_time, failed)

    def _declared_fit(self, batch: Batch, columns: list[Column]) -> Batch:
        """The events that fit the declared schema (their declared fields read from text first, where the source
        decodes text); each other one is malformed input (reported and skipped)."""
        if batch.source in self.read_from_text:
            read = [read_as_declared(p, columns) for p in batch.payloads]
            batch = batch.replace([record for record, _ in read])
            problems = [problem for _, problem in read]
        else:
            problems = [misfit(p, columns) for p in batch.payloads]
        if not any(problems):
            return batch
        ids = batch.ids()
        for i, problem in enumerate(problems):
            if problem is not None:
                self._malformed(f"{ids[i]}: {problem}")
        return batch.select([problem is None for problem in problems])

    def run_pipelines(self, batch: Batch) -> dict[str, Batch]:
        """Run every pipeline on the batch and deliver the results; returns them by pipeline id. A fused head's
        batch (only made where there is one pipeline) goes on after the steps it went through."""
        start = batch.steps if isinstance(batch, HeadBatch) else 0
        return {pipeline[0]: self._continue(pipeline, start, batch) for pipeline in self.pipelines
                if self._fed(pipeline[0], batch.source)}

    def _fed(self, pipeline_id: str, source_id: str) -> bool:
        """Whether the source's events enter the pipeline (all do, but a hub's link only its own pipeline)."""
        feed = self.feeds.get(pipeline_id)
        return feed is None or source_id in feed

    def _continue(self, pipeline: Pipeline, start: int, batch: Batch) -> Batch:
        """Run ``batch`` through the pipeline's steps from ``start`` on and deliver what comes out."""
        pipeline_id, steps, targets = pipeline
        out = batch
        instrument = self.instrument
        with nullcontext() if instrument is None else instrument.pipeline(pipeline_id, len(batch)):
            for guarded in steps[start:]:
                if not len(out):
                    break
                out = (guarded.run(out, self.ctx) if instrument is None
                       else instrument.step(pipeline_id, guarded, out, self.ctx))
            self.ctx.stats.events_out[pipeline_id] += len(out)
            for target in targets:  # inside the pipeline's span: a sink's request continues its trace
                self._send(target, out)
        if self.collect is not None and len(out):
            self.collect(pipeline_id, out)
        return out

    def _stateful(self) -> Iterable[tuple[Pipeline, int, StatefulStep]]:
        for pipeline in self.pipelines:
            for i, guarded in enumerate(pipeline[1]):
                if isinstance(guarded.step, StatefulStep):
                    yield pipeline, i, guarded.step

    def tick(self, quiet: bool = True) -> int:
        """Fire processing-time timers due at the clock's current time (completion timeouts), and move event time
        on while every source is idle. Returns how many records that gave (the daemon then commits them).
        ``quiet=False``: the caller knows input is waiting (a daemon's queue holds entries its worker has not
        processed yet), so no source is idle, however long ago the engine last ingested."""
        now = self.clock.now_us()
        idle_by = self.idleness.advance_by(now) if quiet else 0
        given = 0
        for pipeline, i, step in self._stateful():
            given += self._onward(pipeline, i, step.advance(now, self.ctx))
            if idle_by:
                given += self._onward(pipeline, i, step.idle(idle_by, self.ctx))
        if idle_by:  # after what the steps closed: a link's heartbeat follows the events it covers
            for sink in self.sinks.values():
                sink.idle(idle_by, now)
        return given

    def heartbeat(self, beat: Heartbeat) -> int:
        """A hub's link says the edge's event time moved on while its sources were quiet: the pipelines it feeds
        move theirs on by as much, as the edge's steps would have (``sinks/link.py``). Returns the records that
        gave."""
        return sum(self._onward(pipeline, i, step.idle(beat.advanced_us, self.ctx))
                   for pipeline, i, step in self._stateful() if self._fed(pipeline[0], beat.source))

    def _onward(self, pipeline: Pipeline, i: int, given: Batch | None) -> int:
        """What the pipeline's ``i``-th step gave outside a batch (a timer, idle time), through the steps after it;
        returns how many records that was."""
        if given is None or not len(given):
            return 0
        self._continue(pipeline, i + 1, given)
        return len(given)

    def finish(self) -> None:
        """The input ended: flush every stateful step (open windows, pending completions), in pipeline order, so
        what one step flushes still passes through the steps after it."""
        for pipeline, i, step in self._stateful():
            self._onward(pipeline, i, step.finish(self.ctx))

    def commit(self, *, force: bool = False, ended: Iterable[str] = ()) -> None:
        """Make progress durable: flush the sinks, then commit state and source positions together. Only with a
        durable store, and at most every ``commit_interval`` unless forced."""
        if not self.state.durable:
            return
        now = self.clock.now_us()
        if not force and now - self._last_commit_us < self.commit_interval_us:
            return
        self.flush_sinks()
        self.state.commit(self.positions, self.runs, self.digests, ended)
        self._last_commit_us = now

    def flush_sinks(self) -> None:
        """Make everything delivered so far durable or visible (file segments sealed, buffers sent)."""
        for sink in self.sinks.values():
            sink.flush()

    def process(self, batch: Batch) -> dict[str, Batch]:
        return self.run_pipelines(self.ingest(batch))

    def _send(self, sink_id: str, batch: Batch) -> None:
        if not len(batch):
            return
        try:
            self.runners[sink_id].write(batch)
        except SinkError as exc:
            self.ctx.stats.sink_failures += 1
            raise exc

    def _sink_dead_letter(self, target: str, batch: Batch, exc: Exception) -> None:
        self.ctx.stats.dead_lettered += len(batch)
        self.ctx.report(f"{count(len(batch), 'event')} dead-lettered to {target}: {exc}")
        records = [{"event_id": i, "event": p, "error": {"type": type(exc).__name__, "message": str(exc)}}
                   for i, p in zip(batch.ids(), batch.payloads, strict=True)]
        self._send(target, batch.replace(records))

    def close(self) -> None:
        errors: list[Exception] = []
        self.state.close()
        for _, steps, _ in self.pipelines:
            for g in steps:
                g.step.close()
        for sink in self.sinks.values():
            try:
                sink.flush()
            except Exception as exc:  # noqa: BLE001  # every sink must get its close(), whatever failed before
                errors.append(exc)
            finally:
                sink.close()
        if errors:
            raise SinkError(f"flushing sinks failed: {errors[0]}") from errors[0]

    def run(self, sources: Iterable[Source]) -> RunStats:
        """Read every source to its end through the pipelines, then finish and commit. Sink failures raise
        ``SinkError``. Events a previous run already committed are skipped (see the module docstring)."""
        self.open()
        source_ctx = self.source_context()
        try:
            for source in sources:
                self._read(source, source_ctx)
            self.finish()
            # the input was read to its end: the commit that holds its last state also forgets where it stopped,
            # so a later run on this store reads its own input from the start instead of taking it for a resume
            ended = [*self.positions]
            self.positions, self.runs, self.digests = {}, {}, {}
            self.commit(force=True, ended=ended)
        except Crash:
            raise  # like kill -9: no flush, no commit, no close
        except BaseException:
            self.close()
            raise
        self.close()
        return self.ctx.stats

    def _read(self, source: Source, source_ctx: SourceContext) -> None:
        committed = self.positions.get(source.id, 0)
        restored_run = self.runs.get(source.id)
        source_ctx.run_id = restored_run or source_ctx.run_id
        self.runs[source.id] = source_ctx.run_id
        point = ResumePoint(committed, self.digests.get(source.id), durable=self.state.durable)
        seen = 0
        renamed: tuple[str, str] | None = None
        for batch in point.batches(source.read(source_ctx)):
            if seen == 0 and committed and point.resumed is not None:
                if point.resumed:
                    seen = committed
                    print(f"edgewise: source {source.id}: resuming after {count(committed, 'event')} (from the state "
                          "store)", file=self.ctx.errors)
                else:
                    print(f"edgewise: source {source.id}: the input is not the one the state store's last "
                          f"commit covers ({count(committed, 'event')}); reading it from its start, the state kept",
                          file=self.ctx.errors)
                    committed = 0
                    if restored_run is not None:  # new input under the old run id would reuse its event ids
                        new_run = new_run_id()
                        renamed = (f"{source.id}:{restored_run}:", f"{source.id}:{new_run}:")
                        self.runs[source.id] = new_run
            if isinstance(batch, Heartbeat):
                self.heartbeat(batch)
                continue
            if renamed is not None:
                batch = batch.renamed(*renamed)
            read = events_read(batch)
            seen += read
            if read:
                self.process(batch)
            self.positions[source.id] = seen
            if point.durable:
                self.digests[source.id] = point.digest.hex()
            self.tick()
            self.commit()

    def _malformed(self, message: str) -> None:
        if self.reports_input:
            self.ctx.stats.malformed += 1
            self.ctx.report(f"malformed record skipped: {message}")


def _base(plan: Plan) -> BuildContext:
    """Where the plan's relative paths start: its file's directory, or the base a text plan was loaded with."""
    return BuildContext(plan.base_dir)
