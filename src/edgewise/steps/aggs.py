"""Aggregate functions of the ``aggregate`` and ``window`` steps: ``count() sum(x) min(x) max(x) avg(x)
count_distinct(x) histogram(x)``.

Each is an accumulator with ``add`` (one value), ``merge`` (two accumulators: session windows merge) and
``result``; accumulators are plain JSON-able values so they can be committed to a state store and read back.
NULL arguments are ignored, as in SQL (``count()`` counts rows, ``count(x)`` non-NULL values).

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

import re
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Annotated, Any

from pydantic import AfterValidator, WithJsonSchema

from edgewise.config.models import checked_by
from edgewise.errors import ConfigError, EvalError
from edgewise.expr import values as V
from edgewise.expr.compiler import Expression, compile_expression

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
            return _number(value, "sum") if acc is None else acc + _number(value, "sum")
        if f == "avg":
            return [acc[0] + _number(value, "avg"), acc[1] + 1]
        if f == "min":
            return value if acc is None or _less(value, acc) else acc
        if f == "max":
            return value if acc is None or _less(acc, value) else acc
        text = _key_text(value)
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
                return a + b
            return (a if not _less(b, a) else b) if f == "min" else (a if not _less(a, b) else b)
        if f == "avg":
            return [a[0] + b[0], a[1] + b[1]]
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
        self._args = [spec.argument.evaluate if spec.argument else None for _, spec in self.specs]
        self.counts_only = all(spec.function == "count" and spec.argument is None for _, spec in self.specs)
        """Every aggregate is ``count()``: accumulators are plain counters (the hot loop adds 1)."""

    def rows(self, payloads: list[Any]) -> list[list[Any]] | None:
        """Each payload's argument values (``None`` when no aggregate has an argument)."""
        if not any(self._args):
            return None
        return [[None if fn is None else fn(p) for fn in self._args] for p in payloads]

    def init(self) -> list[Any]:
        return [spec.init() for _, spec in self.specs]

    def add(self, accs: list[Any], row: list[Any] | None) -> None:
        for j, (_, spec) in enumerate(self.specs):
            accs[j] = spec.add(accs[j], None if row is None else row[j])

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


def _number(value: Any, what: str) -> int | float | Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise EvalError("DATATYPE_MISMATCH", f"{what}() needs numbers, found {V.type_name(value)} {value!r}")
    return value


def _less(a: Any, b: Any) -> bool:
    if type(a) is type(b) or (isinstance(a, int | float) and isinstance(b, int | float)):
        return bool(a < b)
    return V.compare(a, b) == -1


def _key_text(value: Any) -> str:
    text = V.to_string(value)
    return "" if text is None else text


def encode_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"$ts": V.timestamp_to_us(value)}
    if isinstance(value, date):
        return {"$date": value.isoformat()}
    if isinstance(value, Decimal):
        return {"$dec": str(value)}
    if isinstance(value, list):
        return [encode_value(v) for v in value]
    if isinstance(value, dict):
        return {k: encode_value(v) for k, v in value.items()}
    return value


def decode_value(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1:
            tag, inner = next(iter(value.items()))
            if tag == "$ts":
                return V.timestamp_from_us(inner)
            if tag == "$date":
                return date.fromisoformat(inner)
            if tag == "$dec":
                return Decimal(inner)
        return {k: decode_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_value(v) for v in value]
    return value
