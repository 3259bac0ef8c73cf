"""The sink contract, and the runner that gives every sink retries with backoff and dead letters.

A sink receives batches of events. Each event has a stable ``id``: a sink that can write idempotently (a file
keyed by id, an upsert, a message id the broker deduplicates) should, because a batch may be delivered again
after a failure or a restart.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO, ClassVar

from edgewise.config.models import SinkConfig
from edgewise.errors import SinkError
from edgewise.events import Batch
from edgewise.wording import count

if TYPE_CHECKING:
    from edgewise.clock import Clock
    from edgewise.config import BuildContext


LivePublisher = Callable[[str, list[bytes]], None]
"""Publishes records (each one serialized JSON object) on a live channel of the daemon (``daemon/live.py``)."""


class SinkContext:
    """What a sink may use: the clock, the process's stdout (binary) and, inside the edge daemon, its live
    channels."""

    def __init__(self, clock: Clock, stdout: BinaryIO, live: LivePublisher | None = None) -> None:
        self.clock = clock
        self.stdout = stdout
        self.live = live


class Sink(ABC):
    kind: ClassVar[str]
    Config: ClassVar[type[SinkConfig]]

    def __init__(self, config: SinkConfig, ctx: BuildContext) -> None:
        self.config = config
        self.id = config.id

    def open(self, ctx: SinkContext) -> None:  # noqa: B027  # optional hook
        """Called once before the first write: connect, create directories."""

    @abstractmethod
    def write(self, batch: Batch) -> None:
        """Deliver the batch, or raise. Called again with the same events after a failure (retry), so write
        idempotently where the target allows. Raise ``RetryableSinkError`` when trying again may help (a
        connection refused), ``SinkError`` when it cannot."""

    def flush(self) -> None:  # noqa: B027  # optional hook
        """Make everything written so far durable or visible (end of input, shutdown)."""

    def idle(self, advanced_us: int, now_us: int) -> None:  # noqa: B027  # optional hook
        """Event time moved on by ``advanced_us`` while every source was quiet (``engine/idle.py``); a link
        forwards it to its hub as a heartbeat (``sinks/link.py``)."""

    def close(self) -> None:  # noqa: B027  # optional hook
        """Release resources. Called once, after ``flush``, also after a failure."""


class RetryableSinkError(SinkError):
    """A write failed for a reason that may pass (connection refused, 5xx, 429)."""


class SinkRunner:
    """Wraps a sink: retries a failed write with exponential backoff, then dead-letters or raises."""

    def __init__(self, sink: Sink, sleep: Callable[[float], None],
                 dead_letter: Callable[[str, Batch, Exception], None] | None = None) -> None:
        self.sink = sink
        self.sleep = sleep
        self.dead_letter = dead_letter
        self.retries = 0

    def write(self, batch: Batch) -> None:
        policy = self.sink.config.retry
        wait = policy.backoff / 1_000_000
        last: Exception | None = None
        for attempt in range(policy.attempts):
            try:
                self.sink.write(batch)
                return
            except RetryableSinkError as exc:
                last = exc
            except SinkError as exc:
                last = exc
                break
            except BrokenPipeError:
                raise  # the reader went away (`edgewise run ... | head`): retrying cannot help
            except OSError as exc:
                last = exc
            if attempt + 1 < policy.attempts:
                self.retries += 1
                self.sleep(wait)
                wait = min(wait * 2, policy.max_backoff / 1_000_000)
        assert last is not None
        target = self.sink.config.on_error
        if target != "fail" and self.dead_letter is not None:
            self.dead_letter(target, batch, last)
            return
        raise SinkError(f"sink {self.sink.id} could not deliver {count(len(batch), 'event')}: {last}") from last
