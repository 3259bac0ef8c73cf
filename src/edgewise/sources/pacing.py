"""Pacing a replay: when each recorded message is due, at ``speed`` times its recorded pace.

The first message is due at once; a message recorded ``t`` seconds after the first is due ``t / speed`` seconds
after the replay started. A silence longer than ``max_gap`` (recordings made on different days, a recorder that was
off) is shortened to ``max_gap`` first. ``speed`` None is as fast as possible: nothing is ever waited for. A
message recorded before the one preceding it is due at once.
"""

from __future__ import annotations

from edgewise.clock import Clock


class Pacer:
    def __init__(self, clock: Clock, speed: float | None, max_gap_us: int | None = None) -> None:
        if speed is not None and speed <= 0:
            raise ValueError("speed must be above 0")
        self.clock = clock
        self.speed = speed
        self.max_gap_us = max_gap_us
        self.restart()

    def restart(self) -> None:
        """Start again from the next message (a looping replay's next pass)."""
        self._start_us: int | None = None   # wall-clock time of the first message
        self._last_at: int | None = None    # recorded time of the previous message
        self._elapsed_us = 0                # recorded time since the first message, silences shortened

    def wait_s(self, at_us: int) -> float:
        """Seconds until the message recorded at ``at_us`` is due (0 if it is due now); call once per message,
        in replay order."""
        now = self.clock.now_us()
        if self._last_at is None or self._start_us is None:
            self._start_us, self._last_at = now, at_us
            return 0.0
        gap = max(0, at_us - self._last_at)
        if self.max_gap_us is not None:
            gap = min(gap, self.max_gap_us)
        self._elapsed_us += gap
        self._last_at = max(self._last_at, at_us)
        if self.speed is None:
            return 0.0
        due = self._start_us + self._elapsed_us / self.speed
        return max(0.0, (due - now) / 1_000_000)

    def recorded_elapsed_s(self) -> float:
        """Recorded time replayed so far (silences shortened), in seconds."""
        return self._elapsed_us / 1_000_000
