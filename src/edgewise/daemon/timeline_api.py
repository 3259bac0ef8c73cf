"""The daemon's timeline routes: what its ``entwine`` steps have written, for other daemons to anchor and for
anyone to verify (``docs/entwine.md``). Read-only; the group ``timelines`` of ``--protect``.

- ``GET /v1/timelines``: each entwine step's timeline: public key, entries, head.
- ``GET /v1/timelines/<step>``: its ``timeline.json``.
- ``GET /v1/timelines/<step>/head``: its last complete entry as an anchor (``timeline``, ``pos``, ``hash``).
- ``GET /v1/timelines/<step>/entries``: its entries, NDJSON, complete lines only (``edgewise verify`` reads it).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from edgewise.daemon.replies import problem, reply
from edgewise.entwine.timeline import ENTRIES, META, read_head, read_meta
from edgewise.errors import ConfigError
from edgewise.steps.entwine import EntwineStep

if TYPE_CHECKING:
    from edgewise.daemon.server import Daemon


def timeline_routes(daemon: Daemon) -> list[Route]:
    def directories() -> dict[str, str]:
        return {s.id: s.directory for p in daemon.spec.plan.pipelines for s in p.steps if isinstance(s, EntwineStep)}

    def located(request: Request) -> str | Response:
        step = request.path_params["step"]
        directory = directories().get(step)
        if directory is None:
            return problem(404, f"no entwine step {step!r} in this daemon's pipeline file")
        if not os.path.exists(os.path.join(directory, META)):
            return problem(404, f"timeline of step {step!r} has no entries yet")
        return directory

    async def timelines(request: Request) -> Response:
        out: dict[str, Any] = {}
        for step, directory in directories().items():
            try:
                head = read_head(directory)
            except ConfigError:
                head = None
            out[step] = {"head": head, "entries": 0 if head is None else head["pos"] + 1}
        return reply(200, out)

    async def meta(request: Request) -> Response:
        directory = located(request)
        if isinstance(directory, Response):
            return directory
        return reply(200, read_meta(directory))

    async def head(request: Request) -> Response:
        directory = located(request)
        if isinstance(directory, Response):
            return directory
        found = read_head(directory)
        if found is None:
            return problem(404, f"timeline of step {request.path_params['step']!r} has no entries yet")
        found["at"] = str(request.url).removesuffix("/head")
        return reply(200, found)

    async def entries(request: Request) -> Response:
        directory = located(request)
        if isinstance(directory, Response):
            return directory
        path = os.path.join(directory, ENTRIES)
        data = b""
        if os.path.exists(path):
            with open(path, "rb") as fh:
                data = fh.read()
        return Response(data[:data.rfind(b"\n") + 1], media_type="application/x-ndjson")

    return [
        Route("/v1/timelines", timelines, methods=["GET"]),
        Route("/v1/timelines/{step}", meta, methods=["GET"]),
        Route("/v1/timelines/{step}/head", head, methods=["GET"]),
        Route("/v1/timelines/{step}/entries", entries, methods=["GET"]),
    ]
