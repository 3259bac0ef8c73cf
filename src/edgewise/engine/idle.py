"""Idle sources: event time that moves on with processing time when no event arrives.

Event-time steps move their watermark with the events they see. A live source that goes quiet (a night without
buses, a broker that stopped) would hold the last windows and completions open until the next event, however
late that is. With an ``idle_timeout`` per source, once every source has been quiet for its timeout, the engine
tells the event-time steps that event time has moved on by the processing time since the last event arrived (and
then by each tick's elapsed time): windows close, event-time completions time out, dedupe forgets. An event that
arrives after that is judged against the moved watermark (it may be late), as it would be had it arrived on time.

A source without a timeout (``None``) is never idle, so it holds event time back as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgewise.config.models import SourceConfig


class Idleness:
    def __init__(self, timeouts_us: Mapping[str, int | None], speeds: Mapping[str, float] | None = None) -> None:
        self.timeouts = {s: t for s, t in timeouts_us.items()}
        self.speed = min((speeds or {}).values(), default=1.0)
        """Event time per unit of processing time while idle: the slowest source's ``idle_speed`` (a replay at
        1200x sets 1200, so its quiet keeps the recording's pace; a source of live data keeps 1)."""
        self.last: dict[str, int] = {}
        self._credited_to: int | None = None
        self.advanced_us = 0
        """How far event time has moved on while every source was idle, in all (``/v1/queue``'s
        ``idle_advanced_s``: a script can wait on it rather than on the clock)."""

    @property
    def enabled(self) -> bool:
        return bool(self.timeouts) and all(t for t in self.timeouts.values())

    def start(self, now_us: int) -> None:
        """The engine opened: quiet from now on counts (state restored with open windows must not wait forever
        for an event that never comes)."""
        self.last = dict.fromkeys(self.timeouts, now_us)
        self._credited_to = None

    def arrived(self, source: str, now_us: int) -> None:
        self.last[source] = now_us
        self._credited_to = None

    def advance_by(self, now_us: int) -> int:
        """How far (µs) event time moves on now: 0 unless every source is idle; then the processing time since the
        last arrival, or since the last call that moved it, times ``speed``."""
        if not self.enabled or not self.last:
            return 0
        for source, timeout in self.timeouts.items():
            if now_us - self.last.get(source, now_us) < (timeout or 0):
                return 0
        since = max(self.last.values()) if self._credited_to is None else self._credited_to
        self._credited_to = now_us
        moved = max(0, round((now_us - since) * self.speed))
        self.advanced_us += moved
        return moved


def unused_idle_timeouts(sources: Iterable[SourceConfig], engine: str) -> list[str]:
    """A note per source whose ``idle_timeout`` this engine does not apply (only the daemon does): one pipeline
    file runs everywhere, so the option is kept, but a user is told it has no effect here, and why."""
    why = {"command mode": "here the input's end closes windows and completions",
           "Spark": "Spark's watermark moves only with data (docs/spark.md)"}[engine]
    return [f"source {s.id}: idle_timeout applies to the edge daemon (edgewise serve), not to {engine}: {why}"
            for s in sources if s.idle_timeout is not None]
