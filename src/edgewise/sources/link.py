"""The hub's end of a link (``placement.py``): its sources' configs, and the local engine's reader of a spool link.

A link's sources are read only by a hub. On Spark (``engine/spark/sources.py``, ``engine/spark/nats.py``) their
fields are typed by their use, not from a sample (the hub often starts before the edge has written much, and a
sample of the first events would pin types for every later run: a speed of exactly 0 early on would make it an
integer), each message's envelope is unwrapped and each heartbeat routed past the steps, its event time moving the
watermark. The edge's end, with what a heartbeat holds: ``sinks/link.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from edgewise.events import Batch
from edgewise.sources.base import Heartbeat, SourceContext
from edgewise.sources.file import FileSource, FileSourceConfig
from edgewise.sources.nats import NatsSourceConfig

HEARTBEAT = "~heartbeat"
"""A heartbeat envelope's ``source`` and the start of its id (``~`` starts no source id, so no event's)."""


class LinkSourceConfig(FileSourceConfig):
    """A spool link's folder of one split pipeline."""

    is_link: ClassVar[bool] = True


class LinkNatsSourceConfig(NatsSourceConfig):
    """A NATS link's subject of one split pipeline (read by Spark)."""

    is_link: ClassVar[bool] = True


class LinkFileSource(FileSource):
    """A hub's end of a spool link on the local engine: its events, and each heartbeat as a ``Heartbeat``."""

    def read(self, ctx: SourceContext) -> Iterator[Batch]:
        ctx.head = None  # heartbeats are found in decoded batches, not in lines a fused head ran steps on
        prefix = HEARTBEAT + ":"
        for batch in super().read(ctx):
            ids = batch.ids()
            beats = [i for i, ident in enumerate(ids) if ident.startswith(prefix)]
            if not beats:
                yield batch
                continue
            start = 0
            for i in beats:
                if i > start:
                    yield batch.slice(start, i)
                advanced = batch.payloads[i].get("advanced_us")
                if isinstance(advanced, int) and advanced > 0:
                    yield Heartbeat(self.id, advanced, batch.event_times[i])
                start = i + 1
            if start < len(batch):
                yield batch.slice(start, len(batch))
