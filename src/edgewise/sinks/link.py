"""The edge's end of a link (``placement.py``): each event that reaches a pipeline's split, as an envelope (its id,
event time and source) holding only the fields the hub's part reads.

Not a sink type of the pipeline file: ``placement.edge_plan`` adds one per split pipeline, a ``file`` sink into the
pipeline's folder of a spool link or a ``nats`` sink onto its subject, both with ``envelope: true``.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from edgewise.config import BuildContext
from edgewise.declare import Field
from edgewise.events import Batch
from edgewise.sinks.base import Sink
from edgewise.sinks.file import FileSink, FileSinkConfig
from edgewise.sinks.nats import NatsSink, NatsSinkConfig
from edgewise.sources.link import HEARTBEAT

if TYPE_CHECKING:
    from edgewise.config.models import SinkConfig
    from edgewise.config.plan import Plan
    from edgewise.placement import Split


BEAT_EVERY_US = 1_000_000
"""While the edge is idle, a heartbeat at most this often (each one a segment of its own in a spool)..."""
BEAT_AT_MOST_US = 60_000_000
"""...and, as the quiet goes on, less often: every tenth of the quiet so far, up to this (a night's quiet makes
hundreds of segments, not tens of thousands)."""


class LinkEnd(Sink):
    """What a link adds to its sink (a ``file`` or ``nats`` one, after this class in the bases): only the fields
    the hub reads, the newest event time it forwarded and, while the edge is idle, heartbeats.

    A heartbeat is an envelope ``{id: "~heartbeat:<run>:<n>", event_time, source: "~heartbeat", payload:
    {advanced_us}}``. The local engine moves its hub steps' event time on by ``advanced_us`` (as the edge's steps
    do, ``engine/idle.py``); Spark, whose watermark follows the newest event time its rows carry, reads
    ``event_time``: the newest event time forwarded, plus every advance so far."""

    config: Any

    def __init__(self, config: Any, ctx: BuildContext) -> None:
        super().__init__(config, ctx)
        self._newest_us: int | None = None
        self._pending_us = 0
        self._quiet_since_us: int | None = None
        self._beaten_us = 0
        self._beats = 0
        self._beat_run = secrets.token_hex(4)

    def write(self, batch: Batch) -> None:
        if len(batch):
            newest = max(batch.event_times)
            self._newest_us = newest if self._newest_us is None else max(self._newest_us, newest)
            self._quiet_since_us = None
        super().write(kept(batch, self.config.keep))  # type: ignore[safe-super]  # the file or nats sink's

    def idle(self, advanced_us: int, now_us: int) -> None:
        beat = self._beat(advanced_us, now_us)
        if beat is not None:
            super().write(beat)  # type: ignore[safe-super]
            self.flush()  # a spool's segment sealed now: a daemon may not commit (and seal) while nothing arrives

    def _beat(self, advanced_us: int, now_us: int) -> Batch | None:
        """The heartbeat to write now, if one is due."""
        if self._newest_us is None:  # nothing forwarded since this edge started: no time to say
            return None
        self._newest_us += advanced_us
        self._pending_us += advanced_us
        if self._quiet_since_us is None:
            self._quiet_since_us = now_us
        every = min(BEAT_AT_MOST_US, max(BEAT_EVERY_US, (now_us - self._quiet_since_us) // 10))
        if now_us - self._beaten_us < every:
            return None
        self._beaten_us = now_us
        self._beats += 1
        beat = Batch([{"advanced_us": self._pending_us}], source=HEARTBEAT, ingest_time_us=now_us,
                     event_times=[self._newest_us], ids=[f"{HEARTBEAT}:{self._beat_run}:{self._beats}"])
        self._pending_us = 0
        return beat


class LinkFileConfig(FileSinkConfig):
    keep: list[str] | None = Field(default=None, description="the top-level fields forwarded; None: all")


class LinkFileSink(LinkEnd, FileSink):
    config: LinkFileConfig


class LinkNatsConfig(NatsSinkConfig):
    keep: list[str] | None = Field(default=None, description="the top-level fields forwarded; None: all")


class LinkNatsSink(LinkEnd, NatsSink):
    config: LinkNatsConfig


def kept(batch: Batch, keep: list[str] | None) -> Batch:
    """The batch with only the ``keep`` fields of each event (in their order), ids and event times as they were."""
    if keep is None or not len(batch):
        return batch
    wanted = frozenset(keep)
    return Batch([{k: v for k, v in p.items() if k in wanted} for p in batch.payloads], source=batch.source,
                 ingest_time_us=batch.ingest_time_us, event_times=list(batch.event_times), ids=list(batch.ids()))


def link_sink_class(plan: Plan, split: Split) -> tuple[SinkConfig, Any]:
    """The sink config and class writing ``split``'s link."""
    from edgewise.config.models import SpoolLinkConfig
    from edgewise.placement import link_directory, link_of

    link = link_of(plan)
    keep = None if split.fields is None else sorted(split.fields)
    if isinstance(link, SpoolLinkConfig):
        return (LinkFileConfig.model_validate({"id": split.link_id, "type": "file", "path": link_directory(plan, split),
                                               "envelope": True, "max_age": f"{link.max_age}us", "keep": keep}),
                LinkFileSink)
    return (LinkNatsConfig(id=split.link_id, type="nats", url=link.url, subject=f"{link.subject}.{split.pipeline.id}",
                           envelope=True, keep=keep), LinkNatsSink)
