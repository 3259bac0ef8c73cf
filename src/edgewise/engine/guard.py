"""Runs a step with its ``when``, ``retry`` and ``on_error`` around it.

The fast path hands the whole batch to the step. If the step raises for some event, the batch is run again one
event at a time (pure steps only; steps with side effects always run one event at a time) so that only the
failing events get ``on_error``. A stateful step cannot be re-run on events it already counted: it isolates
its failures itself and raises ``EventsFailed`` with what the other events gave (a failed event changed no
state), and only the failed events are handled here. ``fail`` reports them (the run exits 1), ``skip`` drops
them, a sink id dead-letters them with the error, the step id and the time.
"""

from __future__ import annotations

from datetime import UTC, datetime

from edgewise.engine.context import RunContext
from edgewise.errors import EvalError, EventsFailed, StepError
from edgewise.events import Batch, equal_runs
from edgewise.expr.compiler import compile_expression
from edgewise.steps.base import Step

STEP_FAILURES = (EvalError, StepError)


class GuardedStep:
    def __init__(self, step: Step, pipeline_id: str) -> None:
        self.step = step
        self.pipeline_id = pipeline_id
        config = step.config
        self.when = compile_expression(config.when).evaluate if config.when else None
        self.retry = config.retry
        self.on_error = config.on_error

    def run(self, batch: Batch, ctx: RunContext) -> Batch:
        if not len(batch):
            return batch
        if self.when is None:
            return self._apply(batch, ctx)
        when = self.when
        try:
            mask = [when(p) is True for p in batch.payloads]
        except STEP_FAILURES:
            return self._per_event(batch, ctx)
        if all(mask):
            return self._apply(batch, ctx)
        if not any(mask):
            return batch
        # keep the order: apply the step to each run of matching events, pass the others through
        parts: list[Batch] = []
        for start, end in equal_runs(mask):
            chunk = batch.slice(start, end)
            parts.append(self._apply(chunk, ctx) if mask[start] else chunk)
        return Batch.concat([p for p in parts if len(p)]) if any(len(p) for p in parts) else batch.slice(0, 0)

    def _apply(self, batch: Batch, ctx: RunContext) -> Batch:
        if self.step.per_event and len(batch) > 1:
            return self._per_event(batch, ctx)
        try:
            return self.step.process(batch, ctx)
        except EventsFailed as partial:
            return self._partly_failed(batch, partial, ctx)
        except STEP_FAILURES as exc:
            if len(batch) == 1:
                return self._one_failed(batch, exc, ctx)
            return self._per_event(batch, ctx)

    def _partly_failed(self, batch: Batch, partial: EventsFailed, ctx: RunContext) -> Batch:
        """A stateful step processed the batch except for the failed events: those are retried (a ``StepError``
        under a retry policy) or get ``on_error``; what a retry gives follows the others' output."""
        output = partial.output
        assert isinstance(output, Batch)
        retried = [self._one_failed(batch.slice(i, i + 1), exc, ctx) for i, exc in partial.failures.items()]
        parts = [b for b in (output, *retried) if len(b)]
        return Batch.concat(parts) if parts else output

    def _per_event(self, batch: Batch, ctx: RunContext) -> Batch:
        outputs: list[Batch] = []
        for i in range(len(batch)):
            one = batch.slice(i, i + 1)
            if self.when is not None:
                try:
                    if self.when(one.payloads[0]) is not True:
                        outputs.append(one)
                        continue
                except STEP_FAILURES as exc:
                    self._failed(one, exc, ctx)
                    continue
            try:
                out = self.step.process(one, ctx)
            except EventsFailed as partial:
                out = self._partly_failed(one, partial, ctx)
            except STEP_FAILURES as exc:
                out = self._one_failed(one, exc, ctx)
            if len(out):
                outputs.append(out)
        return Batch.concat(outputs) if outputs else batch.slice(0, 0)

    def _one_failed(self, one: Batch, exc: Exception, ctx: RunContext) -> Batch:
        """Retry one event per the step's policy; if it still fails, apply ``on_error``."""
        policy = self.retry
        if policy is not None and isinstance(exc, StepError):
            wait = policy.backoff / 1_000_000
            for _ in range(policy.attempts - 1):
                ctx.sleep(wait)
                wait = min(wait * 2, policy.max_backoff / 1_000_000)
                ctx.count(self.step.id, "retried")
                try:
                    return self.step.process(one, ctx)
                except STEP_FAILURES as again:
                    exc = again
        self._failed(one, exc, ctx)
        return one.slice(0, 0)

    def _failed(self, one: Batch, exc: Exception, ctx: RunContext) -> None:
        step_id = self.step.id
        event_id = one.ids()[0]
        if self.on_error == "skip":
            ctx.count(step_id, "skipped")
            return
        if self.on_error == "fail":
            ctx.count(step_id, "failed")
            ctx.stats.failed += 1
            ctx.report(f"pipeline {self.pipeline_id}, step {step_id}: event {event_id} failed: {exc}")
            if ctx.on_failed is not None:
                ctx.on_failed(one, exc, self.pipeline_id, step_id)
            return
        ctx.count(step_id, "dead_lettered")
        ctx.stats.dead_lettered += 1
        ctx.send(self.on_error, dead_letter(one, exc, self.pipeline_id, step_id, ctx))


def dead_letter(one: Batch, exc: Exception, pipeline_id: str, step_id: str, ctx: RunContext) -> Batch:
    """The dead-letter record of a failed event: the event, the error, where and when it failed."""
    now = datetime.fromtimestamp(ctx.clock.now_us() / 1_000_000, UTC)
    event_id = one.ids()[0]
    record = {
        "event_id": event_id,
        "event": one.payloads[0],
        "error": {"type": getattr(exc, "error_class", type(exc).__name__), "message": str(exc)},
        "pipeline": pipeline_id,
        "step": step_id,
        "failed_at": now.isoformat().replace("+00:00", "Z"),
    }
    return Batch([record], source=one.source, ingest_time_us=one.ingest_time_us, event_times=one.event_times,
                 ids=[f"{event_id}#{step_id}"])
