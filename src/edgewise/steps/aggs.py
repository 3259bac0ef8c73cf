"""Aggregate functions of the ``aggregate`` and ``window`` steps: ``count() sum(x) min(x) max(x) avg(x)
count_distinct(x) histogram(x)``.

Each is an accumulator with ``add`` (one value), ``merge`` (two accumulators: session windows merge) and
``result``; accumulators are plain JSON-able values so they can be committed to a state store and read back.
NULL arguments are ignored, as in SQL (``count()`` counts rows, ``count(x)`` non-NULL values).

Numbers combine as Spark combines them: BIGINT with DECIMAL gives DECIMAL, either with DOUBLE gives DOUBLE, a
BIGINT sum that overflows fails. ``sum`` and ``avg`` cast a string argument to DOUBLE (Spark's implicit cast in
ANSI mode: ``'30.4'`` counts, ``'oops'`` fails the event); a boolean or other non-number fails the event. The
argument is converted when the row is evaluated (``Aggregates.rows``), before any state changes.

>>> spec = parse_agg("avg(speed * 2)")
>>> spec.function, spec.argument.sql
('avg', 'speed * 2')
>>> acc = spec.init()
>>> for v in (1, 2, None, 4):
...     acc = spec.add(acc, v)
>>> spec.result(acc)
2.3333333333333335
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Annotated, Any

from edgewise.config.models import checked_by
from edgewise.declare import AfterValidator, WithJsonSchema
from edgewise.errors import ConfigError, EvalError
from edgewise.expr import values as V
from edgewise.expr.compiler import Expression, compile_expression
from edgewise.steps.group_keys import match_text
from edgewise.steps.state_values import decode_value, encode_value

FUNCTIONS = ("count", "sum", "min", "max", "avg", "count_distinct", "histogram")
_CALL = re.compile(r"^\s*([A-Za-z_]+)\s*\((.*)\)\s*$", re.DOTALL)


@dataclass(frozen=True)
class AggSpec:
    """One parsed aggregate: the function and its argument expression (``None`` for ``count()``)."""

    text: str
    function: str
    argument: Expression | None

    def init(self) -> Any:
        if self.function == "count":
            return 0
        if self.function == "avg":
            return [0, 0]  # sum, count
        if self.function in ("count_distinct", "histogram"):
            return {}  # value text -> occurrences
        return None  # sum, min, max: NULL until a value arrives

    def add(self, acc: Any, value: Any) -> Any:
        """The accumulator after one more (already evaluated) argument value."""
        f = self.function
        if f == "count":
            return acc + 1 if self.argument is None or value is not None else acc
        if value is None:
            return acc
        if f == "sum":
            return value if acc is None else V.add(acc, value)
        if f == "avg":
            return [V.add(acc[0], value), acc[1] + 1]
        if f == "min":
            return value if acc is None or _less(value, acc) else acc
        if f == "max":
            return value if acc is None or _less(acc, value) else acc
        # count_distinct compares values as SQL does: 1 and 1.0 are one value, '1' another
        text = match_text(value) if f == "count_distinct" else _key_text(value)
        acc = dict(acc)
        acc[text] = acc.get(text, 0) + 1
        return acc

    def merge(self, a: Any, b: Any) -> Any:
        f = self.function
        if f == "count":
            return a + b
        if f in ("sum", "min", "max"):
            if a is None or b is None:
                return b if a is None else a
            if f == "sum":
                return V.add(a, b)
            return (a if not _less(b, a) else b) if f == "min" else (a if not _less(a, b) else b)
        if f == "avg":
            return [V.add(a[0], b[0]), a[1] + b[1]]
        merged = dict(a)
        for k, n in b.items():
            merged[k] = merged.get(k, 0) + n
        return merged

    def result(self, acc: Any) -> Any:
        f = self.function
        if f == "avg":
            return None if acc[1] == 0 else float(acc[0]) / acc[1]
        if f == "count_distinct":
            return len(acc)
        if f == "histogram":
            return dict(sorted(acc.items()))
        return acc

    def encode(self, acc: Any) -> Any:
        """The accumulator as JSON-able data (timestamps and decimals tagged, so ``decode`` restores them)."""
        return encode_value(acc)

    def decode(self, data: Any) -> Any:
        return decode_value(data)


class Aggregates:
    """The named aggregates of one step: accumulators as lists, one entry per aggregate, in config order."""

    def __init__(self, aggs: dict[str, str]) -> None:
        self.specs = [(name, parse_agg(text)) for name, text in aggs.items()]
        self._args = [_converted(spec) for _, spec in self.specs]
        self.has_arguments = any(self._args)
        self.counts_only = all(spec.function == "count" and spec.argument is None for _, spec in self.specs)
        """Every aggregate is ``count()``: accumulators are plain counters (the hot loop adds 1)."""
        self._adder = _write_adder([spec for _, spec in self.specs], self.added_one_by_one)

    def rows(self, payloads: list[Any]) -> list[list[Any]] | None:
        """Each payload's argument values (``None`` when no aggregate has an argument)."""
        if not self.has_arguments:
            return None
        return [[None if fn is None else fn(p) for fn in self._args] for p in payloads]

    def field_arguments(self) -> list[str | None] | None:
        """The top-level field each aggregate's argument reads (None for ``count()``), where each argument is no
        more than that; else None."""
        fields = [None if spec.argument is None else getattr(spec.argument.evaluate, "field_name", None)
                  for _, spec in self.specs]
        if any(f is None and spec.argument is not None for f, (_, spec) in zip(fields, self.specs, strict=True)):
            return None
        return fields

    def rows_of(self, values: list[tuple[Any, ...]]) -> list[Any]:
        """The argument rows of events whose argument fields (``field_arguments``) hold ``values``: what ``rows``
        gives for them, and the same ``EvalError`` for a value ``sum`` or ``avg`` cannot take."""
        numeric = [j for j, (_, spec) in enumerate(self.specs) if spec.function in ("sum", "avg")]
        if not numeric:
            return values
        rows: list[Any] = []
        for value in values:
            row = list(value)
            for j in numeric:
                v = row[j]
                if v is not None and v.__class__ is not int and v.__class__ is not float:
                    row[j] = _number(v, self.specs[j][1].function)
            rows.append(row)
        return rows

    def row(self, payload: Any) -> list[Any] | None:
        """One payload's argument values (raises ``EvalError`` as ``rows`` would)."""
        if not self.has_arguments:
            return None
        return [None if fn is None else fn(payload) for fn in self._args]

    def init(self) -> list[Any]:
        return [spec.init() for _, spec in self.specs]

    def added(self, accs: list[Any], row: list[Any] | None) -> list[Any]:
        """The accumulators after one more row, as a new list: an error (a BIGINT sum overflowing, values that
        do not compare) leaves ``accs`` as they were. Runs a function written for these aggregates
        (``_write_adder``: each ``add`` inlined, no call per aggregate), which gives what ``added_one_by_one``
        gives (``tests/test_steps.py`` holds the two to each other)."""
        return self._adder(accs, row)

    def added_one_by_one(self, accs: list[Any], row: list[Any] | None) -> list[Any]:
        """``added`` by each aggregate's ``add``: the definition."""
        return [spec.add(acc, None if row is None else row[j])
                for j, ((_, spec), acc) in enumerate(zip(self.specs, accs, strict=True))]

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        return [spec.merge(x, y) for (_, spec), x, y in zip(self.specs, a, b, strict=True)]

    def results(self, accs: list[Any]) -> dict[str, Any]:
        return {name: spec.result(acc) for (name, spec), acc in zip(self.specs, accs, strict=True)}

    def encode(self, accs: list[Any]) -> list[Any]:
        return [spec.encode(a) for (_, spec), a in zip(self.specs, accs, strict=True)]

    def decode(self, data: list[Any]) -> list[Any]:
        return [spec.decode(a) for (_, spec), a in zip(self.specs, data, strict=True)]

    def describe(self) -> list[str]:
        return [f"{name} = {spec.text}" for name, spec in self.specs]


Adder = Callable[[list[Any], list[Any] | None], list[Any]]
"""(accumulators, a row's argument values) -> the accumulators after that row."""


def _write_adder(specs: list[AggSpec], one_by_one: Adder) -> Adder:
    """A function (accumulators, row) -> new accumulators doing what each spec's ``add`` does, written out for
    these specs: ``count``, ``sum``, ``avg``, ``min`` and ``max`` inline (the same helpers: ``V.add``, ``_less``),
    the others through their ``add``. A row of None (no aggregate has an argument, or a caller passing none) goes
    to ``one_by_one``."""
    names: dict[str, Any] = {"add": V.add, "less": _less, "one_by_one": one_by_one}
    body = ["def added(accs, row):"]
    if any(spec.argument is not None for spec in specs):
        body += ["    if row is None:", "        return one_by_one(accs, row)"]
    items = []
    for j, spec in enumerate(specs):
        acc, value = f"accs[{j}]", f"v{j}"
        if spec.argument is not None:
            body.append(f"    {value} = row[{j}]")
        f = spec.function
        if f == "count":
            items.append(f"{acc} + 1" if spec.argument is None else f"{acc} if {value} is None else {acc} + 1")
        elif f == "sum":
            items.append(f"{acc} if {value} is None else {value} if {acc} is None else add({acc}, {value})")
        elif f == "avg":
            items.append(f"{acc} if {value} is None else [add({acc}[0], {value}), {acc}[1] + 1]")
        elif f == "min":
            items.append(f"{acc} if {value} is None else {value} if {acc} is None or less({value}, {acc}) else {acc}")
        elif f == "max":
            items.append(f"{acc} if {value} is None else {value} if {acc} is None or less({acc}, {value}) else {acc}")
        else:
            names[f"spec{j}"] = spec
            items.append(f"spec{j}.add({acc}, {value})")
    body.append("    return [" + ", ".join(items) + "]")
    exec("\n".join(body), names)  # noqa: S102  # written from the specs' function names only, no user text
    added: Adder = names["added"]
    return added


def parse_agg(text: str) -> AggSpec:
    """Parse ``func(expr)``; ``ConfigError`` names the supported functions."""
    match = _CALL.match(text)
    if not match:
        raise ConfigError(f"expected an aggregate such as 'count()' or 'avg(speed)' ({', '.join(FUNCTIONS)}), "
                          f"found {text!r}")
    function, inner = match.group(1).lower(), match.group(2).strip()
    if function not in FUNCTIONS:
        raise ConfigError(f"unknown aggregate {function!r}; expected one of: {', '.join(FUNCTIONS)}")
    if function == "count" and inner in ("", "*"):
        return AggSpec(text, function, None)
    if not inner:
        raise ConfigError(f"{function}() needs an argument, e.g. {function}(speed)")
    return AggSpec(text, function, compile_expression(inner))


AggExpr = Annotated[
    str,
    AfterValidator(checked_by(parse_agg)),
    WithJsonSchema({"type": "string", "description": "an aggregate: count() | count(x) | sum(x) | min(x) | max(x) | "
                    "avg(x) | count_distinct(x) | histogram(x), x a Spark SQL expression"}),
]


def _converted(spec: AggSpec) -> Any:
    """The function giving a payload's argument value as the aggregate takes it (``None``: no argument)."""
    if spec.argument is None:
        return None
    evaluate = spec.argument.evaluate
    if spec.function not in ("sum", "avg"):
        return evaluate
    what = spec.function

    def number(payload: Any) -> Any:
        value = evaluate(payload)
        return None if value is None else _number(value, what)

    return number


def _number(value: Any, what: str) -> int | float | Decimal:
    """A ``sum``/``avg`` argument: numbers as they are, strings cast to DOUBLE (ANSI: an invalid one fails)."""
    if isinstance(value, str):
        number = V.to_double(value)
        assert number is not None
        return number
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise EvalError("DATATYPE_MISMATCH", f"{what}() needs numbers, found {V.type_name(value)} {value!r}")
    return value


_NATIVELY_ORDERED = frozenset({int, float, Decimal, datetime, date, bool})
"""Types whose Python order, between two values of the type, is SQL's: anything else (objects and arrays, whose
``<`` Python has not or has its own) is compared by ``V.compare``. Text has an order of its own here
(``_rank``)."""

_PLAIN_NUMBERS = frozenset({int, float})
"""Types that Python orders as SQL does between one another (a BIGINT beside a DOUBLE)."""

NUMBER_TEXT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
"""Text that ``min`` and ``max`` order as the number it reads as: a sign, digits with an optional fraction, an
optional exponent, nothing else (no spaces, no ``NaN``). The Spark compiler matches the same pattern
(``engine/spark/windows.py``)."""


def _rank(value: Any) -> tuple[int, float, int, str] | None:
    """Where ``min``/``max`` place a number, a text or a boolean beside values of another of those kinds (None for
    any other kind): (0, the number, 0, "") for a number, (0, its number, 1, text) for text that reads as a
    number, (1, 0.0, 1, text) for other text, (2, 0.0, 2, "false" or "true") for a boolean."""
    kind = type(value)
    if kind is str:
        if NUMBER_TEXT.fullmatch(value):
            return (0, float(value), 1, value)
        return (1, 0.0, 1, value)
    if kind is bool:
        return (2, 0.0, 2, "true" if value else "false")
    if V.is_number(value):
        try:
            return (0, float(value), 0, "")
        except OverflowError:  # an integer beyond DOUBLE's range: Spark's DOUBLE of it is infinite too
            return (0, math.copysign(math.inf, value), 0, "")
    return None


def _less(a: Any, b: Any) -> bool:
    """The order of ``min`` and ``max``: a total order over numbers, text and booleans, so a group's result does not
    depend on the order its values arrive in (a comparison's own casts are no order over mixed values: ``'10' <
    '7'`` as text, ``'7' < 8`` and ``8 < '10'`` as numbers). Numbers by value; text that reads as a number
    (``NUMBER_TEXT``) by that number, after an equal number; then other text, in text order; then booleans
    (``_rank``). Values of one kind otherwise compare as ``<`` does; arrays and objects beside another kind fail."""
    ta, tb = type(a), type(b)
    if ta is tb and ta in _NATIVELY_ORDERED:
        return bool(a < b)
    if ta in _PLAIN_NUMBERS and tb in _PLAIN_NUMBERS:
        return bool(a < b)
    if ta is str or tb is str or ta is bool or tb is bool:
        ra, rb = _rank(a), _rank(b)
        if ra is not None and rb is not None:
            return ra < rb
    return V.compare(a, b) == -1


def _key_text(value: Any) -> str:
    text = V.to_string(value)
    return "" if text is None else text
