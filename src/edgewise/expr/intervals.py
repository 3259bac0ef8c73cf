"""``INTERVAL`` literals in arithmetic with timestamps and dates, as Spark 4 computes it (ANSI mode):

    ts + INTERVAL 2 DAYS        ts - INTERVAL '30' MINUTE        ts + INTERVAL '1' MONTH

An interval is a literal and only an operand of ``+`` or ``-`` beside a timestamp, a date, text (cast to a
timestamp) or another interval of its kind: Spark's two kinds are year-month (``YEAR``, ``MONTH``: whole calendar
months, the day clamped to the month's last) and day-time (``WEEK`` to ``MICROSECOND``: a fixed span; only seconds
and smaller take a fraction). Checked against PySpark 4 by ``tests/expr/test_intervals.py``:

- a TIMESTAMP plus either kind is a TIMESTAMP (``2024-01-31 + 1 month`` is ``2024-02-29``);
- a DATE plus months or whole days is a DATE, plus a span with hours in it a TIMESTAMP (from the date's midnight);
- TEXT is cast to a TIMESTAMP (failing as that cast fails) and the sum is TEXT again, in Spark's form of a timestamp
  as text (``2024-02-02 10:00:00``);
- NULL plus an interval is NULL; a number plus an interval is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from edgewise.errors import ConfigError, EvalError
from edgewise.expr.timefmt import cast_to_timestamp
from edgewise.expr.tree import isa
from edgewise.expr.values import timestamp_to_string, type_name

_DAY_TIME_US = {"WEEK": 7 * 86_400_000_000, "DAY": 86_400_000_000, "HOUR": 3_600_000_000, "MINUTE": 60_000_000,
                "SECOND": 1_000_000, "MILLISECOND": 1_000, "MICROSECOND": 1}
_YEAR_MONTH = {"YEAR": 12, "MONTH": 1}
_FRACTIONAL = ("SECOND", "MILLISECOND")
"""Units whose amount may have a fraction (down to a microsecond); Spark refuses ``INTERVAL '2.5' DAY``."""
_DAY_US = 86_400_000_000


@dataclass(frozen=True)
class Interval:
    """An interval literal's value: whole months (``kind`` year-month) or microseconds (day-time)."""

    months: int = 0
    micros: int = 0
    kind: str = "day-time"

    def __add__(self, other: Interval) -> Interval:
        if self.kind != other.kind:
            raise ConfigError("an INTERVAL cannot mix years or months with days or times (Spark keeps the two kinds "
                              "apart): add them to the timestamp one after the other")
        return Interval(self.months + other.months, self.micros + other.micros, self.kind)

    def __neg__(self) -> Interval:
        return Interval(-self.months, -self.micros, self.kind)


def interval_of(node: Any) -> Interval:
    """The value of an ``INTERVAL <amount> <unit>`` literal; other forms are a ``ConfigError``."""
    unit_node = node.args.get("unit")
    written = node.sql(dialect="spark")
    if not isa(unit_node, "Var"):
        raise ConfigError(f"{written!r}: an INTERVAL takes one unit here (INTERVAL '90' MINUTE, INTERVAL 2 DAYS); "
                          "add two intervals for two units")
    unit = unit_node.name.upper()
    unit = unit[:-1] if unit.endswith("S") and unit[:-1] in (*_DAY_TIME_US, *_YEAR_MONTH) else unit
    amount = node.this
    text = amount.this if isa(amount, "Literal") else None
    if text is None or not re.fullmatch(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)\s*", str(text)):
        raise ConfigError(f"{written!r}: an INTERVAL's amount is a number, e.g. INTERVAL '30' MINUTE")
    value = Decimal(str(text).strip())  # a number: the pattern above
    if unit in _YEAR_MONTH:
        if value != value.to_integral_value():
            raise ConfigError(f"{written!r}: a {unit.lower()} interval takes whole {unit.lower()}s")
        return Interval(months=int(value) * _YEAR_MONTH[unit], kind="year-month")
    if unit not in _DAY_TIME_US:
        raise ConfigError(f"{written!r}: INTERVAL units are YEAR, MONTH, WEEK, DAY, HOUR, MINUTE, SECOND, "
                          "MILLISECOND and MICROSECOND")
    micros = value * _DAY_TIME_US[unit]
    if micros != micros.to_integral_value() or (value != value.to_integral_value() and unit not in _FRACTIONAL):
        raise ConfigError(f"{written!r}: only seconds and milliseconds take a fraction (down to a microsecond)")
    return Interval(micros=int(micros))


def beside_interval(node: Any) -> bool:
    """``+`` or ``-`` (``node``) with an interval operand (``interval_operand``): interval arithmetic, whatever the
    other operand is."""
    return any(_has_interval(operand) for operand in (node.this, node.expression))


def _has_interval(node: Any) -> bool:
    if isa(node, "Interval"):
        return True
    if isa(node, "Paren", "Neg"):
        return _has_interval(node.this)
    if isa(node, "Add", "Sub"):
        return _has_interval(node.this) and _has_interval(node.expression)
    return False


def interval_operand(node: Any) -> Interval | None:
    """The interval ``node`` is (a literal, a sum or difference of literals, negated, in parentheses), or None where
    it is not one."""
    if isa(node, "Interval"):
        return interval_of(node)
    if isa(node, "Paren"):
        return interval_operand(node.this)
    if isa(node, "Neg"):
        inner = interval_operand(node.this)
        return None if inner is None else -inner
    if isa(node, "Add", "Sub"):
        left, right = interval_operand(node.this), interval_operand(node.expression)
        if left is not None and right is not None:
            return left + (right if isa(node, "Add") else -right)
    return None


def add_interval(value: Any, interval: Interval) -> Any:
    """``value + interval`` (``value - interval`` is ``add_interval(value, -interval)``)."""
    if value is None:
        return None
    try:
        if isinstance(value, datetime):
            return _plus(value, interval)
        if isinstance(value, date):
            if interval.micros % _DAY_US == 0:
                return _plus_months(value, interval.months) + timedelta(microseconds=interval.micros)
            return _plus(_timestamp(value), interval)
        if isinstance(value, str):
            return timestamp_to_string(_plus(_timestamp(value), interval))
    except (OverflowError, ValueError):
        raise EvalError("DATETIME_OVERFLOW", f"{value} plus the interval is out of the TIMESTAMP range") from None
    raise EvalError("DATATYPE_MISMATCH", f"an INTERVAL is added to a TIMESTAMP, a DATE or text, not {type_name(value)}")


def _timestamp(value: date | str) -> datetime:
    ts = cast_to_timestamp(value)
    assert ts is not None  # only NULL casts to NULL
    return ts


def _plus(ts: datetime, interval: Interval) -> datetime:
    moved: datetime = _plus_months(ts, interval.months)
    return moved + timedelta(microseconds=interval.micros)


def _plus_months(day: Any, months: int) -> Any:
    """``day`` ``months`` later (or earlier), on the same day of the month or the month's last (Spark's
    ``add_months``)."""
    if not months:
        return day
    total = day.year * 12 + day.month - 1 + months
    year, month = divmod(total, 12)
    import calendar  # only for month arithmetic: ~2% of a one-shot run's instructions otherwise

    return day.replace(year=year, month=month + 1, day=min(day.day, calendar.monthrange(year, month + 1)[1]))
