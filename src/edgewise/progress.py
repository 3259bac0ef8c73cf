"""Progress of long work on a terminal: a rich progress bar for a replay, a status line for a Spark job; nothing
but plain lines otherwise.

``auto`` shows the bar only when stderr is a terminal, so logs, pipes and CI stay clean.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Literal

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


class StatusLine:
    """Lines for a log, and on a terminal one line more that changes in place (rich): what a long job is doing
    now, e.g. ``⠋ pipeline p: micro-batch 3 running (41 s)``. The finished lines are printed above it, so a terminal
    shows the same lines a log gets, plus where the job is.

    ``terminal`` is a file descriptor of the terminal (``quiet_stderr`` gives the real one while it filters fd 2);
    None, a descriptor that is not a terminal, or a terminal that cannot redraw a line (``TERM=dumb``) gives plain
    lines on ``sys.stderr`` and no status.
    """

    def __init__(self, terminal: int | None) -> None:
        self._status: Any = None
        self._console: Any = None
        if terminal is not None and os.isatty(terminal):
            from rich.console import Console

            # not closed: the descriptor is the caller's, and closefd=False leaves it open
            console = Console(file=open(terminal, "w", encoding="utf-8", closefd=False), stderr=True)  # noqa: SIM115
            if console.is_interactive:  # not TERM=dumb: a status can be redrawn in place
                self._console = console
        self.enabled = self._console is not None

    def __enter__(self) -> StatusLine:
        if self._console is not None:
            self._status = self._console.status("", spinner="dots")
            self._status.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._status is not None:
            self._status.stop()  # transient: the status goes, the lines stay
            self._status = None

    def say(self, line: str) -> None:
        """A finished line, as a log gets it."""
        if self._status is not None:
            self._console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, file=sys.stderr)

    def show(self, text: str) -> None:
        """What the job is doing now (nothing without a terminal)."""
        if self._status is not None:
            self._status.update(text)
