"""``edgewise``: send results to another edgewise daemon (a mesh): ``POST <url>/v1/events`` with the envelope
body, so the receiving daemon keeps each event's id, event time, ingest time and source, and a retried batch is
recognised there (its redelivery window) and by idempotent sinks.

The receiver answers 202 only after it queued the batch durably; 429 (its queue is full), 503 (it is starting or
stopping) and 507 (its disk is full) are retried with backoff, then the batch is dead-lettered here.
"""

from __future__ import annotations

import os
from typing import ClassVar, Literal

import orjson

from edgewise.config import BuildContext
from edgewise.daemon.bodies import ENVELOPE_TYPE
from edgewise.declare import Field
from edgewise.events import Batch
from edgewise.sinks.http import HttpClientConfig, HttpSink


class EdgewiseSinkConfig(HttpClientConfig):
    type: Literal["edgewise"] = "edgewise"
    url: str = Field(description="the other daemon's base URL, e.g. http://hub:8080")
    source: str | None = Field(default=None, description="the receiving daemon's http source (default: its first)")
    token_env: str | None = Field(default=None, description="environment variable holding the bearer token")


class EdgewiseSink(HttpSink):
    kind: ClassVar[str] = "edgewise"
    Config = EdgewiseSinkConfig  # type: ignore[assignment]  # a sibling of HttpSinkConfig, not a subclass
    config: EdgewiseSinkConfig

    def __init__(self, config: EdgewiseSinkConfig, ctx: BuildContext) -> None:
        headers = dict(config.headers)
        if config.token_env and os.environ.get(config.token_env):
            headers["Authorization"] = f"Bearer {os.environ[config.token_env]}"
        super().__init__(config.model_copy(update={"headers": headers}), ctx)
        self.url = f"{config.url.rstrip('/')}/v1/events" + (f"?source={config.source}" if config.source else "")

    def body(self, batch: Batch) -> tuple[bytes, str]:
        """The envelope, with what this daemon knows of the events: their ids and times, the batch's source and
        ingest time (the receiving daemon uses them, ``daemon/bodies.py``)."""
        events = [{"id": i, "event_time": t, "payload": p}
                  for i, t, p in zip(batch.ids(), batch.event_times, batch.payloads, strict=True)]
        return orjson.dumps({"events": events, "source": batch.source, "ingest_time": batch.ingest_time_us},
                            default=str), ENVELOPE_TYPE
