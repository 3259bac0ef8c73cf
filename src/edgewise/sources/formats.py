"""Record formats: how one line (or one file) of input becomes event payloads.

``ndjson`` (one JSON object per line), ``json`` (a whole file: an array of objects or one object), ``csv`` (header
row), ``clf`` (Apache/NCSA combined log), ``regex`` (named groups), ``hfp`` (HSL high-frequency positioning
recordings: ``<receive time> <MQTT topic> <JSON>``).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from edgewise.errors import SourceError

Payload = dict[str, Any]
LineDecoder = Callable[[bytes], Payload]


def decoded_lines(lines: Iterable[bytes], first: int, where: str, decode: LineDecoder,
                  malformed: Callable[[str], None]) -> Iterator[tuple[int, bytes, Payload]]:
    """Each line that is not blank as ``(number, line, payload)``, numbered from ``first``, the line without its
    end; a line that does not decode is reported as ``<where>:<number>: <problem>`` and left out. The one rule
    every reader of line formats follows (file, stdin, replay, and Spark's decoding of files)."""
    for number, raw in enumerate(lines, start=first):
        line = raw.rstrip(b"\r\n")
        if not line.strip():
            continue
        try:
            yield number, line, decode(line)
        except SourceError as exc:
            malformed(f"{where}:{number}: {exc}")


def decode_ndjson(line: bytes) -> Payload:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise SourceError(not_utf8(line) or f"malformed JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, dict):
        raise SourceError(f"expected a JSON object, found a {type(value).__name__}")
    return value


def not_utf8(data: bytes) -> str | None:
    """What is wrong with bytes that are not UTF-8 (orjson says "surrogates not allowed at column 1"), or None."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text: byte 0x{data[exc.start]:02x} at byte {exc.start + 1} ({exc.reason})"
    return None


def ndjson_batch(lines: list[bytes]) -> list[Payload] | None:
    """Decode a whole batch at once (the fast path); ``None`` if any line is bad, to be redone line by line."""
    try:
        values = [orjson.loads(line) for line in lines]  # a blank line raises too: it goes the slow way
    except orjson.JSONDecodeError:
        return None
    for v in values:
        if v.__class__ is not dict:
            return None
    return values


CLF = re.compile(
    rb'^(?P<host>\S+) (?P<ident>\S+) (?P<user>\S+) \[(?P<time>[^\]]+)\] "(?P<request>[^"]*)" '
    rb'(?P<status>\d{3}|-) (?P<size>\d+|-)(?: "(?P<referer>[^"]*)" "(?P<agent>[^"]*)(?P<closed>"?))?\s*$'
)
"""Common (``... status size``) or combined (``... "referer" "agent"``) log format. The agent's closing quote may
be missing, as on real lines whose agent was cut short (a Googlebot line): the rest of the line is the agent, as
log parsers commonly take it, rather than a malformed record."""


def decode_clf(line: bytes) -> Payload:
    m = CLF.match(line)
    if not m:
        raise SourceError("not an Apache/NCSA common or combined log line")
    g = {k: (v.decode("utf-8", "replace") if v is not None else None) for k, v in m.groupdict().items()}
    parts = (g["request"] or "").split(" ")
    out: Payload = {
        "host": g["host"], "ident": None if g["ident"] == "-" else g["ident"],
        "user": None if g["user"] == "-" else g["user"], "time": g["time"], "request": g["request"],
        "method": parts[0] if len(parts) == 3 else None, "path": parts[1] if len(parts) == 3 else None,
        "protocol": parts[2] if len(parts) == 3 else None,
        "status": None if g["status"] == "-" else int(g["status"] or 0),
        "size": None if g["size"] == "-" else int(g["size"] or 0),
    }
    if g["agent"] is not None:
        out["referer"] = None if g["referer"] == "-" else g["referer"]
        out["agent"] = g["agent"] if g["closed"] else g["agent"].rstrip()
    return out


def regex_decoder(pattern: str) -> LineDecoder:
    rx = re.compile(pattern)
    if not rx.groupindex:
        raise ValueError("the regex needs named groups, e.g. (?P<level>\\w+)")

    def decode(line: bytes) -> Payload:
        m = rx.search(line.decode("utf-8", "replace"))
        if not m:
            raise SourceError(f"does not match the regex {pattern!r}")
        return m.groupdict()

    return decode


_HFP_TOPIC = ("prefix", "version", "journey_type", "temporal_type", "event_type", "transport_mode", "operator_id",
              "vehicle_number", "route_id", "direction_id", "headsign", "start_time", "next_stop", "geohash_level")


def decode_hfp_message(topic: str, body: bytes) -> Payload:
    """An HFP v2 MQTT message: the payload's inner object plus the topic's fields under ``topic``."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise SourceError(f"malformed HFP JSON ({exc.msg})") from None
    if not isinstance(value, dict) or len(value) != 1:
        raise SourceError("an HFP payload is an object with one key, the event type (VP, DUE, ...)")
    (event_type, inner), = value.items()
    if not isinstance(inner, dict):
        raise SourceError("the HFP event body is not an object")
    levels = topic.split("/")[1:]
    info: Payload = dict(zip(_HFP_TOPIC, levels, strict=False))
    info["geohash"] = "/".join(levels[len(_HFP_TOPIC):]) or None
    info.pop("prefix", None)
    # the body's object is new and only ours: completed in place, not copied (~7% of decoding a recorded line)
    inner["event_type"] = event_type
    inner["topic"] = info
    return inner


def split_hfp_line(line: bytes) -> tuple[bytes, str, bytes]:
    """A line of an HFP recording as ``(receive time, topic, JSON payload)``: ``<receive time> <topic> <JSON>``.

    Topics may contain spaces (headsigns such as ``Matinkylä (M)``), so the payload starts at the first `` {``.
    """
    received, _, rest = line.partition(b" ")
    body_at = rest.find(b" {")
    if not received or body_at < 0:
        raise SourceError("expected '<receive time> <topic> <JSON payload>'")
    return received, rest[:body_at].decode("utf-8", "replace"), rest[body_at + 1 :]


def decode_hfp_recording(line: bytes) -> Payload:
    """A line of an HFP recording: the message (``decode_hfp_message``) and its ``received_at`` time."""
    received, topic, body = split_hfp_line(line)
    out = decode_hfp_message(topic, body)
    out["received_at"] = received.decode("ascii", "replace")
    return out


def csv_rows(lines: Iterable[str], delimiter: str, columns: list[str] | None,
             null_values: Iterable[str] = ()) -> Iterator[Payload]:
    """A CSV file's rows as payloads of strings, by the header's names (or ``columns``); a cell equal to one of
    ``null_values`` (R's ``NA``, an empty cell) is NULL."""
    reader = csv.reader(lines, delimiter=delimiter)
    header = columns
    nulls = frozenset(null_values)
    for row in reader:
        if header is None:
            header = row
            continue
        if nulls:
            yield {name: None if cell in nulls else cell for name, cell in zip(header, row, strict=False)}
        else:
            yield dict(zip(header, row, strict=False))


def json_document(data: bytes) -> list[Payload]:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise SourceError(not_utf8(data) or f"malformed JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
                          ) from None
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(x, dict) for x in items):
        raise SourceError("expected a JSON object or an array of objects")
    return items


def text_lines(data: bytes) -> io.StringIO:
    return io.StringIO(data.decode("utf-8-sig", "replace"))
