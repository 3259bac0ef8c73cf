"""``nats``: events published to NATS JetStream (nats-py; ``pip install 'edgewise[nats]'``).

Each message carries the event id in the ``Nats-Msg-Id`` header, so JetStream drops a message it already has
within the stream's duplicate window: a batch published again after a failure or a restart is not stored twice.
A publish waits for JetStream's acknowledgement. The sink keeps its own event loop on a thread (sinks are called
from the worker's synchronous loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import threading
from typing import Any, ClassVar, Literal

import orjson

from edgewise.config import BuildContext
from edgewise.config.models import SinkConfig
from edgewise.declare import Field
from edgewise.durations import Duration
from edgewise.errors import PluginError
from edgewise.events import Batch
from edgewise.sinks.base import RetryableSinkError, Sink, SinkContext
from edgewise.sinks.stdout import envelope_of


class NatsSinkConfig(SinkConfig):
    type: Literal["nats"] = "nats"
    url: str = Field(default="nats://127.0.0.1:4222", description="server URL")
    subject: str = Field(min_length=1, description="subject to publish to (a stream must capture it)")
    envelope: bool = Field(default=False, description="publish {id, event_time, source, payload} instead of the "
                           "payload")
    timeout: Duration = Field(default=10_000_000, description="how long to wait for JetStream's acknowledgements")


class NatsSink(Sink):
    kind: ClassVar[str] = "nats"
    Config = NatsSinkConfig
    config: NatsSinkConfig

    def __init__(self, config: NatsSinkConfig, ctx: BuildContext) -> None:
        super().__init__(config, ctx)
        try:
            self.nats: Any = importlib.import_module("nats")
        except ImportError:
            raise PluginError("the nats sink needs nats-py: pip install 'edgewise[nats]'") from None
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._nc: Any = None
        self._js: Any = None

    def open(self, ctx: SinkContext) -> None:
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"nats-sink-{self.id}", daemon=True)
        self._thread.start()

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(self.config.timeout / 1_000_000 + 5)

    async def _publish(self, messages: list[tuple[str, bytes]]) -> None:
        if self._nc is None or self._nc.is_closed:
            self._nc = await self.nats.connect(servers=[self.config.url], connect_timeout=5,
                                               max_reconnect_attempts=3)
            self._js = self._nc.jetstream(timeout=self.config.timeout / 1_000_000)
        await asyncio.gather(*(self._js.publish(self.config.subject, body, headers={"Nats-Msg-Id": msg_id})
                               for msg_id, body in messages))

    def write(self, batch: Batch) -> None:
        items = ([envelope_of(batch, i) for i in range(len(batch))] if self.config.envelope
                 else batch.payloads)
        messages = [(i, orjson.dumps(x, default=str)) for i, x in zip(batch.ids(), items, strict=True)]
        try:
            self._run(self._publish(messages))
        except Exception as exc:  # noqa: BLE001  # connection, timeout, no stream: may pass; retried then dead-lettered
            raise RetryableSinkError(f"nats {self.config.url} {self.config.subject}: {type(exc).__name__}: "
                                     f"{exc}") from None

    def close(self) -> None:
        if self._nc is not None:
            with contextlib.suppress(Exception):  # closing a broken connection: nothing left to save
                self._run(self._nc.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)
        if not self._loop.is_running():  # stopped: its selector and sockets closed now, not left to the collector
            self._loop.close()
