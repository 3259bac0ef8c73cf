"""Request bodies: what ``POST /v1/events`` and the webhook endpoint accept, checked before anything is queued,
and how a worker turns a queued body back into events.

Accepted: one JSON object, a JSON array of objects, NDJSON (one object per line; blank lines are ignored), and
the envelope other edgewise daemons and ``replay-dead-letters`` send, ``{"events": [{"id": …, "payload": {…}}]}``,
whose events keep their ids; a mesh peer adds what its daemon knew of them, ``"event_time"`` per event and
``"source"`` and ``"ingest_time"`` for the request (microseconds), which the receiving daemon uses in place of its
own (``origin`` in the queue entry's meta). A request is all-or-nothing: if any event is bad nothing is queued and
the reply names each bad line (or array index). Numbers beyond the range of a double, nesting deeper than 1,024
levels and invalid UTF-8 are errors; integers beyond 64 bits become doubles (as Spark reads them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import orjson

from edgewise.sources.formats import decode_hfp_message
from edgewise.wording import count as plural

Payload = dict[str, Any]

NDJSON_TYPES = frozenset({"application/x-ndjson", "application/ndjson", "application/jsonl",
                          "application/x-jsonlines", "application/jsonlines"})
JSON_TYPES = frozenset({"application/json", "text/json"})
ENVELOPE_TYPE = "application/vnd.edgewise.events+json"
MAX_REPORTED = 20


class BodyError(Exception):
    """The body cannot be queued. ``status`` is the HTTP status (400 or 415); ``problems`` name each bad part."""

    def __init__(self, status: int, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.problems = problems or []


@dataclass(frozen=True)
class Parsed:
    kind: str
    """How the queued body is decoded again: ``json`` (object or array) or ``ndjson``."""
    body: bytes
    count: int
    ids: list[str] | None = None
    meta: dict[str, Any] | None = None
    """What a mesh peer knew of the events (``origin``): their source, ingest time and event times."""


def media_type(content_type: str | None) -> str | None:
    if not content_type:
        return None
    return content_type.split(";", 1)[0].strip().lower() or None


def _json_problem(exc: orjson.JSONDecodeError) -> str:
    message = exc.msg
    if "depth" in message:
        message = "nesting deeper than 1024 levels"
    elif "UTF-8" in message:
        message = "invalid UTF-8"
    return f"{message} (line {exc.lineno}, column {exc.colno})"


def _not_object(value: object) -> str:
    return f"expected a JSON object, found {'null' if value is None else type(value).__name__}"


def parse_events(body: bytes, content_type: str | None, max_events: int) -> Parsed:
    """Check a ``/v1/events`` body; raises ``BodyError`` naming every bad event (up to 20)."""
    kind = media_type(content_type)
    if kind in NDJSON_TYPES:
        return _parse_ndjson(body, max_events)
    if kind == ENVELOPE_TYPE:
        return _parse_envelope(body, max_events)
    if kind is None or kind in JSON_TYPES or kind.endswith("+json"):
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            if kind is None and b"\n" in body.strip():  # no content type: NDJSON is the other JSON shape
                return _parse_ndjson(body, max_events)
            raise BodyError(400, f"malformed JSON: {_json_problem(exc)}") from None
        return _parse_json_value(value, body, max_events)
    raise BodyError(415, f"unsupported content type {kind!r}: send application/json (an object or an array of "
                    f"objects), application/x-ndjson or {ENVELOPE_TYPE}")


def _parse_json_value(value: object, body: bytes, max_events: int) -> Parsed:
    if isinstance(value, dict):
        return Parsed("json", body, 1)
    if not isinstance(value, list):
        raise BodyError(400, f"{_not_object(value)} or an array of objects")
    if not value:
        raise BodyError(400, "the array holds no events")
    if len(value) > max_events:
        raise BodyError(413, f"{plural(len(value), 'event')} in one request; the limit is {max_events}")
    problems = [f"[{i}]: {_not_object(v)}" for i, v in enumerate(value) if not isinstance(v, dict)]
    if problems:
        raise BodyError(400, f"{len(problems)} of {len(value)} events are not JSON objects",
                        problems[:MAX_REPORTED])
    return Parsed("json", body, len(value))


def _parse_ndjson(body: bytes, max_events: int) -> Parsed:
    problems: list[str] = []
    count = 0
    for number, line in enumerate(body.split(b"\n"), 1):
        if not line.strip():
            continue
        count += 1
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            problems.append(f"line {number}: malformed JSON: {_json_problem(exc)}".replace(" (line 1, ", " ("))
            continue
        if not isinstance(value, dict):
            problems.append(f"line {number}: {_not_object(value)}")
    if problems:
        raise BodyError(400, f"{len(problems)} of {count} lines are not JSON objects; nothing was queued",
                        problems[:MAX_REPORTED])
    if not count:
        raise BodyError(400, "the body holds no events")
    if count > max_events:
        raise BodyError(413, f"{plural(count, 'event')} in one request; the limit is {max_events}")
    return Parsed("ndjson", body, count)


def _parse_envelope(body: bytes, max_events: int) -> Parsed:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BodyError(400, f"malformed JSON: {_json_problem(exc)}") from None
    events = value.get("events") if isinstance(value, dict) else None
    if not isinstance(events, list) or not events:
        raise BodyError(400, 'expected {"events": [{"id": "...", "payload": {...}}, ...]}')
    if len(events) > max_events:
        raise BodyError(413, f"{plural(len(events), 'event')} in one request; the limit is {max_events}")
    problems = []
    for i, e in enumerate(events):
        if not (isinstance(e, dict) and isinstance(e.get("id"), str) and e["id"] and isinstance(e.get("payload"),
                                                                                                  dict)):
            problems.append(f"events[{i}]: expected {{\"id\": a non-empty string, \"payload\": an object}}")
        elif "event_time" in e and not _microseconds(e["event_time"]):
            problems.append(f"events[{i}].event_time: expected an integer of microseconds since the epoch")
    origin: dict[str, Any] = {}
    if "source" in value:
        if not (isinstance(value["source"], str) and value["source"]):
            problems.append("source: expected the origin's source id (a non-empty string)")
        origin["source"] = value["source"]
    if "ingest_time" in value:
        if not _microseconds(value["ingest_time"]):
            problems.append("ingest_time: expected an integer of microseconds since the epoch")
        origin["ingest_time"] = value["ingest_time"]
    if problems:
        raise BodyError(400, f"{plural(len(problems), 'problem')} in an envelope of {plural(len(events), 'event')}",
                        problems[:MAX_REPORTED])
    if any("event_time" in e for e in events):
        origin["event_times"] = [e.get("event_time") for e in events]
    return Parsed("json", orjson.dumps([e["payload"] for e in events]), len(events), [e["id"] for e in events],
                  {"origin": origin} if origin else None)


def _microseconds(value: Any) -> bool:
    return value.__class__ is int and 0 <= value < 2 ** 63


def parse_webhook_body(body: bytes, content_type: str | None) -> object:
    """The delivery's body as a value: JSON (also GitHub's form-encoded ``payload=``) or text."""
    kind = media_type(content_type)
    if kind == "application/x-www-form-urlencoded":
        form = parse_qs(body.decode("utf-8", "strict"), keep_blank_values=True)
        if "payload" in form:
            return orjson.loads(form["payload"][0])
        return {k: v[0] if len(v) == 1 else v for k, v in form.items()}
    if kind is None or kind in JSON_TYPES or kind.endswith("+json"):
        return orjson.loads(body)
    return body.decode("utf-8", "strict")


def check_webhook_body(body: bytes, content_type: str | None) -> None:
    try:
        parse_webhook_body(body, content_type)
    except orjson.JSONDecodeError as exc:
        raise BodyError(400, f"malformed JSON: {_json_problem(exc)}") from None
    except UnicodeDecodeError:
        raise BodyError(400, "the body is not valid UTF-8") from None


def webhook_payload(body: bytes, meta: dict[str, Any]) -> Payload:
    """The event a webhook delivery becomes: ``{event, delivery, body}`` (the raw body stays in the queue)."""
    return {"event": meta.get("event"), "delivery": meta.get("delivery"),
            "body": parse_webhook_body(body, meta.get("content_type"))}


MessageDecoder = Callable[[str, bytes], Payload]


def decode_json_message(topic: str, body: bytes) -> Payload:
    value = orjson.loads(body)
    if not isinstance(value, dict):
        raise ValueError(_not_object(value))
    return value


MESSAGE_FORMATS: dict[str, MessageDecoder] = {"json": decode_json_message, "hfp": decode_hfp_message}


def decode_ndjson(body: bytes) -> list[Payload]:
    """The objects of NDJSON the server accepted (one object per line). Decoded as one JSON array, in one call
    (a third less time than a call per line), where the lines joined by commas are one; a body with blank lines
    between its events takes the way line by line. Only for accepted bodies: joining lines could make a body
    that is not NDJSON (a value over two lines) parse."""
    try:
        return orjson.loads(b"[" + body.strip().replace(b"\n", b",") + b"]")  # type: ignore[no-any-return]
    except orjson.JSONDecodeError:
        return [orjson.loads(line) for line in body.split(b"\n") if line.strip()]


def decode_body(kind: str, body: bytes, meta: dict[str, Any] | None) -> list[Payload]:
    """The events of a queued body (already checked when it was accepted)."""
    if kind == "json":
        value = orjson.loads(body)
        return value if isinstance(value, list) else [value]
    if kind == "ndjson":
        return decode_ndjson(body)
    if kind == "webhook":
        return [webhook_payload(body, meta or {})]
    if kind == "message":
        m = meta or {}
        return [MESSAGE_FORMATS[m.get("format", "json")](m.get("topic", ""), body)]
    raise ValueError(f"unknown queued body kind {kind!r}")
