"""``http``: events posted to the edge daemon (``POST /v1/events?source=<id>``) and webhook deliveries
(``POST /v1/webhooks/<id>``).

Per source: bearer tokens (``Authorization: Bearer …``; 401 without one, 403 with a wrong one) and, for
webhooks, a signature over the raw body: GitHub's ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256>`` or a generic
HMAC-SHA256 in a header of your choice. Every route honours them: a source that requires a signature takes events
only at its webhook route (``/v1/events`` carries no signature: 403); a request that names no source goes only to
a source open to anonymous posts (``anonymous_source``); only a mesh peer (``mesh: true``, with its own token) may
send the envelope whose events keep the ids they claim. Signatures and tokens are compared in constant time.
Secrets are read from environment variables (``secret_env``, ``token_env``) so they stay out of pipeline files;
literal values are accepted for local testing.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
from collections.abc import Mapping
from typing import ClassVar, Literal

from edgewise.config import BuildContext
from edgewise.config.models import SourceConfig
from edgewise.daemon.queue import DEFAULT_REDELIVERY_WINDOW_US
from edgewise.daemon.ratelimit import TokenBucket
from edgewise.declare import Field, model_validator
from edgewise.durations import Duration
from edgewise.errors import ConfigError
from edgewise.sources.base import DaemonSource, Ingest


class HttpSourceConfig(SourceConfig):
    type: Literal["http"] = "http"
    tokens: list[str] = Field(default_factory=list, description="bearer tokens accepted (prefer token_env)")
    token_env: str | None = Field(default=None, description="environment variable holding an accepted bearer token "
                                  "(several separated by commas)")
    signature: Literal["none", "github", "hmac-sha256"] = Field(
        default="none", description="webhook signature check: github (X-Hub-Signature-256) or a generic hmac-sha256")
    secret: str | None = Field(default=None, description="the signing secret (prefer secret_env)")
    secret_env: str | None = Field(default=None, description="environment variable holding the signing secret")
    signature_header: str = Field(default="X-Signature-256", description="with signature: hmac-sha256, the header "
                                  "holding the hex digest (a 'sha256=' prefix is accepted)")
    event_header: str = Field(default="X-GitHub-Event", description="webhooks: the header naming the event type")
    delivery_header: str = Field(default="X-GitHub-Delivery", description="webhooks: the header with the delivery id; "
                                 "it becomes the event id, so a redelivery keeps its id")
    rate_limit: float | None = Field(default=None, gt=0, description="requests per second this source takes on average "
                                     "(a token bucket of `burst`); more get 429 with Retry-After. Default: no limit")
    burst: int | None = Field(default=None, ge=1, description="with rate_limit: requests it takes at once (default: "
                              "rate_limit rounded up)")
    redelivery_window: Duration = Field(default=DEFAULT_REDELIVERY_WINDOW_US, description="an event id this source "
                                        "chose (a webhook's delivery id, a mesh peer's ids) that it accepted within "
                                        "this window is a duplicate: acknowledged, not queued again (default 3d, "
                                        "GitHub redelivers for 3 days; 0: not checked)")
    max_body: int = Field(default=16 * 1024 * 1024, ge=1024, description="largest accepted body in bytes (413 above)")
    max_events: int = Field(default=100_000, ge=1, description="most events in one request (413 above)")
    anonymous: bool | None = Field(default=None, description="take `POST /v1/events` requests that name no source. "
                                   "Default: the file's first http source, but only when no http source requires a "
                                   "token or signature; otherwise only a source that says `anonymous: true`")
    mesh: bool = Field(default=False, description="a mesh peer (another daemon's `edgewise` sink): it may send the "
                       "envelope body, whose events keep the ids they were given; needs tokens of its own")

    @model_validator(mode="after")
    def _secret_given(self) -> HttpSourceConfig:
        if self.signature != "none" and not (self.secret or self.secret_env):
            raise ValueError(f"signature: {self.signature} needs `secret_env:` (or `secret:`)")
        if self.anonymous and self.requires_auth:
            raise ValueError("anonymous: true takes requests without credentials, but this source requires a "
                             "token or a signature; drop one of them")
        if self.mesh and not (self.tokens or self.token_env):
            raise ValueError("mesh: true lets a peer choose event ids, so it needs a token of its own "
                             "(`token_env:` or `tokens:`)")
        if self.mesh and self.signature != "none":
            raise ValueError("mesh: true takes envelopes at /v1/events, which a signed source refuses; a mesh "
                             "source authenticates with its token, not a signature")
        return self

    @property
    def requires_auth(self) -> bool:
        return bool(self.tokens or self.token_env or self.signature != "none")


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def token_accepted(token: str, accepted: list[bytes]) -> bool:
    """Whether ``token`` is one of ``accepted``, compared with every one without stopping early, so timing says
    nothing about which one was close."""
    given = token.encode()
    matched = False
    for candidate in accepted:
        matched |= hmac.compare_digest(given, candidate)
    return matched


class AuthError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def anonymous_source(sources: Mapping[str, HttpSource]) -> HttpSource | None:
    """Where ``POST /v1/events`` without ``?source=`` goes: the first source with ``anonymous: true``; failing
    that, when no http source requires credentials, the first one that does not refuse (``anonymous: false``)."""
    chosen = [s for s in sources.values() if s.config.anonymous]
    if chosen:
        return chosen[0]
    if any(s.config.requires_auth for s in sources.values()):
        return None
    return next((s for s in sources.values() if s.config.anonymous is None), None)


class HttpSource(DaemonSource):
    kind: ClassVar[str] = "http"
    Config = HttpSourceConfig
    config: HttpSourceConfig

    def __init__(self, config: HttpSourceConfig, ctx: BuildContext) -> None:
        super().__init__(config, ctx)
        tokens = list(config.tokens)
        if config.token_env:
            tokens += [t.strip() for t in os.environ.get(config.token_env, "").split(",") if t.strip()]
            if not tokens:
                raise ConfigError(f"source {self.id}: the environment variable {config.token_env} (token_env) "
                                  "is not set")
        self.tokens = [t.encode() for t in tokens]
        secret = config.secret
        if config.secret_env:
            secret = os.environ.get(config.secret_env)
            if not secret:
                raise ConfigError(f"source {self.id}: the environment variable {config.secret_env} (secret_env) "
                                  "is not set")
        self.secret = secret.encode() if secret else None
        self.limiter = (TokenBucket(config.rate_limit, config.burst or math.ceil(config.rate_limit))
                        if config.rate_limit else None)
        """This source's request rate limit (``daemon/ratelimit.py``), or None."""

    def start(self, ingest: Ingest) -> None:
        """Nothing to connect: the daemon's HTTP server delivers this source's requests."""

    def authorize(self, authorization: str | None) -> None:
        """Check the bearer token, if this source requires one; raises ``AuthError`` (401 or 403)."""
        if not self.tokens:
            return
        token = bearer_token(authorization)
        if token is None:
            raise AuthError(401, f"source {self.id} needs 'Authorization: Bearer <token>'")
        if not token_accepted(token, self.tokens):
            raise AuthError(403, f"the token is not accepted by source {self.id}")

    def verify(self, body: bytes, headers: Mapping[str, str]) -> None:
        """Check the webhook signature over the raw body; raises ``AuthError(401)``."""
        if self.config.signature == "none":
            return
        assert self.secret is not None
        header = "X-Hub-Signature-256" if self.config.signature == "github" else self.config.signature_header
        given = headers.get(header)
        if not given:
            raise AuthError(401, f"missing signature header {header}")
        digest = given.strip()
        if digest.lower().startswith("sha256="):
            digest = digest[len("sha256="):]
        expected = hmac.new(self.secret, body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(digest.lower().encode(), expected.encode()):
            raise AuthError(401, f"the {header} signature does not match the body")

    def check_events_route(self) -> None:
        """``POST /v1/events`` carries no signature: a source that requires one refuses it (403)."""
        if self.config.signature != "none":
            raise AuthError(403, f"source {self.id} takes only signed webhook deliveries, at "
                                 f"POST /v1/webhooks/{self.id}")

    def check_chosen_ids(self) -> None:
        """Only a mesh peer may send events with the ids (and so the place in an upserting sink) they claim."""
        if not self.config.mesh:
            raise AuthError(403, f"source {self.id} does not take events with their own ids (the envelope body): "
                                 "only a source with `mesh: true` and a token of its own does")

    def webhook_meta(self, headers: Mapping[str, str]) -> dict[str, str | None]:
        return {"event": headers.get(self.config.event_header),
                "delivery": headers.get(self.config.delivery_header),
                "content_type": headers.get("content-type")}
