"""``live``: results to browsers, on a channel of the edge daemon (``/v1/live/<channel>/events``, ``/ui/map``).

Inside ``edgewise serve`` the records go straight to the daemon's channel. Anywhere else (``edgewise run``, a
Spark job) the sink needs ``url:``, a daemon to publish to (``POST /v1/live/<channel>``, accepted from the
daemon's own machine). Each record is sent as ``{id, event_time, source, payload}``: a page uses the event time to
keep only the newest result per key. A live channel is a view, not storage (``daemon/live.py``): send results
that must be kept to a durable sink as well.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import httpx
import orjson

from edgewise.config import BuildContext
from edgewise.config.models import SinkConfig
from edgewise.daemon.live import CHANNEL_PATTERN
from edgewise.declare import Field
from edgewise.durations import Duration
from edgewise.errors import SinkError
from edgewise.events import Batch
from edgewise.jsonio import dumps
from edgewise.sinks.base import LivePublisher, RetryableSinkError, Sink, SinkContext
from edgewise.sinks.http import send
from edgewise.sinks.stdout import envelope_of


class LiveSinkConfig(SinkConfig):
    type: Literal["live"] = "live"
    channel: str | None = Field(default=None, pattern=CHANNEL_PATTERN, description="the channel browsers subscribe to "
                                "(GET /v1/live/<channel>); default: the sink's id")
    url: str | None = Field(default=None, description="outside the daemon (edgewise run, Spark): the daemon to publish "
                            "to, e.g. http://127.0.0.1:8080")
    url_file: str | None = Field(default=None, description="instead of url: a JSON file whose `url` is the daemon's "
                                 "(an edge daemon writes one into its spool link, where a hub's live sinks find it)")
    batch_size: int = Field(default=1000, ge=1, le=100_000, description="records per request (with url)")
    timeout: Duration = Field(default=5_000_000, description="request timeout (with url)")


class LiveSink(Sink):
    kind: ClassVar[str] = "live"
    Config = LiveSinkConfig
    config: LiveSinkConfig

    def __init__(self, config: LiveSinkConfig, ctx: BuildContext) -> None:
        super().__init__(config, ctx)
        self.channel = config.channel or config.id
        self.url = f"{config.url.rstrip('/')}/v1/live/{self.channel}" if config.url else None
        self.base_dir = ctx.base_dir
        self._publish: LivePublisher | None = None
        self._client: httpx.Client | None = None

    def open(self, ctx: SinkContext) -> None:
        if self.url is not None or self.config.url_file is not None:
            self._client = httpx.Client(timeout=self.config.timeout / 1_000_000)
        elif ctx.live is not None:
            self._publish = ctx.live
        else:
            raise SinkError(f"sink {self.id}: a live sink shows results in an edge daemon's browser pages: run "
                            "this pipeline file with `edgewise serve`, or give the sink `url:` (a running daemon, "
                            "e.g. http://127.0.0.1:8080)")

    def _daemon_url(self) -> str:
        path = BuildContext(self.base_dir).path(self.config.url_file or "")
        try:
            with open(path, "rb") as fh:
                url = orjson.loads(fh.read())["url"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RetryableSinkError(f"sink {self.id}: no daemon address in {path} ({type(exc).__name__}: {exc}); "
                                     "the edge daemon writes it when it starts serving") from None
        if not isinstance(url, str):
            raise SinkError(f"sink {self.id}: {path}: `url` is not text")
        return url

    def write(self, batch: Batch) -> None:
        records = [dumps(envelope_of(batch, i)) for i in range(len(batch))]
        if self._publish is not None:
            self._publish(self.channel, records)
            return
        assert self._client is not None
        # with url_file, the address is read when there is something to send, and again after a failed send: the
        # hub may start before the edge daemon has written it, and a restarted daemon may serve elsewhere (a
        # missing address is a retryable failure, as a daemon that is down is)
        if self.url is None:
            self.url = f"{self._daemon_url().rstrip('/')}/v1/live/{self.channel}"
        size = self.config.batch_size
        try:
            for start in range(0, len(records), size):
                body = b"[" + b",".join(records[start:start + size]) + b"]"
                send(self._client, "POST", self.url, body, "application/json", batch.ids()[start:start + size])
        except RetryableSinkError:
            if self.config.url_file is not None:
                self.url = None
            raise

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
