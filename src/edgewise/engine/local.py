"""The local engine: runs a plan's pipelines over batches of events, in this process.

Every event enters every pipeline (each gets the same immutable payloads; steps copy what they change). A
pipeline's results go to its ``to`` sinks, or to stdout when it has none.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from typing import BinaryIO

from edgewise.clock import Clock, SystemClock
from edgewise.config import BuildContext
from edgewise.config.plan import Plan
from edgewise.engine.context import RunContext, RunStats
from edgewise.engine.event_time import assign_event_times
from edgewise.engine.guard import GuardedStep
from edgewise.errors import SinkError
from edgewise.events import Batch
from edgewise.sinks.base import Sink, SinkContext, SinkRunner
from edgewise.sinks.stdout import StdoutConfig, StdoutSink
from edgewise.sources.base import Source, SourceContext

STDOUT = "<stdout>"
"""The sink id results go to when a pipeline has no ``to``."""


class LocalEngine:
    """Runs a plan. ``open()``, then ``process(batch)`` for each batch, then ``close()``; or ``run(sources)``."""

    def __init__(self, plan: Plan, *, clock: Clock | None = None, stdout: BinaryIO | None = None,
                 errors: object = None, sinks: dict[str, Sink] | None = None, pipelines: list[str] | None = None,
                 sleep: Callable[[float], None] = time.sleep, batch_size: int = 1024) -> None:
        self.plan = plan
        self.clock = clock or SystemClock()
        self.stdout = stdout if stdout is not None else sys.stdout.buffer
        self.batch_size = batch_size
        chosen = plan.pipelines if pipelines is None else [plan.pipeline(p) for p in pipelines]
        self.pipelines = [(p.id, [GuardedStep(s, p.id) for s in p.steps], p.to or [STDOUT]) for p in chosen]
        build = BuildContext(base_dir=".")
        overrides = sinks or {}
        self.sinks: dict[str, Sink] = {}
        for sink_id, config in plan.sinks.items():
            self.sinks[sink_id] = overrides.get(sink_id) or plan.sink_classes[sink_id](config, _base(plan))
        self.sinks[STDOUT] = overrides.get(STDOUT) or StdoutSink(StdoutConfig(id="stdout"), build)
        self.ctx = RunContext(clock=self.clock, send=self._send, errors=errors, sleep=sleep)  # type: ignore[arg-type]
        self.runners = {sid: SinkRunner(s, sleep, self._sink_dead_letter) for sid, s in self.sinks.items()}
        self._opened = False

    @property
    def stats(self) -> RunStats:
        return self.ctx.stats

    def open(self) -> None:
        context = SinkContext(self.clock, self.stdout)
        for sink in self.sinks.values():
            sink.open(context)
        for _, steps, _ in self.pipelines:
            for g in steps:
                g.step.open(self.ctx)
        self._opened = True

    def ingest(self, batch: Batch) -> Batch:
        """Count the batch in and give it its event times."""
        self.ctx.stats.events_in += len(batch)
        if self.plan.event_time is None or not len(batch):
            return batch

        def failed(i: int, exc: Exception) -> None:
            self.ctx.stats.failed += 1
            self.ctx.report(f"event {batch.ids()[i]}: event_time failed: {exc}")

        return assign_event_times(batch, self.plan.event_time, failed)

    def run_pipelines(self, batch: Batch) -> dict[str, Batch]:
        """Run every pipeline on the batch and deliver the results; returns them by pipeline id."""
        results = {}
        for pipeline_id, steps, targets in self.pipelines:
            out = batch
            for guarded in steps:
                out = guarded.run(out, self.ctx)
                if not len(out):
                    break
            results[pipeline_id] = out
            self.ctx.stats.events_out[pipeline_id] += len(out)
            for target in targets:
                self._send(target, out)
        return results

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
        self.ctx.report(f"{len(batch)} events dead-lettered to {target}: {exc}")
        records = [{"event_id": i, "event": p, "error": {"type": type(exc).__name__, "message": str(exc)}}
                   for i, p in zip(batch.ids(), batch.payloads, strict=True)]
        self._send(target, batch.replace(records))

    def close(self) -> None:
        errors: list[Exception] = []
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
        """Read every source to its end through the pipelines. Sink failures raise ``SinkError``."""
        self.open()
        source_ctx = SourceContext(self.clock, self._malformed, self.batch_size)
        try:
            for source in sources:
                for batch in source.read(source_ctx):
                    self.process(batch)
        finally:
            self.close()
        return self.ctx.stats

    def _malformed(self, message: str) -> None:
        self.ctx.stats.malformed += 1
        self.ctx.report(f"malformed record skipped: {message}")


def _base(plan: Plan) -> BuildContext:
    import os

    return BuildContext(os.path.dirname(os.path.abspath(plan.file)) if not plan.file.startswith("<") else ".")
