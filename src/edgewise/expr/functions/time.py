"""Time functions. Timestamps are UTC; patterns are Spark's datetime patterns (``yyyy-MM-dd HH:mm:ss``)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from edgewise.errors import EvalError
from edgewise.expr import values as V
from edgewise.expr.functions.base import FunctionTable
from edgewise.expr.timefmt import cast_to_date, cast_to_timestamp, format_timestamp, parse_with_pattern

table = FunctionTable("time")


def _ts(v: Any) -> datetime:
    ts = cast_to_timestamp(v)
    assert ts is not None
    return ts


def _parse(v: Any, fmt: Any, fn: str) -> datetime:
    if isinstance(v, datetime | date) or V.is_number(v):
        return _ts(v)
    text = V.to_string(v)
    assert text is not None
    if fmt is None:
        from edgewise.expr.timefmt import parse_timestamp_text

        ts = parse_timestamp_text(text)
    else:
        pattern = V.to_string(fmt)
        assert pattern is not None
        ts = parse_with_pattern(text, pattern)
    if ts is None and fmt is None:
        raise EvalError("CAST_INVALID_INPUT", f"{fn}(): the text {text!r} is not a timestamp; give a pattern "
                        "as the second argument, or use try_to_timestamp to get NULL instead")
    if ts is None:
        raise EvalError("CANNOT_PARSE_TIMESTAMP",
                        f"{fn}(): the text {text!r} does not match "
                        f"{'a timestamp' if fmt is None else repr(fmt)}; use try_to_timestamp to get NULL instead")
    return ts


@table.fn("to_timestamp", args=(1, 2))
def to_timestamp(v: Any, fmt: Any = None) -> datetime:
    """Parses text (ISO 8601 by default, or a Spark datetime pattern) to a TIMESTAMP; numbers are seconds."""
    return _parse(v, fmt, "to_timestamp")


@table.fn("try_to_timestamp", args=(1, 2))
def try_to_timestamp(v: Any, fmt: Any = None) -> datetime | None:
    """Like ``to_timestamp`` but NULL when the text does not parse."""
    try:
        return _parse(v, fmt, "try_to_timestamp")
    except EvalError:
        return None


@table.fn("to_date", args=(1, 2))
def to_date(v: Any, fmt: Any = None) -> date:
    """Parses text to a DATE (or takes the date of a TIMESTAMP)."""
    if fmt is None:
        d = cast_to_date(v)
        assert d is not None
        return d
    return _parse(v, fmt, "to_date").date()


@table.fn("unix_timestamp", "to_unix_timestamp", args=(1, 2))
def unix_timestamp(v: Any, fmt: Any = "yyyy-MM-dd HH:mm:ss") -> int:
    """Seconds since the epoch of a TIMESTAMP or of text in the pattern (default ``yyyy-MM-dd HH:mm:ss``)."""
    ts = _ts(v) if isinstance(v, datetime | date) else _parse(v, fmt, "unix_timestamp")
    return V.timestamp_to_us(ts) // 1_000_000


@table.fn("from_unixtime", args=(1, 2))
def from_unixtime(v: Any, fmt: Any = "yyyy-MM-dd HH:mm:ss") -> str:
    """Seconds since the epoch formatted as text."""
    n = V.to_long(v)
    assert n is not None
    pattern = V.to_string(fmt)
    assert pattern is not None
    # Spark multiplies the seconds into microseconds in 64-bit arithmetic, which wraps around on overflow
    micros = (n * 1_000_000 + 2**63) % 2**64 - 2**63
    try:
        return format_timestamp(V.EPOCH + timedelta(microseconds=micros), pattern)
    except OverflowError:
        raise EvalError("DATETIME_OVERFLOW", f"from_unixtime(): {n} seconds is beyond the year 9999, which "
                        "edgewise's timestamps do not reach") from None


@table.fn("date_format", args=2)
def date_format(v: Any, fmt: Any) -> str:
    """A TIMESTAMP (or timestamp text) formatted with a Spark datetime pattern."""
    pattern = V.to_string(fmt)
    assert pattern is not None
    return format_timestamp(_ts(v), pattern)


def _part(name: str, doc: str, get: Any) -> None:
    table.fn(name, doc=doc)(lambda v: get(_ts(v)))


_part("year", "The year.", lambda t: t.year)
_part("quarter", "The quarter, 1 to 4.", lambda t: (t.month - 1) // 3 + 1)
_part("month", "The month, 1 to 12.", lambda t: t.month)
_part("day", "The day of the month.", lambda t: t.day)
_part("dayofmonth", "The day of the month.", lambda t: t.day)
_part("dayofweek", "The day of the week, 1 = Sunday to 7 = Saturday.", lambda t: (t.isoweekday() % 7) + 1)
_part("weekday", "The day of the week, 0 = Monday to 6 = Sunday.", lambda t: t.weekday())
_part("dayofyear", "The day of the year, 1 to 366.", lambda t: t.timetuple().tm_yday)
_part("weekofyear", "The ISO week of the year.", lambda t: t.isocalendar()[1])
_part("hour", "The hour, 0 to 23.", lambda t: t.hour)
_part("minute", "The minute, 0 to 59.", lambda t: t.minute)
_part("second", "The second, 0 to 59.", lambda t: t.second)
_part("unix_seconds", "Seconds since the epoch of a TIMESTAMP.", lambda t: V.timestamp_to_us(t) // 1_000_000)
_part("unix_millis", "Milliseconds since the epoch of a TIMESTAMP.", lambda t: V.timestamp_to_us(t) // 1_000)
_part("unix_micros", "Microseconds since the epoch of a TIMESTAMP.", V.timestamp_to_us)


def _from_epoch(unit_us: int) -> Any:
    def convert(v: Any) -> datetime:
        if isinstance(v, float) and unit_us == 1_000_000:
            return _ts(v)
        if isinstance(v, Decimal) and unit_us == 1_000_000:  # timestamp_seconds(1.23): the fraction is kept
            try:
                return V.timestamp_from_us(int(v * 1_000_000))
            except OverflowError:
                raise EvalError("ARITHMETIC_OVERFLOW", f"{v} is out of the TIMESTAMP range") from None
        n = V.to_long(v)
        assert n is not None
        try:
            return V.timestamp_from_us(n * unit_us)
        except OverflowError:
            raise EvalError("ARITHMETIC_OVERFLOW", f"{n} is out of the TIMESTAMP range") from None

    return convert


table.fn("timestamp_seconds", doc="The TIMESTAMP a number of seconds after the epoch.")(_from_epoch(1_000_000))
table.fn("timestamp_millis", doc="The TIMESTAMP a number of milliseconds after the epoch.")(_from_epoch(1_000))
table.fn("timestamp_micros", doc="The TIMESTAMP a number of microseconds after the epoch.")(_from_epoch(1))

_TRUNC = {
    "year": "year", "yyyy": "year", "yy": "year", "quarter": "quarter", "month": "month", "mon": "month",
    "mm": "month", "week": "week", "day": "day", "dd": "day", "hour": "hour", "minute": "minute",
    "second": "second", "millisecond": "millisecond", "microsecond": "microsecond",
}


@table.fn("date_trunc", args=2)
def date_trunc(unit: Any, v: Any) -> Any:
    """The TIMESTAMP truncated to a unit: 'year', 'quarter', 'month', 'week', 'day', 'hour', 'minute', 'second'."""
    u = _TRUNC.get((V.to_string(unit) or "").lower())
    if u is None:
        return None
    t = _ts(v)
    if u == "year":
        return t.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
    if u == "quarter":
        return t.replace(month=(t.month - 1) // 3 * 3 + 1, day=1, hour=0, minute=0, second=0, microsecond=0)
    if u == "month":
        return t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if u == "week":
        start = t - timedelta(days=t.weekday())
        return start.replace(hour=0, minute=0, second=0, microsecond=0)
    if u == "day":
        return t.replace(hour=0, minute=0, second=0, microsecond=0)
    if u == "hour":
        return t.replace(minute=0, second=0, microsecond=0)
    if u == "minute":
        return t.replace(second=0, microsecond=0)
    if u == "second":
        return t.replace(microsecond=0)
    if u == "millisecond":
        return t.replace(microsecond=t.microsecond // 1000 * 1000)
    return t


@table.fn("date_add", args=2)
def date_add(v: Any, days: Any) -> date:
    """The DATE ``days`` after."""
    d = cast_to_date(v)
    n = V.to_long(days, "INT", -(2**31), 2**31 - 1)
    assert d is not None and n is not None
    return d + timedelta(days=n)


@table.fn("date_sub", args=2)
def date_sub(v: Any, days: Any) -> date:
    """The DATE ``days`` before."""
    d = cast_to_date(v)
    n = V.to_long(days, "INT", -(2**31), 2**31 - 1)
    assert d is not None and n is not None
    return d - timedelta(days=n)


@table.fn("datediff", args=2)
def datediff(end: Any, start: Any) -> int:
    """Days from ``start`` to ``end``."""
    a, b = cast_to_date(end), cast_to_date(start)
    assert a is not None and b is not None
    return (a - b).days


@table.fn("make_timestamp", args=(6, 7))
def make_timestamp(y: Any, mo: Any, d: Any, h: Any, mi: Any, s: Any, tz: Any = None) -> datetime:
    """A TIMESTAMP from year, month, day, hour, minute and (fractional) seconds, in UTC."""
    sec = V.to_double(s)
    assert sec is not None
    if not abs(sec) < 10**10:  # Spark takes the seconds as a DECIMAL(16, 6)
        raise EvalError("NUMERIC_VALUE_OUT_OF_RANGE", f"make_timestamp(): {s} cannot be represented as "
                        "Decimal(16, 6)")
    # Spark takes the other fields as INT, text cast as it casts it (ANSI: '1e3' fails)
    year, month, day, hour, minute = (V.to_long(f, "INT", -(2**31), 2**31 - 1) for f in (y, mo, d, h, mi))
    assert year is not None and month is not None and day is not None and hour is not None and minute is not None
    try:
        whole = int(sec)
        return datetime(year, month, day, hour, minute, whole, round((sec - whole) * 1_000_000), tzinfo=UTC)
    except ValueError as exc:
        raise EvalError("DATETIME_FIELD_OUT_OF_BOUNDS", f"make_timestamp(): {exc}") from None
