"""``file``: rolling NDJSON segments in a directory, each atomically renamed into place when sealed.

A segment is written as ``part-<first event µs>-<run>-<n>.ndjson.open`` and, when it reaches ``max_events``,
``max_bytes`` or ``max_age`` (or at the end of the run), fsynced and renamed to ``.ndjson``. Readers (the Spark
job's file source, ``tail``) only read sealed ``.ndjson`` files, so they never see half a segment. With
``envelope: true`` every line carries the event's id and event time, which is what the Spark engine reads.

A sealed segment's modification time (to the millisecond) is later than the segment's sealed before it, so a
reader that orders a spool by modification time (Spark's file source) reads it in name order, as the local engine
does, even when segments are sealed within one millisecond (issue 39).

``mode: append`` (the default) adds a run's segments beside those already there: a daemon's spool, restarted,
goes on. ``mode: replace`` removes the segments an earlier run left (this sink's ``part-*.ndjson`` files, sealed or
open, nothing else) when the run opens: a one-shot command run twice gives its output once, not twice.
"""

from __future__ import annotations

import os
import secrets
import time
from typing import IO, ClassVar, Literal

from edgewise.clock import Clock
from edgewise.config import BuildContext
from edgewise.config.models import SinkConfig
from edgewise.declare import Field
from edgewise.durations import Duration
from edgewise.events import Batch
from edgewise.jsonio import dumps_lines
from edgewise.sinks.base import Sink, SinkContext
from edgewise.sinks.stdout import envelope_of


class FileSinkConfig(SinkConfig):
    type: Literal["file"] = "file"
    path: str = Field(description="directory for the segments (created if missing), relative to the pipeline file")
    max_events: int = Field(default=100_000, ge=1, description="seal a segment after this many events")
    max_bytes: int = Field(default=64 * 1024 * 1024, ge=1024, description="seal a segment after this many bytes")
    max_age: Duration = Field(default=60_000_000, description="seal a segment this long after its first event")
    envelope: bool = Field(default=False, description="write {id, event_time, source, payload} per line")
    fsync: bool = Field(default=True, description="fsync each segment and the directory when sealing")
    mode: Literal["append", "replace"] = Field(
        default="append", description="append: add segments beside an earlier run's (a spool); replace: remove the "
        "segments an earlier run left when the run opens (one-shot output; a resumed run loses them too)")


class FileSink(Sink):
    kind: ClassVar[str] = "file"
    Config = FileSinkConfig
    config: FileSinkConfig

    def __init__(self, config: FileSinkConfig, ctx: BuildContext) -> None:
        super().__init__(config, ctx)
        self.directory = ctx.path(config.path)
        self._run = secrets.token_hex(4)
        self._seq = 0
        self._fh: IO[bytes] | None = None
        self._open_name = ""
        self._events = 0
        self._bytes = 0
        self._started_us = 0
        self._clock: Clock | None = None
        self._last_sealed_ms = 0
        self.sealed: list[str] = []

    def open(self, ctx: SinkContext) -> None:
        os.makedirs(self.directory, exist_ok=True)
        if self.config.mode == "replace":
            for name in os.listdir(self.directory):
                if name.startswith("part-") and name.endswith((".ndjson", ".ndjson.open")):
                    os.remove(os.path.join(self.directory, name))
        self._last_sealed_ms = max((os.stat(os.path.join(self.directory, name)).st_mtime_ns // 1_000_000
                                    for name in os.listdir(self.directory)
                                    if name.startswith("part-") and name.endswith(".ndjson")), default=0)
        self._clock = ctx.clock

    def write(self, batch: Batch) -> None:
        if not len(batch):
            return
        if self.config.envelope:
            data = dumps_lines(envelope_of(batch, i) for i in range(len(batch)))
        else:
            data = dumps_lines(batch.payloads)
        assert self._clock is not None
        now = self._clock.now_us()
        if self._fh is not None and now - self._started_us >= self.config.max_age:
            self._seal()
        if self._fh is None:
            self._start(now)
        assert self._fh is not None
        self._fh.write(data)
        self._events += len(batch)
        self._bytes += len(data)
        if self._events >= self.config.max_events or self._bytes >= self.config.max_bytes:
            self._seal()

    def _start(self, now_us: int) -> None:
        self._seq += 1
        self._started_us = now_us
        self._open_name = os.path.join(self.directory, f"part-{now_us:017d}-{self._run}-{self._seq:06d}.ndjson.open")
        self._fh = open(self._open_name, "wb")  # noqa: SIM115  # kept open across writes until sealed
        self._events = 0
        self._bytes = 0

    def _seal(self) -> None:
        fh = self._fh
        if fh is None:
            return
        fh.flush()
        self._after_the_last(fh.fileno())
        if self.config.fsync:
            os.fsync(fh.fileno())
        fh.close()
        final = self._open_name[: -len(".open")]
        os.replace(self._open_name, final)
        if self.config.fsync:
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        self.sealed.append(final)
        self._fh = None

    def _after_the_last(self, fd: int) -> None:
        """Give the segment being sealed a modification time at least a millisecond after the last one's."""
        mtime_ms = os.fstat(fd).st_mtime_ns // 1_000_000
        if mtime_ms <= self._last_sealed_ms:
            mtime_ms = self._last_sealed_ms + 1
            os.utime(fd, ns=(time.time_ns(), mtime_ms * 1_000_000))
        self._last_sealed_ms = mtime_ms

    def flush(self) -> None:
        self._seal()

    def close(self) -> None:
        self._seal()
