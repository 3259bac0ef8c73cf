"""One line per finished micro-batch of ``edgewise spark``: the rows it read (Spark's progress), what it wrote to
each sink (the pipeline's writer) and how long it took.

The line is made from the query's progress, which Spark completes only after the micro-batch (its
``foreachBatch`` cannot know the rows the sources gave), so the job polls for it while it waits
(``SparkJob.run``) and once more when a query ends: every micro-batch gets its line, in order. On a terminal the
same polls also show what the query is doing now (``MicroBatchLines.running``: the micro-batch running and for how
long) on a status line that changes in place.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

ROWS_IN_METRIC = "edgewise_rows_in"
"""The observed metric (``SparkJob._input``) counting the records a micro-batch read: ``{"rows": n}``."""


class Unseen:
    """The micro-batches of a query's progress (``recentProgress``, oldest first) not taken before."""

    def __init__(self) -> None:
        self.last = -1
        """The id of the last micro-batch taken."""

    def take(self, progress: list[Any]) -> list[Any]:
        new = [p for p in progress if int(p["batchId"]) > self.last]
        if new:
            self.last = int(new[-1]["batchId"])
        return new


class MicroBatchLines:
    """Reports the micro-batches of one pipeline's queries that were not reported yet."""

    def __init__(self, pipeline_id: str, say: Callable[[str], None] | None, written: dict[int, dict[str, int]],
                 marker_dir: str | None = None) -> None:
        self.pipeline_id = pipeline_id
        self.say = say
        self.written = written
        """Rows written per sink, by micro-batch id (``BatchWriter.written_by_batch``): taken out when reported, so
        a job that runs for weeks does not keep them."""
        self.marker = os.path.abspath(marker_dir) if marker_dir else None
        """The end-of-input marker's spool: its one row is not input."""
        self.unseen = Unseen()
        self.since = time.monotonic()
        """When the micro-batch now running began, about: the last line's time (polls are a second apart) or the
        query's start (``started``)."""

    def started(self) -> None:
        """The pipeline's query (re)started."""
        self.since = time.monotonic()

    def running(self, status: Mapping[str, Any], now: float) -> str:
        """What the query is doing now, from its ``status``: the micro-batch running and for how long, or what it
        waits for (Spark's own words: ``Waiting for data to arrive``)."""
        if status.get("isTriggerActive"):
            return f"pipeline {self.pipeline_id}: micro-batch {self.unseen.last + 1} running ({now - self.since:.0f} s)"
        message = str(status.get("message") or "waiting").rstrip(".")
        return f"pipeline {self.pipeline_id}: {message[:1].lower()}{message[1:]}"

    def report(self, progress: list[Any]) -> None:
        """Say a line for each micro-batch in ``progress`` (a query's ``recentProgress``) not said yet."""
        for p in self.unseen.take(progress):
            line = self.line(p)
            self.since = time.monotonic()
            if self.say is not None:
                self.say(line)

    def line(self, p: Mapping[str, Any]) -> str:
        observed = (p.get("observedMetrics") or {}).get(ROWS_IN_METRIC)
        if observed is not None:
            rows_in = int(observed["rows"] or 0)
        else:  # a query built without the metric: the rows its sources gave but the end-of-input marker's
            rows_in = sum(int(s.get("numInputRows") or 0) for s in p.get("sources") or []
                          if not (self.marker and self.marker in str(s.get("description", ""))))
        wrote = self.written.pop(int(p["batchId"]), {})
        out = ", ".join(f"{n:,} to {sink}" for sink, n in sorted(wrote.items()) if n) or "nothing written"
        seconds = int((p.get("durationMs") or {}).get("triggerExecution") or 0) / 1000
        return f"pipeline {self.pipeline_id}: micro-batch {p['batchId']}: {rows_in:,} rows in, {out} ({seconds:.1f} s)"
