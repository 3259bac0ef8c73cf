"""Which stateful steps may follow each other in one Spark query (issue 43).

edgewise runs each pipeline as one Spark query with one watermark (``allowMultiple = false``, docs/spark.md): every
``withWatermark`` a step defines (``window``, ``dedupe``, an event-time ``complete``) joins it, and Spark takes the
smallest, so each step waits for the longest delay. A row that reaches a window in the micro-batch it came in
with is judged late by that micro-batch's watermark, as locally by the window's own, so a ``dedupe`` or an
``aggregate`` may come before a window. What a step emits only *after* the watermark passed it is another matter:
a window's results and an event-time ``complete``'s timeouts come out once the watermark is past their time, and
a window after them would find them all late. Those chains are refused before Spark starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgewise.steps.base import Step


def event_time_complete(step: Step) -> bool:
    """A ``complete`` whose timeouts follow event time (the query's watermark)."""
    return step.kind == "complete" and getattr(step.config, "time", "") == "event"


def emits_behind_watermark(step: Step) -> bool:
    """The step's output rows come out after the watermark passed their event time (a window's results, an
    event-time completion's timeouts)."""
    return step.kind == "window" or event_time_complete(step)


def refused_chain(steps: list[Step]) -> tuple[int, str] | None:
    """The first step of ``steps`` (a pipeline's) Spark cannot run after the steps before it, with the reason."""
    behind: Step | None = None  # the first step whose output comes out behind the watermark
    for index, step in enumerate(steps):
        if step.kind == "window" and behind is not None:
            what = "its results" if behind.kind == "window" else "its timeouts"
            return index, (
                f"step {step.id}: on Spark a window cannot follow {behind.kind} {behind.id}: {what} come out once "
                "the query's one watermark has passed them, and the window would find every one of them late. "
                "Split the pipeline in two through a file sink and a file source, or run it on the local engine")
        if behind is None and emits_behind_watermark(step):
            behind = step
    return None


__all__ = ["emits_behind_watermark", "event_time_complete", "refused_chain"]
