"""``stdout``: one JSON object (the payload) per line. Pipelines without ``to`` write here."""

from __future__ import annotations

from typing import BinaryIO, ClassVar, Literal

from edgewise.config.models import SinkConfig
from edgewise.declare import Field
from edgewise.events import Batch
from edgewise.jsonio import dumps_lines
from edgewise.sinks.base import Sink, SinkContext


class StdoutConfig(SinkConfig):
    type: Literal["stdout"] = "stdout"
    envelope: bool = Field(default=False, description="write {id, event_time, source, payload} instead of the payload")


class StdoutSink(Sink):
    kind: ClassVar[str] = "stdout"
    Config = StdoutConfig
    _out: BinaryIO

    def open(self, ctx: SinkContext) -> None:
        self._out = ctx.stdout

    def write(self, batch: Batch) -> None:
        envelope = getattr(self.config, "envelope", False)
        if envelope:
            self._out.write(dumps_lines(envelope_of(batch, i) for i in range(len(batch))))
        else:
            self._out.write(dumps_lines(batch.payloads))

    def flush(self) -> None:
        self._out.flush()


def envelope_of(batch: Batch, i: int) -> dict[str, object]:
    """The event with its metadata, as the file spool and ``envelope: true`` write it."""
    return {"id": batch.ids()[i], "event_time": batch.event_times[i], "source": batch.source,
            "payload": batch.payloads[i]}
