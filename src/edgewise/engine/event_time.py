"""Assigning event time at ingest from the file's ``event_time`` expression."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime
from functools import lru_cache
from typing import Any

from edgewise.errors import EvalError
from edgewise.events import Batch, Payload
from edgewise.expr import values as V
from edgewise.expr.compiler import Expression
from edgewise.expr.timefmt import cast_to_timestamp


def to_event_time_us(value: Any) -> int | None:
    """A TIMESTAMP, timestamp text or epoch seconds as microseconds; ``None`` for NULL."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return V.timestamp_to_us(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return round(value * 1_000_000)
    if isinstance(value, str | date):
        ts = cast_to_timestamp(value)
        return None if ts is None else V.timestamp_to_us(ts)
    raise EvalError("DATATYPE_MISMATCH", f"event_time must give a TIMESTAMP, found {V.type_name(value)}")


FIRST_US = V.timestamp_to_us(datetime(1, 1, 1, tzinfo=UTC))
"""0001-01-01T00:00:00Z, the earliest TIMESTAMP: a time before it is an overflow on the general path."""
_EPOCH_FUNCTIONS = {"timestamp_seconds": 1_000_000, "timestamp_millis": 1_000, "timestamp_micros": 1}


class EventTimeFunction:
    """Payload -> event time in µs (``None``: NULL), for one event (``one``) or a batch (``many``).

    Evaluates the expression, except for the common shapes ``timestamp_{seconds,millis,micros}(field)`` and
    ``...(cast(field AS BIGINT))`` whose field holds integers or strings of ASCII digits: those are computed
    directly, a batch at a time, without building a TIMESTAMP only to take it apart again (otherwise most of the
    cost of a windowed pipeline). Any other value takes the general path, so results and errors are the same.
    """

    def __init__(self, expr: Expression) -> None:
        self.general = expr.evaluate
        self.shape = _epoch_shape(expr.text)
        # values with more digits than this could leave the supported range (10^17 µs, the year 5138), and times
        # before the year 1 (FIRST_US) are out of it: they take the general path, which raises the error
        self.digits = {1_000_000: 11, 1_000: 14, 1: 17}[self.shape[1]] if self.shape else 0

    def one(self, payload: Payload) -> int | None:
        return to_event_time_us(self.general(payload))

    def many(self, payloads: list[Payload]) -> list[int] | None:
        """Every payload's time when all take the direct path, else ``None`` (then use ``one`` per event)."""
        if self.shape is None or not payloads:
            return None
        field = self.shape[0]
        values: list[Any] = [p.get(field) for p in payloads]
        return self.convert(values) if self.direct(values) else None

    def direct(self, values: list[Any]) -> bool:
        """Whether every one of ``values`` (the shape's field, read from events) takes the direct path: all ASCII
        digit strings (with the cast) or all integers, within the supported range. False without a shape."""
        if self.shape is None or not values:
            return False
        first = values[0].__class__
        if first is str and self.shape[2]:
            return self._digit_texts(values)
        if first is int:
            return (set(map(type, values)) == {int} and max(values) < 10**self.digits
                    and min(values) * self.shape[1] >= FIRST_US)
        return False

    def _digit_texts(self, values: list[Any]) -> bool:
        """Every value is text of 1 to ``digits`` ASCII digits. Checked on the values joined by commas, with C-level
        string operations only: when no value holds a comma and every comma is where the first value's length
        puts it, every value has that length (times of one era do), else the lengths are counted."""
        try:
            joined = ",".join(values)  # a value that is not text fails the join
        except TypeError:
            return False
        n, width = len(values), len(values[0])
        if not joined.isascii() or joined.count(",") != n - 1:  # no value holds a comma
            return False
        if len(joined) == n * (width + 1) - 1 and joined[width::width + 1] == "," * (n - 1):
            shortest = longest = width
        else:
            lengths = set(map(len, values))
            shortest, longest = min(lengths), max(lengths)
        # bytes check a byte at a time against the ASCII digits (str.isdigit looks each one up in Unicode's table)
        return shortest >= 1 and longest <= self.digits and joined.encode().translate(None, b",").isdigit()

    def convert(self, values: list[Any]) -> list[int]:
        """The times of ``values`` that ``direct`` accepted, in µs."""
        assert self.shape is not None
        factor = self.shape[1]
        if values and values[0].__class__ is str:
            return [int(v) * factor for v in values]
        return [v * factor for v in values]


@lru_cache(maxsize=256)
def event_time_function(expr: Expression) -> EventTimeFunction:
    return EventTimeFunction(expr)


def _epoch_shape(text: str) -> tuple[str, int, bool] | None:
    """(field, µs per unit, whether the field is cast to an integer) for the shapes ``event_time_function``
    computes directly; ``None`` for everything else."""
    from edgewise.expr.tree import enum_name, isa
    from edgewise.expr.tree_cache import parse_node

    tree = parse_node(text)
    if not isa(tree, "Anonymous") or len(tree.expressions) != 1:
        return None
    factor = _EPOCH_FUNCTIONS.get(str(tree.this).lower())
    if factor is None:
        return None
    arg = tree.expressions[0]
    cast = False
    if isa(arg, "Cast"):  # the dialect parses CAST as a TryCast node with safe unset
        if arg.args.get("safe") or enum_name(arg.to.this) != "BIGINT":
            return None
        cast, arg = True, arg.this
    if not isa(arg, "Column") or arg.args.get("table") or not isa(arg.this, "Identifier"):
        return None
    return arg.this.this, factor, cast


def assign_event_times(batch: Batch, expr: Expression, failed: Callable[[int, Exception], None]) -> Batch:
    """The batch with event times from ``expr`` (NULL keeps the ingestion time). Events whose expression fails
    are reported through ``failed`` and left out."""
    fn = event_time_function(expr)
    direct = fn.many(batch.payloads)
    if direct is not None:
        batch.event_times = direct
        return batch
    times = list(batch.event_times)
    keep = [True] * len(batch)
    for i, p in enumerate(batch.payloads):
        try:
            us = fn.one(p)
        except EvalError as exc:
            failed(i, exc)
            keep[i] = False
            continue
        if us is not None:
            times[i] = us
    batch.event_times = times
    return batch if all(keep) else batch.select(keep)
