"""Read access: who may read what the daemon knows — its state, queue, metrics, pages and live channels.

Endpoint groups: ``state`` (``/v1/state/…``), ``queue`` (``/v1/queue``), ``metrics`` (``/metrics``), ``ui``
(``/ui``, ``/ui/map``), ``live`` (``GET /v1/live…``) and ``timelines`` (``GET /v1/timelines…``). ``--protect``
names the protected ones; by default ``state`` and ``queue`` are protected whenever any http source requires
credentials (a daemon that guards its ingest should not hand out what it ingested), and nothing otherwise. A
protected group takes a read token (``--read-token-env``: an environment variable holding one or more,
comma-separated) as ``Authorization: Bearer``, or from a browser as the cookie a page's ``?token=`` sets (so its
own requests and streams carry it).
Health (``/healthz``, ``/readyz``) and ``/openapi.json`` are always open.
"""

from __future__ import annotations

from collections.abc import Iterable
from http.cookies import CookieError, SimpleCookie

from edgewise.sources.http import bearer_token, token_accepted

GROUPS = ("state", "queue", "metrics", "ui", "live", "timelines")
COOKIE = "edgewise_read"


def group_of(method: str, path: str) -> str | None:
    """The endpoint group a request reads, or None (ingest, health, the API description)."""
    if method not in ("GET", "HEAD"):
        return None
    if path.startswith("/v1/state/"):
        return "state"
    if path == "/v1/queue":
        return "queue"
    if path == "/metrics":
        return "metrics"
    if path in ("/ui", "/ui/map"):
        return "ui"
    if path == "/v1/live" or path.startswith("/v1/live/"):
        return "live"
    if path == "/v1/timelines" or path.startswith("/v1/timelines/"):
        return "timelines"
    return None


def parse_groups(text: str) -> frozenset[str]:
    """``--protect``: a comma-separated list of groups, or ``none``."""
    names = {g.strip() for g in text.split(",") if g.strip()}
    if names == {"none"}:
        return frozenset()
    unknown = names - set(GROUPS)
    if unknown:
        raise ValueError(f"unknown endpoint group {', '.join(sorted(unknown))}: expected some of "
                         f"{', '.join(GROUPS)}, or none")
    return frozenset(names)


class ReadAccess:
    def __init__(self, tokens: Iterable[str], protect: frozenset[str]) -> None:
        self.tokens = [t.encode() for t in tokens if t]
        self.protect = protect

    def accepts(self, token: str | None) -> bool:
        return token_accepted(token, self.tokens) if token else False

    def refusal(self, group: str | None, authorization: str | None, cookie: str | None) -> tuple[int, str] | None:
        """None when the request may read; else its status and why."""
        if group is None or group not in self.protect:
            return None
        if not self.tokens:
            return 401, (f"this daemon protects its {group} endpoints and has no read token: start it with "
                         "--read-token-env VAR (or --protect to choose what is protected)")
        token = bearer_token(authorization) or cookie_token(cookie)
        if not token:
            return 401, (f"reading {group} needs 'Authorization: Bearer <read token>' (in a browser, open the page "
                         "once with ?token=<read token>)")
        if not self.accepts(token):
            return 403, "the read token is not accepted"
        return None


def cookie_token(header: str | None) -> str | None:
    if not header:
        return None
    try:
        jar = SimpleCookie(header)
    except CookieError:
        return None
    morsel = jar.get(COOKIE)
    return morsel.value if morsel is not None else None
