"""Replies of the daemon's HTTP API: JSON bodies, problems with their ``Retry-After``, bodies read with a limit."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Receive

RETRY_AFTER = {429: "1", 503: "2", 507: "10"}


def reply(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body, default=str), status_code=status, media_type="application/json",
                    headers=headers)


def problem(status: int, message: str, problems: list[str] | None = None, retry_after: str | None = None) -> Response:
    """An error reply; ``Retry-After`` is ``retry_after`` if given, else the status's usual wait."""
    body: dict[str, Any] = {"error": message}
    if problems:
        body["problems"] = problems
    retry = retry_after or RETRY_AFTER.get(status)
    return reply(status, body, {"Retry-After": retry} if retry else None)


class BodyRefused(Exception):
    """The body was not read: too large (413), or the client went away (400)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def read_body(headers: Headers, receive: Receive, limit: int) -> bytes:
    """The request body, refused as soon as it (or its declared length) passes ``limit``."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyRefused(413, f"the body is larger than {limit} bytes; send smaller batches")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise BodyRefused(400, "the client went away before the body was complete")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyRefused(413, f"the body is larger than {limit} bytes; send smaller batches")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
