"""The source contract.

A source yields batches of events. In command mode it is finite: ``read`` returns when the input ends. Each
event gets a stable id from the source: ``<source id>:<input identity>:<position>``, so re-reading the same file
gives the same ids (sinks can then deduplicate).

A record that cannot be decoded is reported through ``SourceContext.malformed`` with its position, and skipped;
the rest of the input is still read.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, ClassVar, Protocol

from edgewise.config.models import SourceConfig
from edgewise.errors import SourceError
from edgewise.events import Batch

if TYPE_CHECKING:
    from concurrent.futures import Future  # with logging, ~2% of a one-shot run, which has no daemon source

    from edgewise.clock import Clock
    from edgewise.config import BuildContext
    from edgewise.daemon.queue import Append, Appended


def new_run_id() -> str:
    """A fresh id for one reading of an input without an identity of its own (stdin), as event ids carry it."""
    # os.urandom is what secrets.token_hex reads; the secrets module (with random and hashlib) was ~5% of the
    # instructions of a one-shot run
    return os.urandom(6).hex()


class SourceContext:
    def __init__(self, clock: Clock, malformed: Callable[[str], None], batch_size: int = 1024,
                 run_id: str | None = None) -> None:
        self.clock = clock
        self.malformed = malformed
        self.batch_size = batch_size
        self.run_id = run_id or new_run_id()
        """Identifies this reading of an input that has no identity of its own (stdin) in event ids. A run that
        resumes from a state store gets the interrupted run's id back, so replayed events keep their ids."""
        self.head: LineHead | None = None
        """The reading pipeline's leading steps, fused to run on each NDJSON line as it is decoded
        (``engine/fused.py``); None: decode every line into the batch. The engine sets it where it applies."""


class Heartbeat(Batch):
    """No events: a hub's link saying the edge's event time moved on by ``advanced_us`` while its sources were
    quiet (``sinks/link.py``). A source yields it between batches; the engine moves event time on."""

    def __init__(self, source: str, advanced_us: int, event_time_us: int) -> None:
        super().__init__([], source=source, ingest_time_us=event_time_us, event_times=[], ids=[])
        self.advanced_us = advanced_us


class LineHead(Protocol):
    """A pipeline's leading steps run on undecoded NDJSON lines (the engine's fused head)."""

    read_factor: int
    """Chunks of lines this many times the usual size suit it (its batches hold less than the events)."""

    def run(self, lines: list[bytes], first: int, source_id: str, id_prefix: str, ctx: SourceContext) -> Batch | None:
        """What the steps give for ``lines`` (numbered from ``first``), as a batch the engine recognises; None
        where the lines must be decoded into a batch and run the general way."""


class Source(ABC):
    kind: ClassVar[str]
    Config: ClassVar[type[SourceConfig]]

    def __init__(self, config: SourceConfig, ctx: BuildContext) -> None:
        self.config = config
        self.id = config.id

    @abstractmethod
    def read(self, ctx: SourceContext) -> Iterator[Batch]:
        """Yield batches until the input ends. Report malformed records with ``ctx.malformed`` and go on."""


class Ingest(Protocol):
    """Where a daemon source puts what it receives: the durable queue (``edgewise serve``)."""

    def submit(self, append: Append) -> Future[Appended]:
        """Queue one message; the future resolves after the commit (then acknowledge it to the broker)."""

    def wait_for_room(self) -> None:
        """Block while the queue is above its high-water mark (backpressure toward the broker)."""


class DaemonSource(Source):
    """A source that pushes into the edge daemon's queue (MQTT, NATS, HTTP) instead of being read to its end.

    ``start`` connects and begins delivering on threads of its own or on the daemon's event loop; a message is
    acknowledged to its broker only after ``Ingest.submit``'s future resolved, i.e. after it is durably queued.
    """

    def read(self, ctx: SourceContext) -> Iterator[Batch]:
        raise SourceError(f"source {self.id}: the {self.kind} source runs in the edge daemon "
                          f"(`edgewise serve`), not in `edgewise run`")

    @abstractmethod
    def start(self, ingest: Ingest) -> None:
        """Connect and begin delivering. Must not block."""

    def stop(self) -> None:  # optional hook
        """Stop taking messages (unacknowledged ones are redelivered by the broker later)."""

    def status(self) -> dict[str, object]:
        """For ``/v1/queue`` and logs: connected or not, counts."""
        return {}
