"""``nats``: messages from a NATS JetStream stream into the edge daemon's queue (nats-py;
``pip install 'edgewise[nats]'``).

A durable pull consumer fetches batches; each message is acknowledged only after it is durably queued, so
JetStream redelivers anything a crash interrupted (at-least-once). While the queue is above its high-water mark
nothing is fetched: messages wait in the stream. The stream must exist (``nats stream add``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from typing import Any, ClassVar, Literal

from edgewise.config import BuildContext
from edgewise.config.models import SourceConfig
from edgewise.daemon.bodies import MESSAGE_FORMATS
from edgewise.daemon.queue import DEFAULT_REDELIVERY_WINDOW_US, Append
from edgewise.declare import Field
from edgewise.durations import Duration
from edgewise.errors import PluginError
from edgewise.sources.base import DaemonSource, Ingest


def _nats() -> Any:
    try:
        return importlib.import_module("nats")
    except ImportError:
        raise PluginError("the nats source needs nats-py: pip install 'edgewise[nats]'") from None


class NatsSourceConfig(SourceConfig):
    type: Literal["nats"] = "nats"
    url: str = Field(default="nats://127.0.0.1:4222", description="server URL")
    stream: str = Field(description="the JetStream stream to read")
    subject: str = Field(default=">", description="subject filter within the stream")
    durable: str | None = Field(default=None, description="durable consumer name; default edgewise-<source id>")
    batch: int = Field(default=256, ge=1, le=10_000, description="messages fetched at a time")
    format: Literal["json", "hfp"] = Field(default="json", description="message body format")
    redelivery_window: Duration = Field(
        default=DEFAULT_REDELIVERY_WINDOW_US, description="a message with a Nats-Msg-Id header gets the event id "
        "<source>:<msg id>; the same id again within this window (a redelivery whose ack was lost) is acknowledged "
        "and not queued again (0: not checked)")


class NatsSource(DaemonSource):
    kind: ClassVar[str] = "nats"
    Config = NatsSourceConfig
    config: NatsSourceConfig

    def __init__(self, config: NatsSourceConfig, ctx: BuildContext) -> None:
        super().__init__(config, ctx)
        self.nats = _nats()
        self.decode = MESSAGE_FORMATS[config.format]
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.received = 0
        self.connected = False
        self.error: str | None = None

    def start(self, ingest: Ingest) -> None:
        """Called on the daemon's event loop: the consumer runs as a task there."""
        self._task = asyncio.get_running_loop().create_task(self._consume(ingest), name=f"nats-{self.id}")

    async def _consume(self, ingest: Ingest) -> None:
        c = self.config
        nats = self.nats
        while not self._stopping:
            try:
                nc = await nats.connect(servers=[c.url], reconnect_time_wait=1, max_reconnect_attempts=-1,
                                        connect_timeout=5)
            except Exception as exc:  # noqa: BLE001  # server down: try again
                self.error = f"connect: {exc}"
                await asyncio.sleep(1)
                continue
            try:
                js = nc.jetstream()
                sub = await js.pull_subscribe(c.subject, durable=c.durable or f"edgewise-{self.id}",
                                              stream=c.stream)
                self.connected, self.error = True, None
                while not self._stopping:
                    await asyncio.to_thread(ingest.wait_for_room)
                    try:
                        msgs = await sub.fetch(c.batch, timeout=1)
                    except nats.errors.TimeoutError:
                        continue
                    await self._queue(msgs, ingest)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001  # reported in /v1/queue; reconnect and go on
                self.error = str(exc) or type(exc).__name__
                await asyncio.sleep(1)
            finally:
                self.connected = False
                with contextlib.suppress(Exception):
                    await nc.close()

    async def _queue(self, msgs: list[Any], ingest: Ingest) -> None:
        futures = []
        for msg in msgs:
            self.received += 1
            meta = {"topic": msg.subject, "format": self.config.format}
            try:
                self.decode(msg.subject, msg.data)
            except Exception as exc:  # noqa: BLE001  # any decoding problem: dead-letter the message, go on
                append = Append(self.id, "dead", msg.data, 1, meta={**meta, "error": f"undecodable: {exc}"})
            else:
                msg_id = (msg.headers or {}).get("Nats-Msg-Id")
                append = Append(self.id, "message", msg.data, 1, meta=meta,
                                ids=[f"{self.id}:{msg_id}"] if msg_id else None,
                                redelivery_us=self.config.redelivery_window if msg_id else 0)
            futures.append(asyncio.wrap_future(ingest.submit(append)))
        results = await asyncio.gather(*futures, return_exceptions=True)
        for msg, result in zip(msgs, results, strict=True):
            if isinstance(result, BaseException):
                await msg.nak(delay=1)  # not queued: JetStream redelivers it
            else:
                await msg.ack()

    def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def status(self) -> dict[str, object]:
        return {"connected": self.connected, "received": self.received, "error": self.error}
