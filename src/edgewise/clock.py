"""Injected clocks. Step logic never reads the wall clock: it gets time from events or from a ``Clock``."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Processing time, in microseconds since the Unix epoch."""

    def now_us(self) -> int: ...

    def sleep(self, seconds: float) -> None:
        """Wait (a replay's pacing): the real clock sleeps, a fake one moves on at once."""


class SystemClock:
    """The real clock, used by the command and the daemon."""

    def now_us(self) -> int:
        return time.time_ns() // 1_000

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class FakeClock:
    """A clock that only moves when told to: ``clock.advance(seconds)``. For tests and ``edgewise test``."""

    __test__ = False

    def __init__(self, start_us: int = 0) -> None:
        self._now = start_us

    def now_us(self) -> int:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += int(seconds * 1_000_000)

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def set(self, now_us: int) -> None:
        self._now = now_us
