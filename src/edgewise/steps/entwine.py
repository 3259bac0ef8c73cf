"""``entwine``: each event's digest appended to a signed, hash-chained timeline (``docs/entwine.md``).

    - entwine: {id: receipts, timeline: timelines/edge-a, key: keys/edge-a.key, fields: [veh, spd, tst],
                anchor_every: 100, anchors: [timelines/edge-b], into: receipt}

gives each event ``receipt: {position: 7, hash: "…", timeline: "<public key>"}`` once its entry is on disk. The
timeline is written before the step returns (fsync), so a receipt downstream always names an entry that exists;
an event seen again (a replay after a crash) gets its first entry's receipt and is not appended twice.
"""

from __future__ import annotations

import logging
import os
from typing import Any, ClassVar

from edgewise.config import BuildContext
from edgewise.config.models import StepConfig
from edgewise.declare import Field
from edgewise.engine.context import RunContext
from edgewise.entwine.canonical import digest
from edgewise.entwine.keys import load_private
from edgewise.entwine.timeline import Timeline, read_head
from edgewise.errors import ConfigError
from edgewise.events import Batch, Payload
from edgewise.steps.annotate import set_path, split_path
from edgewise.steps.base import Step

log = logging.getLogger("edgewise.entwine")


class EntwineConfig(StepConfig):
    """Append each event's digest to a signed, hash-chained timeline."""

    timeline: str = Field(description="the timeline's directory (created on first use)")
    key: str = Field(description="the owner's Ed25519 private key file (`edgewise keygen FILE` makes one)")
    fields: list[str] | None = Field(default=None, min_length=1, description="the fields (dotted paths) the digest "
                                     "covers; default: the whole event")
    anchor_every: int = Field(default=0, ge=0, description="anchor the heads of `anchors` in every N-th entry (0: "
                              "never)")
    anchors: list[str] = Field(default_factory=list, description="other timelines whose heads this timeline "
                               "anchors: directories, or daemons' http://HOST:PORT/v1/timelines/<step> URLs")
    into: str | None = Field(default=None, description="field (dotted path) that receives the receipt "
                             "{position, hash, timeline}")


def selected(payload: Payload, fields: list[str] | None) -> Any:
    """What an event's digest covers: the whole payload, or ``{path: value}`` of the chosen fields (a missing one
    is null)."""
    if not fields:
        return payload
    out = {}
    for path in fields:
        value: Any = payload
        for part in split_path(path):
            value = value.get(part) if isinstance(value, dict) else None
        out[path] = value
    return out


class EntwineStep(Step):
    kind: ClassVar[str] = "entwine"
    Config = EntwineConfig
    config: EntwineConfig
    needs_order: ClassVar[bool] = True

    def __init__(self, config: EntwineConfig, ctx: BuildContext) -> None:
        super().__init__(config)
        self.directory = ctx.path(config.timeline)
        self.key_file = ctx.path(config.key)
        self.anchor_urls = [a.rstrip("/") for a in config.anchors if a.startswith(("http://", "https://"))]
        self.anchor_dirs = [ctx.path(a) for a in config.anchors if a.rstrip("/") not in self.anchor_urls]
        if self.directory in self.anchor_dirs:
            raise ConfigError(f"step {config.id}: a timeline cannot anchor itself ({config.timeline})")
        self.into = split_path(config.into) if config.into else None
        self.timeline: Timeline | None = None

    @classmethod
    def from_config(cls, config: Any, ctx: BuildContext) -> Step:
        return cls(config, ctx)

    def open(self, ctx: RunContext) -> None:
        if self.timeline is None:
            self.timeline = Timeline(self.directory, load_private(self.key_file), fields=self.config.fields)

    def close(self) -> None:
        if self.timeline is not None:
            self.timeline.close()
            self.timeline = None

    def process(self, batch: Batch, ctx: RunContext) -> Batch:
        if self.timeline is None:
            self.open(ctx)
        assert self.timeline is not None
        fields = self.config.fields
        # every digest before anything is written: an event that cannot be hashed fails alone
        items = [(event_id, digest(selected(p, fields))) for event_id, p in zip(batch.ids(), batch.payloads,
                                                                                  strict=True)]
        anchors = self._anchors() if self.config.anchor_every and self.config.anchors else None
        entries = self.timeline.append(items, anchors, self.config.anchor_every)
        if self.into is None:
            return batch
        public = self.timeline.public
        return batch.replace([set_path(p, self.into, {"position": e["pos"], "hash": e["hash"], "timeline": public})
                              for p, e in zip(batch.payloads, entries, strict=True)])

    def _anchors(self) -> list[dict[str, Any]]:
        """The other timelines' heads now. A timeline not started yet is left out, and so is a daemon that does not
        answer within a second or two (said in the log): anchoring must never hold the pipeline up."""
        out = []
        for directory in self.anchor_dirs:
            if os.path.exists(os.path.join(directory, "timeline.json")):
                head = read_head(directory)
                if head is not None:
                    head["at"] = os.path.relpath(directory, self.directory)
                    out.append(head)
        for url in self.anchor_urls:
            head = _remote_head(url)
            if head is not None:
                out.append({**head, "at": url})
        return out

    def describe(self) -> list[str]:
        covers = ", ".join(self.config.fields) if self.config.fields else "the whole event"
        lines = [f"{self.head()}: append a digest of {covers} to timeline {self.config.timeline} "
                 f"(signed with {self.config.key})"]
        if self.anchor_dirs:
            lines.append(f"  anchor every {self.config.anchor_every}: {', '.join(self.config.anchors)}")
        if self.config.into:
            lines.append(f"  receipt into {self.config.into}")
        return lines




def _remote_head(url: str) -> dict[str, Any] | None:
    """Another daemon's timeline head (``GET <url>/head``: ``/v1/timelines/<step>/head``), or None."""
    import httpx

    try:
        reply = httpx.get(f"{url}/head", timeout=2.0)
    except httpx.HTTPError as exc:
        log.warning("entwine: timeline %s did not answer (%s); this entry anchors the others", url, exc)
        return None
    if reply.status_code == 404:
        return None  # it has no entries yet
    if reply.status_code != 200:
        log.warning("entwine: timeline %s answered %d; this entry anchors the others", url, reply.status_code)
        return None
    head = reply.json()
    return {k: head[k] for k in ("timeline", "pos", "hash")}
