"""Timestamps: Spark's string-to-timestamp cast and its datetime patterns (``yyyy-MM-dd HH:mm:ss``).

The session time zone is UTC: a string without an offset is read as UTC, and formatting prints UTC.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta, timezone
from functools import lru_cache
from typing import Any

from edgewise.errors import EvalError

_ISO = re.compile(
    r"^\s*(?P<y>[+-]?\d{4,6})(?:-(?P<mo>\d{1,2})(?:-(?P<d>\d{1,2})"
    r"(?:[T ](?P<h>\d{1,2})(?::(?P<mi>\d{1,2})(?::(?P<s>\d{1,2})(?:\.(?P<f>\d{0,9}))?)?)?"
    r"\s*(?P<z>Z|UTC|[+-]\d{1,2}(?::?\d{2})?)?)?)?)?\s*$"
)


def _zone(z: str | None) -> timezone:
    if not z or z in ("Z", "UTC"):
        return UTC
    sign = -1 if z[0] == "-" else 1
    body = z[1:].replace(":", "")
    hours = int(body[:-2]) if len(body) > 2 else int(body)
    minutes = int(body[-2:]) if len(body) > 2 else 0
    return timezone(sign * timedelta(hours=hours, minutes=minutes))


def parse_timestamp_text(text: str) -> datetime | None:
    """Spark's ``CAST(string AS TIMESTAMP)`` formats; ``None`` when the text is not a timestamp."""
    m = _ISO.match(text)
    if not m:
        return None
    try:
        frac = (m.group("f") or "")[:6].ljust(6, "0")
        ts = datetime(
            int(m.group("y")), int(m.group("mo") or 1), int(m.group("d") or 1),
            int(m.group("h") or 0), int(m.group("mi") or 0), int(m.group("s") or 0), int(frac),
            tzinfo=_zone(m.group("z")),
        )
    except ValueError:
        return None
    return ts.astimezone(UTC)


def cast_to_timestamp(v: Any) -> datetime | None:
    """``CAST(v AS TIMESTAMP)``: strings as above, numbers as seconds since the epoch, dates at midnight UTC."""
    if v is None or isinstance(v, datetime):
        return v
    if isinstance(v, date):
        return datetime(v.year, v.month, v.day, tzinfo=UTC)
    if isinstance(v, str):
        ts = parse_timestamp_text(v)
        if ts is None:
            raise EvalError("CAST_INVALID_INPUT",
                            f"the value {v!r} of type STRING cannot be cast to TIMESTAMP; "
                            "use try_cast or to_timestamp with a format")
        return ts
    if isinstance(v, bool):
        raise EvalError("DATATYPE_MISMATCH", "cannot cast BOOLEAN to TIMESTAMP")
    if isinstance(v, int | float):
        from edgewise.expr.values import EPOCH

        try:
            return EPOCH + timedelta(microseconds=round(v * 1_000_000))
        except OverflowError:
            raise EvalError("CAST_OVERFLOW", f"{v} seconds is out of the TIMESTAMP range") from None
    from edgewise.expr.values import mismatch

    raise mismatch("CAST AS TIMESTAMP", v)


def cast_to_date(v: Any) -> date | None:
    if v is None:
        return None
    if isinstance(v, datetime):
        return v.astimezone(UTC).date()
    if isinstance(v, date):
        return v
    if isinstance(v, str):
        ts = parse_timestamp_text(v)
        if ts is None:
            raise EvalError("CAST_INVALID_INPUT", f"the value {v!r} of type STRING cannot be cast to DATE")
        return ts.date()
    from edgewise.expr.values import mismatch

    raise mismatch("CAST AS DATE", v)


# ---------------------------------------------------------------- patterns

_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_LETTERS = set("GyuYDMLdQqwWEeFaBhHkKmsSnAzZOVvxX")


OPTIONAL = ("[", 0)
OPTIONAL_END = ("]", 0)
"""The tokens of an optional section, ``[...]``: parsed if present, printed when formatting."""


def _tokens(pattern: str) -> list[tuple[str, int] | str]:
    """Split a Spark datetime pattern into (letter, count) fields, literal text and optional-section brackets."""
    out: list[tuple[str, int] | str] = []
    depth = 0
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c in "[]":
            depth += 1 if c == "[" else -1
            if depth < 0:
                raise EvalError("INVALID_DATETIME_PATTERN", f"a ']' without its '[' in pattern {pattern!r}")
            out.append(OPTIONAL if c == "[" else OPTIONAL_END)
            i += 1
        elif c == "'":
            j = pattern.find("'", i + 1)
            if j == -1:
                raise EvalError("INVALID_DATETIME_PATTERN", f"unclosed quote in pattern {pattern!r}")
            out.append("'" if j == i + 1 else pattern[i + 1 : j])
            i = j + 1
        elif c in _LETTERS:
            j = i
            while j < len(pattern) and pattern[j] == c:
                j += 1
            out.append((c, j - i))
            i = j
        elif c.isalpha():
            raise EvalError("INVALID_DATETIME_PATTERN", f"unknown pattern letter {c!r} in {pattern!r}")
        else:
            out.append(c)
            i += 1
    if depth:
        raise EvalError("INVALID_DATETIME_PATTERN", f"an unclosed '[' in pattern {pattern!r}")
    return out


@lru_cache(maxsize=256)
def compile_format(pattern: str) -> list[tuple[str, int] | str]:
    return _tokens(pattern)


def format_timestamp(ts: datetime, pattern: str) -> str:
    """``date_format(ts, pattern)`` in UTC."""
    ts = ts.astimezone(UTC)
    out = []
    for tok in compile_format(pattern):
        if isinstance(tok, str):
            out.append(tok)
            continue
        c, n = tok
        if tok in (OPTIONAL, OPTIONAL_END):  # an optional section's fields are printed
            continue
        if c in "yu":
            out.append(f"{ts.year % 100:02d}" if n == 2 else f"{ts.year:0{n}d}")
        elif c in "ML":
            out.append(_MONTHS[ts.month - 1] if n >= 4 else _MONTHS[ts.month - 1][:3] if n == 3
                       else f"{ts.month:0{n}d}")
        elif c == "d":
            out.append(f"{ts.day:0{n}d}")
        elif c == "D":
            out.append(f"{ts.timetuple().tm_yday:0{n}d}")
        elif c == "H":
            out.append(f"{ts.hour:0{n}d}")
        elif c == "h":
            out.append(f"{(ts.hour % 12) or 12:0{n}d}")
        elif c == "k":
            out.append(f"{ts.hour or 24:0{n}d}")
        elif c == "K":
            out.append(f"{ts.hour % 12:0{n}d}")
        elif c == "m":
            out.append(f"{ts.minute:0{n}d}")
        elif c == "s":
            out.append(f"{ts.second:0{n}d}")
        elif c == "S":
            out.append(f"{ts.microsecond:06d}000"[:n])
        elif c == "a":
            out.append("AM" if ts.hour < 12 else "PM")
        elif c == "E":
            out.append(_DAYS[ts.weekday()] if n >= 4 else _DAYS[ts.weekday()][:3])
        elif c in "XZx":
            out.append(("Z" if c == "X" else "+0000" if n < 4 else "+00:00") if c != "x" else
                       ("+00" if n == 1 else "+0000" if n == 2 else "+00:00"))
        elif c in "zVO":
            out.append("UTC" if c != "O" else "GMT")
        else:
            raise EvalError("INVALID_DATETIME_PATTERN", f"pattern letter {c!r} is not supported for formatting")
    return "".join(out)


@lru_cache(maxsize=256)
def _parse_regex(pattern: str) -> re.Pattern[str]:
    """The pattern as a regular expression with a named group per field. A field written twice (``SS…SS``) gets a
    group of its own each time, ``S__2``…, whose value must agree with the first (``parse_with_pattern``); a
    fraction of ``n`` ``S`` takes 1 to ``n`` digits, and an optional section may be absent, as in Spark."""
    parts = []
    seen: dict[str, int] = {}
    for tok in compile_format(pattern):
        if isinstance(tok, str):
            parts.append(re.escape(tok))
        elif tok == OPTIONAL:
            parts.append("(?:")
        elif tok == OPTIONAL_END:
            parts.append(")?")
        else:
            name, body = _field_regex(*tok)
            if name is None:
                parts.append(body)
                continue
            seen[name] = seen.get(name, 0) + 1
            group = name if seen[name] == 1 else f"{name}__{seen[name]}"
            parts.append(f"(?P<{group}>{body})")
    return re.compile("^" + "".join(parts) + "$")


def _field_regex(c: str, n: int) -> tuple[str | None, str]:
    """The group name and regular expression of one field, ``c`` written ``n`` times (no name: not read)."""
    two_or_one = r"\d{2}" if n == 2 else r"\d{1,2}"
    if c in "yu":
        return "y", r"\d{2}" if n == 2 else r"\d{4}"
    if c in "ML":
        return ("Mt", "[A-Za-z]{3,9}") if n >= 3 else ("M", two_or_one)
    if c in "Hk":
        return "H", two_or_one
    if c in "hK":
        return "h", two_or_one
    if c in "dms":
        return c, two_or_one
    if c == "S":
        return "S", rf"\d{{1,{n}}}"
    if c == "a":
        return "a", "AM|PM|am|pm"
    if c == "E":
        return None, "[A-Za-z]{3,9}"
    if c in "XxZ":
        return "z", r"Z|[+-]\d{2}(?::?\d{2})?"
    if c in "zVO":
        return "zn", "UTC|GMT|Z"
    raise EvalError("INVALID_DATETIME_PATTERN", f"pattern letter {c!r} is not supported for parsing")


def parse_with_pattern(text: str, pattern: str) -> datetime | None:
    """``to_timestamp(text, pattern)``; ``None`` when the text does not match."""
    m = _parse_regex(pattern).match(text)
    if not m:
        return None
    g = m.groupdict()
    for name, value in g.items():  # a field written twice must read the same both times
        first = name.partition("__")[0]
        if first != name and value is not None and g.get(first) is not None and value != g[first]:
            return None
    year = int(g["y"]) + (2000 if g.get("y") and len(g["y"]) == 2 else 0) if g.get("y") else 1970
    if g.get("Mt"):
        names = [x[:3].lower() for x in _MONTHS]
        if g["Mt"][:3].lower() not in names:
            return None
        month = names.index(g["Mt"][:3].lower()) + 1
    else:
        month = int(g.get("M") or 1)
    hour = int(g["H"]) if g.get("H") else int(g.get("h") or 0) % 12
    if g.get("a") and g["a"].upper() == "PM":
        hour += 12
    frac = (g.get("S") or "")[:6].ljust(6, "0")
    try:
        ts = datetime(year, month, int(g.get("d") or 1), hour, int(g.get("m") or 0), int(g.get("s") or 0),
                      int(frac), tzinfo=_zone(g.get("z")))
    except ValueError:
        return None
    return ts.astimezone(UTC)
