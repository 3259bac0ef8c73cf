"""Group keys compared as SQL compares them.

Stateful steps keep their groups in dicts keyed by tuples of key values, and Python's own equality is almost
SQL's GROUP BY equality: numbers compare by value across types (``2 == 2.0 == Decimal(2)``, ``-0.0 == 0``), text
as text. Not quite: ``True == 1`` in Python (a boolean is a number there, not in SQL), a list or an object is not
hashable at all, and each NaN is a group of its own (Spark puts NaN in one). A key value of those kinds is held in
a ``ByValue``, which compares by ``match_text``; every other value stays as it is, so the common key (text, a
number) costs a type check and no more.

>>> match_text(2) == match_text(2.0) == match_text(Decimal("2.00")), match_text(-0.0) == match_text(0)
(True, True)
>>> match_text("2") == match_text(2), match_text(True) == match_text(1)
(False, False)
>>> group_key((True, "a")) == group_key((1, "a")), group_key(([1],)) == group_key(([1.0],))
(False, True)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import date, datetime
from decimal import Decimal
from operator import itemgetter
from typing import Any

import orjson

from edgewise.expr.values import LONG_MAX, LONG_MIN
from edgewise.steps.state_values import encode_value

_AS_IS = frozenset({str, int, type(None), Decimal, datetime, date})
"""Key value types whose Python equality and hash are SQL's (a float too, unless NaN)."""
_AS_IS_OR_FLOAT = _AS_IS | {float}


class ByValue:
    """A key value Python compares differently from SQL, compared by its ``match_text``."""

    __slots__ = ("text", "value")

    def __init__(self, value: Any) -> None:
        self.value = value
        self.text = match_text(value)

    def __hash__(self) -> int:
        return hash(self.text)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByValue) and other.text == self.text

    def __repr__(self) -> str:
        return f"ByValue({self.value!r})"


def _as_is(v: Any) -> bool:
    """Python's equality and hash of ``v`` are SQL's."""
    return type(v) in _AS_IS or (type(v) is float and v == v)


def group_key(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """``values`` as a dict key that is equal to another exactly when SQL's GROUP BY puts them together."""
    if all(map(_as_is, values)):
        return values
    return tuple(v if _as_is(v) else ByValue(v) for v in values)


def single_keys(keys: list[tuple[Any]]) -> list[tuple[Any, ...]]:
    """``group_key`` of each one-value key of a batch. The common batch (text, integers, finite floats) is checked
    by the set of its value types, at C speed, and is returned as it is."""
    if all_as_is(list(map(_first, keys))):
        return keys
    return [group_key(k) for k in keys]


def all_as_is(values: list[Any]) -> bool:
    """Python's equality and hash of each of ``values`` are SQL's (checked by the set of their types, at C speed):
    the values can be dict keys, or ``Counter`` entries, as they are."""
    kinds = set(map(type, values))
    return kinds <= _AS_IS or (kinds <= _AS_IS_OR_FLOAT and all(v == v for v in values if type(v) is float))


_first = itemgetter(0)


def plain(value: Any) -> Any:
    """A key (or one of its values) with its values as the events gave them."""
    if isinstance(value, tuple):
        return tuple(v.value if isinstance(v, ByValue) else v for v in value)
    return value.value if isinstance(value, ByValue) else value


def match_text(key: Any) -> str:
    """The text two keys share exactly when they are the same key, as SQL's GROUP BY (and so Spark) compares
    them: numbers by value (``2``, ``2.0`` and ``2.00`` are one key, ``-0.0`` is ``0``, every NaN one), text as text
    (the text ``"2"`` is not the number ``2``, ``"true"`` is not ``true``), lists element by element."""
    return orjson.dumps(encode_value(_by_value(plain(key)))).decode()


def match_texts(values: Iterable[Any]) -> list[str | None]:
    """``match_text`` of each value, ``None`` for NULL (a key that holds no state)."""
    return [None if value is None else match_text(value) for value in values]


def _by_value(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float | Decimal):
        if value.is_finite() if isinstance(value, Decimal) else math.isfinite(value):
            integral = int(value)
            if integral == value and LONG_MIN <= integral <= LONG_MAX:  # JSON's integers (orjson writes 64 bits)
                return integral
            return float(value)
        return {"$float": str(float(value))}  # NaN and the infinities: JSON has no number for them
    if isinstance(value, list | tuple):
        return [_by_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _by_value(v) for k, v in sorted(value.items())}
    return value


def queried_texts(key: str) -> list[str]:
    """The ``match_text`` of what a key written in a query (``/v1/state/<step>/<key>``) can mean: the text itself,
    and, where it reads as JSON (``42``, ``true``, ``[1, "a"]``), that value."""
    texts = [match_text(key)]
    try:
        value = orjson.loads(key)
    except orjson.JSONDecodeError:
        return texts
    if not isinstance(value, str):
        texts.append(match_text(value))
    return texts
