"""Progress of long work (a replay) on a terminal: a rich progress bar on stderr, nothing otherwise.

``auto`` shows the bar only when stderr is a terminal, so logs, pipes and CI stay clean.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from types import TracebackType
from typing import Literal

ProgressMode = Literal["auto", "on", "off"]


class ReplayProgress:
    """Bytes of a recording replayed, and the recorded time reached."""

    def __init__(self, label: str, total_bytes: int, mode: ProgressMode = "auto") -> None:
        self.enabled = mode == "on" or (mode == "auto" and sys.stderr.isatty())
        self._bar = None
        self._task = None
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                                 TextColumn("recorded {task.fields[at]}"), TimeElapsedColumn(),
                                 console=Console(stderr=True))
            self._task = self._bar.add_task(label, total=total_bytes or None, at="-")

    def __enter__(self) -> ReplayProgress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()

    def update(self, done_bytes: int, at_us: int) -> None:
        if self._bar is not None and self._task is not None:
            at = datetime.fromtimestamp(at_us / 1_000_000, UTC).strftime("%Y-%m-%d %H:%M:%S")
            self._bar.update(self._task, completed=done_bytes, at=at)

    def next_pass(self) -> None:
        """A looping replay starts again from the beginning."""
        if self._bar is not None and self._task is not None:
            self._bar.reset(self._task)
