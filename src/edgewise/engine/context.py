"""What steps, sources and sinks may use while running: the clock, counters, other sinks, the error report."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from edgewise.clock import Clock, SystemClock

if TYPE_CHECKING:
    from edgewise.events import Batch


@dataclass
class RunStats:
    """What a run did, for the exit code and the summary line."""

    events_in: int = 0
    events_out: Counter[str] = field(default_factory=Counter)
    failed: int = 0
    malformed: int = 0
    dead_lettered: int = 0
    sink_failures: int = 0
    steps: Counter[tuple[str, str]] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not (self.failed or self.malformed or self.sink_failures)


class RunContext:
    """Shared by everything in one run. Not thread-safe: one engine runs one batch at a time."""

    def __init__(self, *, clock: Clock | None = None, send: Callable[[str, Batch], None] | None = None,
                 errors: TextIO | None = None, sleep: Callable[[float], None] = time.sleep,
                 max_error_lines: int = 50) -> None:
        self.clock: Clock = clock or SystemClock()
        self.stats = RunStats()
        self.sleep = sleep
        self._send = send
        self._errors = errors if errors is not None else sys.stderr
        self._error_lines = 0
        self._max_error_lines = max_error_lines
        self.on_failed: Callable[[Batch, Exception, str, str], None] | None = None
        """Called with (event, error, pipeline id, step id) for each event a step failed on with ``on_error:
        fail``; the daemon keeps them as dead letters."""

    @property
    def errors(self) -> TextIO:
        """Where operator messages go (stderr by default)."""
        return self._errors

    def count(self, step_id: str, what: str, n: int = 1) -> None:
        self.stats.steps[(step_id, what)] += n

    def send(self, sink_id: str, batch: Batch) -> None:
        """Deliver a batch to a sink (``tee``, dead letters)."""
        if self._send is None:
            raise RuntimeError("this context has no sinks")
        if len(batch):
            self._send(sink_id, batch)

    def report(self, message: str) -> None:
        """One line on stderr for the operator; after ``max_error_lines`` only a count is kept."""
        self._error_lines += 1
        if self._error_lines <= self._max_error_lines:
            print(f"edgewise: {message}", file=self._errors)
        elif self._error_lines == self._max_error_lines + 1:
            print("edgewise: more errors follow; only their count is reported at the end", file=self._errors)
