"""The daemon's HTTP API (Starlette on uvicorn). The contract is ``openapi.py``, served at ``/openapi.json``.

Ingest checks, in this order, so the cheapest refusal comes first and nothing is read that will not be kept:
unknown source (404; no source named and none open to anonymous posts: 403), recovering or draining (503), auth
(401/403; at ``/v1/events`` a source that requires a signature: 403), content type (415), declared size (413),
backpressure (429) or a full disk (507); then the body is read (413 beyond the limit), checked (400, naming each
bad line; events with their own ids from a source that is not a mesh peer: 403) and queued; the reply (202, with
the event ids) is sent only after the commit.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from edgewise.daemon.bodies import BodyError, check_webhook_body, decode_body, media_type, parse_events
from edgewise.daemon.live_api import live_routes
from edgewise.daemon.openapi import openapi_document
from edgewise.daemon.queue import Append, QueueFull
from edgewise.daemon.ratelimit import retry_after
from edgewise.daemon.readauth import COOKIE, group_of
from edgewise.daemon.replies import BodyRefused, problem, read_body, reply
from edgewise.daemon.timeline_api import timeline_routes
from edgewise.daemon.ui import DASHBOARD_HTML
from edgewise.engine.partitions import partitions_of
from edgewise.events import Batch
from edgewise.sources.http import AuthError, HttpSource, anonymous_source
from edgewise.tracecontext import incoming

if TYPE_CHECKING:
    from edgewise.daemon.server import Daemon

class EventsEndpoint:
    """``POST /v1/events`` as a plain ASGI handler (the checks and their order are the module docstring's)."""

    def __init__(self, daemon: Daemon, finish: Callable[[HttpSource, Append, float], Awaitable[Response]],
                 admit: Callable[[Headers, HttpSource], Response | None],
                 source_for: Callable[[str | None], HttpSource | None]) -> None:
        self.daemon = daemon
        self.finish = finish
        self.admit = admit
        self.source_for = source_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        headers = Headers(scope=scope)
        query = scope.get("query_string", b"")
        name = parse_qs(query.decode("latin-1")).get("source", [None])[0] if query else None
        source = self.source_for(name)
        if source is None and name is None:
            response = problem(403, "no http source takes events that name no source here (one that requires no "
                                    "credentials needs `anonymous: true` when another one does); post to "
                                    f"/v1/events?source=<id>; sources: {', '.join(self.daemon.http)}")
        elif source is None:
            response = problem(404, f"no http source {name!r}; sources: {', '.join(self.daemon.http)}")
        else:
            response = await self._events(headers, receive, source, started)
            if response.status_code != 202:
                self.daemon.metrics.replied(source.id, response.status_code)
        await response(scope, receive, send)

    async def _events(self, headers: Headers, receive: Receive, source: HttpSource, started: float) -> Response:
        refused = self.admit(headers, source)
        if refused is not None:
            return refused
        try:
            source.check_events_route()
        except AuthError as exc:
            return problem(exc.status, exc.message)
        try:
            body = await read_body(headers, receive, source.config.max_body)
        except BodyRefused as exc:
            return problem(exc.status, exc.message)
        try:
            parsed = parse_events(body, headers.get("content-type"), source.config.max_events)
        except BodyError as exc:
            return problem(exc.status, exc.message, exc.problems)
        if parsed.ids is not None:
            try:
                source.check_chosen_ids()
            except AuthError as exc:
                return problem(exc.status, exc.message)
        append = Append(source.id, parsed.kind, parsed.body, parsed.count, meta=incoming(headers, parsed.meta),
                        ids=parsed.ids)
        return await self.finish(source, append, started)


def build_app(daemon: Daemon) -> ASGIApp:
    stateless_ids = itertools.count(1)
    stateless_run = secrets.token_hex(4)

    def source_for(name: str | None) -> HttpSource | None:
        if name is None:
            return anonymous_source(daemon.http)
        return daemon.http.get(name)

    def admit(headers: Headers, source: HttpSource) -> Response | None:
        refused = None if daemon.stateless is not None else daemon.refuse_reason()
        if refused is not None and refused[0] == 503:
            return problem(*refused)
        try:
            source.authorize(headers.get("authorization"))
        except AuthError as exc:
            return problem(exc.status, exc.message)
        if refused is not None:
            return problem(*refused)
        wait = source.limiter.take() if source.limiter is not None else 0.0
        if wait:  # after authentication: unauthenticated floods cannot use up a source's budget
            limit = source.config.rate_limit
            return problem(429, f"source {source.id} takes {limit:g} requests a second; slow down",
                           retry_after=retry_after(wait))
        return None

    async def finish(source: HttpSource, append: Append, started: float) -> Response:
        if daemon.stateless is not None:
            return await run_stateless(source, append)
        if append.ids is not None and source.config.redelivery_window:
            append = replace(append, redelivery_us=source.config.redelivery_window)
        try:
            appended = await daemon.submit_async(append)
        except QueueFull as exc:
            return problem(507, str(exc))
        except Exception as exc:  # noqa: BLE001  # any queue failure: nothing was acknowledged, say so
            return problem(503, f"the event could not be queued: {exc}")
        first = appended.first
        ids = append.ids if append.ids is not None else [f"{source.id}:{n}" for n in range(first,
                                                                                           first + append.count)]
        daemon.metrics.replied(source.id, 202, time.perf_counter() - started)
        if appended.duplicates:  # a redelivery: acknowledged with its original ids, not queued again
            return reply(202, {"accepted": len(ids) - len(appended.duplicates), "ids": ids,
                               "duplicates": list(appended.duplicates)})
        return reply(202, {"accepted": append.count, "ids": ids})

    async def run_stateless(source: HttpSource, append: Append) -> Response:
        runner = daemon.stateless
        assert runner is not None
        if not runner.try_enter():
            return problem(429, f"more than {runner.limit} requests are being processed; slow down")
        try:
            payloads = decode_body(append.kind, append.body, append.meta)
            ids = append.ids or [f"{source.id}:{stateless_run}-{next(stateless_ids)}" for _ in payloads]
            now = time.time_ns() // 1000
            batch = Batch(payloads, source=source.id, ingest_time_us=now, event_times=[now] * len(payloads),
                          ids=ids)
            status, body = await asyncio.to_thread(runner.run, batch)
            return reply(status, body)
        finally:
            runner.leave()

    async def post_webhook(request: Request) -> Response:
        started = time.perf_counter()
        name = request.path_params["source"]
        source = source_for(name)
        if source is None:
            return problem(404, f"no http source {name!r}; sources: {', '.join(daemon.http)}")
        response = await _webhook(request, source, started)
        if response.status_code != 202:
            daemon.metrics.replied(source.id, response.status_code)
        return response

    async def _webhook(request: Request, source: HttpSource, started: float) -> Response:
        refused = admit(request.headers, source)
        if refused is not None:
            return refused
        try:
            body = await read_body(request.headers, request.receive, source.config.max_body)
        except BodyRefused as exc:
            return problem(exc.status, exc.message)
        try:
            source.verify(body, request.headers)
        except AuthError as exc:
            return problem(exc.status, exc.message)
        meta = source.webhook_meta(request.headers)
        kind = media_type(meta["content_type"])
        if kind is not None and not (kind.endswith("json") or kind.startswith("text/")
                                     or kind == "application/x-www-form-urlencoded"):
            return problem(415, f"unsupported content type {kind!r} for a webhook: send JSON, form or text")
        try:
            check_webhook_body(body, meta["content_type"])
        except BodyError as exc:
            return problem(exc.status, exc.message, exc.problems)
        delivery = meta.get("delivery")
        ids = [f"{source.id}:{delivery}"] if delivery else None
        return await finish(source, Append(source.id, "webhook", body, 1, meta=incoming(request.headers, meta),
                                           ids=ids), started)

    async def healthz(request: Request) -> Response:
        return reply(200, {"status": "ok", "state": daemon.state})

    async def readyz(request: Request) -> Response:
        if daemon.state == "ready":
            return reply(200, {"status": "ready"})
        return reply(503, {"status": daemon.state}, {"Retry-After": "1"})

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(daemon.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def queue(request: Request) -> Response:
        stats = daemon.queue_stats().as_json()
        return reply(200, {
            **stats, "state": daemon.state, "high_water": daemon.high_water, "low_water": daemon.low_water,
            "backpressure": daemon.backpressure, "disk_full": daemon.disk_full, "fsync": daemon.options.fsync,
            "workers": [{"index": h.index, "pid": h.process.pid, "ready": h.ready, "alive": h.process.is_alive(),
                         **partition_share(daemon.metrics.workers.latest(h.key),
                                           partitions_of(h.index, daemon.options.workers)
                                           if daemon.partitioned else None)}
                        for h in list(daemon.pool.workers.values())],
            "partitioned": daemon.partitioned,
            "processed_events": daemon.metrics.workers.total("acked"),
            # event time moved on by idle sources since the daemon started (the most any worker moved it)
            "idle_advanced_s": max((s.get("idle_advanced_us", 0) for s in daemon.metrics.workers.snapshots()),
                                   default=0) / 1_000_000,
            "sources": {sid: s.status() for sid, s in list(daemon.sources.items())},
            "pipelines": [p.id for p in daemon.spec.plan.pipelines],
            "steps": daemon.metrics.workers.steps(),
            "live": daemon.live.stats(),
        })

    async def state(request: Request) -> Response:
        found = await daemon.lookup(request.path_params["step"], request.path_params["key"])
        if "error" in found:
            return problem(int(found.get("status", 404)), found["error"])
        return reply(200, {"step": request.path_params["step"], "key": request.path_params["key"],
                           "value": found["value"]})

    async def openapi(request: Request) -> Response:
        return reply(200, openapi_document(list(daemon.http), [s.id for s in daemon.spec.plan.stateful_steps()]))

    async def ui(request: Request) -> Response:
        return HTMLResponse(DASHBOARD_HTML)

    routes = [
        Route("/v1/webhooks/{source}", post_webhook, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/v1/queue", queue, methods=["GET"]),
        Route("/v1/state/{step}/{key:path}", state, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/ui", ui, methods=["GET"]),
        *live_routes(daemon),
        *timeline_routes(daemon),
    ]
    events = EventsEndpoint(daemon, finish, admit, source_for)
    routes.append(Route("/v1/events", events, methods=["POST"]))  # for 405 on other methods; POST goes direct
    app = Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_allowed})

    max_header_bytes = daemon.options.max_header_bytes

    async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and sum(len(k) + len(v) for k, v in scope["headers"]) > max_header_bytes:
            await problem(431, f"the request's headers are larger than {max_header_bytes} bytes")(scope, receive, send)
            return
        # POST /v1/events is the hot path: straight to its handler, past Starlette's routing and middleware
        if scope["type"] == "http" and scope["path"] == "/v1/events" and scope["method"] == "POST":
            await events(scope, receive, send)
            return
        if scope["type"] == "http":
            refused = read_refusal(scope)
            if refused is not None:
                await refused(scope, receive, send)
                return
        await app(scope, receive, send)

    def read_refusal(scope: Scope) -> Response | None:
        """Read access (``readauth.py``); a page opened with a valid ``?token=`` sets the cookie its own requests
        carry, and is loaded again without the token in its address."""
        group = group_of(scope["method"], scope["path"])
        if group is None:
            return None
        access = daemon.read_access
        headers = Headers(scope=scope)
        token = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [None])[0]
        if group == "ui" and token is not None:
            if group in access.protect and not access.accepts(token):
                return problem(403, "the read token is not accepted")
            response = Response(status_code=303, headers={"Location": scope["path"]})
            response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/",
                                secure=daemon.options.tls_cert is not None)
            return response
        refused = access.refusal(group, headers.get("authorization"), headers.get("cookie"))
        return problem(*refused) if refused is not None else None

    return dispatch


async def _not_found(request: Request, exc: Exception) -> Response:
    return problem(404, f"no such endpoint: {request.method} {request.url.path}; see /openapi.json")


async def _not_allowed(request: Request, exc: Exception) -> Response:
    response = problem(405, f"{request.method} is not allowed on {request.url.path}; see /openapi.json")
    allow = (getattr(exc, "headers", None) or {}).get("Allow")
    if allow:
        response.headers["Allow"] = allow
    return response


def partition_share(snapshot: dict[str, Any], partitions: frozenset[int] | None) -> dict[str, Any]:
    """A partitioned worker's partitions, its position in the queue and what waits after it (lag). The partitions
    are the daemon's own assignment: a worker that has not sent its first snapshot yet (a slow start, while the
    others already emptied the queue) has them all the same."""
    share: dict[str, Any] = {k: snapshot[k] for k in ("position", "lag_entries", "lag_events") if k in snapshot}
    return share if partitions is None else {"partitions": sorted(partitions), **share}
