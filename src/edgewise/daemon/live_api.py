"""The daemon's live routes: result channels for browsers (``daemon/live.py``) and the map page that shows them.

- ``GET /v1/live``: the channels, with records published, subscribers and records dropped for slow ones.
- ``GET /v1/live/<channel>/events``: Server-Sent Events (``event: snapshot`` with the recent records, then one JSON
  array of records per ``data:``).
- ``GET /v1/live/<channel>/recent``: the recent records as one JSON array (no stream).
- ``POST /v1/live/<channel>``: publish a JSON array of records; from the daemon's own machine only (another
  engine's ``live`` sink with ``url:``, such as the Spark hub), because whoever publishes decides what the page
  shows.
- ``GET /ui/map``: the map page (``assets/map.html``, no external assets).
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING

import orjson
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Route

from edgewise.daemon.live import valid_channel
from edgewise.daemon.replies import BodyRefused, problem, read_body, reply

if TYPE_CHECKING:
    from edgewise.daemon.server import Daemon

MAX_PUBLISH_BYTES = 8 * 1024 * 1024
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@cache
def map_page() -> str:
    return (files("edgewise.daemon") / "assets" / "map.html").read_text(encoding="utf-8")


def live_routes(daemon: Daemon) -> list[Route]:
    hub = daemon.live

    def channel_of(request: Request) -> str | Response:
        name = str(request.path_params["channel"])
        if not valid_channel(name):
            return problem(400, f"{name!r} is not a channel name: letters, digits, '_', '.', '-' (at most 64)")
        return name

    async def channels(request: Request) -> Response:
        return reply(200, {"channels": hub.stats()})

    async def stream(request: Request) -> Response:
        name = channel_of(request)
        if isinstance(name, Response):
            return name
        return StreamingResponse(hub.stream(name), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def recent(request: Request) -> Response:
        name = channel_of(request)
        if isinstance(name, Response):
            return name
        return Response(hub.snapshot(name), media_type="application/json")

    async def publish(request: Request) -> Response:
        name = channel_of(request)
        if isinstance(name, Response):
            return name
        client = request.client.host if request.client is not None else ""
        if client not in LOOPBACK:
            return problem(403, "live channels take results from the daemon's own machine only (a live sink's "
                           "url: is http://127.0.0.1:<port>)")
        try:
            body = await read_body(request.headers, request.receive, MAX_PUBLISH_BYTES)
        except BodyRefused as exc:
            return problem(exc.status, exc.message)
        try:
            records = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return problem(400, f"malformed JSON: {exc}")
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            return problem(400, "expected a JSON array of records (objects), as a live sink sends")
        hub.publish(name, [orjson.dumps(r) for r in records])
        return reply(202, {"published": len(records)})

    async def ui_map(request: Request) -> Response:
        return HTMLResponse(map_page())

    return [
        Route("/v1/live", channels, methods=["GET"]),
        Route("/v1/live/{channel}/events", stream, methods=["GET"]),
        Route("/v1/live/{channel}/recent", recent, methods=["GET"]),
        Route("/v1/live/{channel}", publish, methods=["POST"]),
        Route("/ui/map", ui_map, methods=["GET"]),
    ]
