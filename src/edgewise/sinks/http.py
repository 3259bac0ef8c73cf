"""``http``: POST batches of events to a URL (webhooks, collectors), retrying with backoff.

The body is a JSON array of payloads (or NDJSON with ``format: ndjson``). Every request carries an
``Idempotency-Key`` header derived from the event ids, the same on every retry, so a receiver can drop
duplicates. 5xx, 408, 429 and connection errors are retried; other 4xx are not (the request itself is wrong).
"""

from __future__ import annotations

import hashlib
import ssl
from typing import ClassVar, Literal

import httpx

from edgewise.config import BuildContext
from edgewise.config.models import SinkConfig
from edgewise.declare import Field, model_validator
from edgewise.durations import Duration
from edgewise.errors import SinkError
from edgewise.events import Batch
from edgewise.jsonio import dumps, dumps_lines
from edgewise.sinks.base import RetryableSinkError, Sink, SinkContext
from edgewise.sinks.stdout import envelope_of
from edgewise.tracecontext import outgoing


class HttpClientConfig(SinkConfig):
    """What every sink that sends HTTP requests has (``http``, ``edgewise``)."""

    url: str = Field(description="where to POST, e.g. https://hooks.slack.com/services/...")
    headers: dict[str, str] = Field(default_factory=dict, description="extra request headers")
    batch_size: int = Field(default=500, ge=1, le=100_000, description="events per request")
    timeout: Duration = Field(default=10_000_000, description="request timeout")
    ca_file: str | None = Field(default=None, description="HTTPS: trust the server's certificate only if this CA (PEM) "
                                "signed it, instead of the system's CAs (a mesh hub with its own CA)")
    client_cert: str | None = Field(default=None, description="HTTPS: this client certificate (PEM) for mutual TLS")
    client_key: str | None = Field(default=None, description="the client certificate's private key (PEM)")

    @model_validator(mode="after")
    def _client_pair(self) -> HttpClientConfig:
        if bool(self.client_cert) != bool(self.client_key):
            raise ValueError("client_cert and client_key go together: the certificate and its private key")
        return self


class HttpSinkConfig(HttpClientConfig):
    type: Literal["http"] = "http"
    method: Literal["POST", "PUT"] = "POST"
    format: Literal["json", "ndjson"] = Field(default="json", description="JSON array, or one object per line")
    envelope: bool = Field(default=False, description="send {id, event_time, source, payload} per event")


class HttpSink(Sink):
    kind: ClassVar[str] = "http"
    Config = HttpSinkConfig
    config: HttpClientConfig

    def __init__(self, config: HttpClientConfig, ctx: BuildContext) -> None:
        super().__init__(config, ctx)
        self._tls_files = [ctx.path(f) if f else None for f in (config.ca_file, config.client_cert, config.client_key)]
        self._client: httpx.Client | None = None
        self.url = config.url
        self.method = getattr(config, "method", "POST")

    def open(self, ctx: SinkContext) -> None:
        self._client = httpx.Client(timeout=self.config.timeout / 1_000_000, headers=self.config.headers,
                                    verify=tls_context(*self._tls_files))

    def write(self, batch: Batch) -> None:
        size = self.config.batch_size
        for start in range(0, len(batch), size):
            self._post(batch.slice(start, start + size))

    def body(self, batch: Batch) -> tuple[bytes, str]:
        """The request body for a batch and its content type."""
        config = self.config
        assert isinstance(config, HttpSinkConfig)
        items: list[object] = ([envelope_of(batch, i) for i in range(len(batch))] if config.envelope
                               else list(batch.payloads))
        if config.format == "ndjson":
            return dumps_lines(items), "application/x-ndjson"
        return dumps(items), "application/json"

    def _post(self, batch: Batch) -> None:
        assert self._client is not None
        body, content_type = self.body(batch)
        send(self._client, self.method, self.url, body, content_type, batch.ids())

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def send(client: httpx.Client, method: str, url: str, body: bytes, content_type: str, ids: list[str]) -> None:
    """One request with an ``Idempotency-Key`` from the event ids; raise what the sink runner retries (connection
    errors, 5xx, 408, 429) as ``RetryableSinkError`` and other refusals as ``SinkError``."""
    key = hashlib.sha256("\n".join(ids).encode()).hexdigest()
    headers = {"Content-Type": content_type, "Idempotency-Key": key}
    outgoing(headers)  # the pipeline span it is sent from, when tracing (edgewise/tracecontext.py)
    try:
        response = client.request(method, url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        raise RetryableSinkError(f"{url}: {type(exc).__name__}: {exc}") from None
    status = response.status_code
    if status < 300:
        return
    text = response.text[:200]
    if status >= 500 or status in (408, 429):  # 503/507/429 from an edgewise daemon: it pushes back
        raise RetryableSinkError(f"{url} answered {status}: {text}")
    raise SinkError(f"{url} answered {status} (not retried): {text}")


def tls_context(ca_file: str | None, client_cert: str | None, client_key: str | None) -> ssl.SSLContext | bool:
    """How a client checks the server (the system's CAs, or ``ca_file``'s) and proves itself (a client
    certificate, for mutual TLS); ``True`` (httpx's default) when nothing is configured."""
    if not (ca_file or client_cert):
        return True
    try:
        context = ssl.create_default_context(cafile=ca_file)
        if client_cert:
            context.load_cert_chain(client_cert, client_key)
    except (OSError, ssl.SSLError) as exc:
        raise SinkError(f"TLS files ({ca_file or ''} {client_cert or ''}): {exc}") from None
    return context
