"""One line per finished micro-batch of ``edgewise spark``: the rows it read (Spark's progress), what it wrote to
each sink (the pipeline's writer) and how long it took.

The line is made from the query's progress, which Spark completes only after the micro-batch (its
``foreachBatch`` cannot know the rows the sources gave), so the job polls for it while it waits
(``SparkJob.run``) and once more when a query ends: every micro-batch gets its line, in order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any


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

    def report(self, progress: list[Any]) -> None:
        """Say a line for each micro-batch in ``progress`` (a query's ``recentProgress``) not said yet."""
        for p in self.unseen.take(progress):
            line = self.line(p)
            if self.say is not None:
                self.say(line)

    def line(self, p: Mapping[str, Any]) -> str:
        rows_in = sum(int(s.get("numInputRows") or 0) for s in p.get("sources") or []
                      if not (self.marker and self.marker in str(s.get("description", ""))))
        wrote = self.written.pop(int(p["batchId"]), {})
        out = ", ".join(f"{n:,} to {sink}" for sink, n in sorted(wrote.items()) if n) or "nothing written"
        seconds = int((p.get("durationMs") or {}).get("triggerExecution") or 0) / 1000
        return f"pipeline {self.pipeline_id}: micro-batch {p['batchId']}: {rows_in:,} rows in, {out} ({seconds:.1f} s)"
