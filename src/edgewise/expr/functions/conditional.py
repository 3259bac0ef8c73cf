"""Conditional and NULL-handling functions."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from edgewise.expr import values as V
from edgewise.expr.functions.base import Evaluator, FunctionTable

table = FunctionTable("conditional")


def number_beside(args: list[Evaluator]) -> Any:
    """The number literal among the values whose type text is cast to, as Spark gives ``coalesce(x, -1)``,
    ``if(c, x, -1)`` and a CASE one type: BIGINT beside integers, DOUBLE where a fraction is among them; None
    without number literals."""
    numbers = [getattr(a, "constant", None) for a in args]
    numbers = [n for n in numbers if n is not None and V.is_number(n)]
    return next((n for n in numbers if not isinstance(n, int)), numbers[0]) if numbers else None


def fraction_beside(args: list[Evaluator]) -> Decimal | float | None:
    """Where every value is a number literal, NULL or a division (whose types the text alone decides) and one is a
    fraction, Spark gives the call a fractional type, and an integer it picks is written as one: ``coalesce(1,
    2.5)`` is the DECIMAL 1.0, ``if(true, 1, 1/0)`` the DOUBLE 1.0. That type, as a zero of it (a DECIMAL's zero
    has the largest scale among the literals); None where the call keeps its values as they are, as where a value's
    type is known only when an event comes (a field)."""
    double, scale, fraction = False, 0, False
    for a in args:
        if getattr(a, "fraction", False):
            double = fraction = True
            continue
        if not hasattr(a, "constant"):
            return None
        value = a.constant
        if value is None:
            continue
        if not V.is_number(value):
            return None
        if isinstance(value, float):
            double = fraction = True
        elif isinstance(value, Decimal):
            fraction = True
            scale = max(scale, -int(value.as_tuple().exponent))
    if not fraction:
        return None
    return 0.0 if double else Decimal(0).scaleb(-scale)


def of_one_type(call: Evaluator, values: list[Evaluator]) -> Evaluator:
    """``call``, its integer results given in the call's fractional type where ``fraction_beside`` finds one."""
    zero = fraction_beside(values)
    if zero is None:
        return call

    def fractional(p: Any) -> Any:
        v = call(p)
        return v + zero if v.__class__ is int else v

    return fractional


def as_common_type(v: Any, number: Any, what: str) -> Any:
    """A text value chosen next to number literals is cast as Spark casts it (``'244'`` is 244 in
    ``nvl(x, -1)``; ``'2.5'`` fails: it is no BIGINT)."""
    if number is not None and v.__class__ is str:
        return V.with_text(v, number, what)[0]
    return v


@table.special("coalesce", args=(1, None))
def coalesce(args: list[Evaluator]) -> Evaluator:
    """The first non-NULL argument (later arguments are not evaluated); text beside number literals is cast to them.

    Spark gives the call one type: ``coalesce(x, 0)`` over the text ``'244'`` is 244, over ``'2.5'`` it fails."""
    number = number_beside(args)

    def first(p: Any) -> Any:
        for a in args:
            v = a(p)
            if v is not None:
                return as_common_type(v, number, "coalesce")
        return None

    return of_one_type(first, args)


@table.special("nvl", "ifnull", args=2)
def nvl(args: list[Evaluator]) -> Evaluator:
    """``a`` unless it is NULL, else ``b``; text beside a number literal is cast to it (as in ``coalesce``)."""
    a, b = args
    number = number_beside(args)

    def pick(p: Any) -> Any:
        v = a(p)
        return as_common_type(b(p) if v is None else v, number, "nvl")

    return of_one_type(pick, args)


@table.special("nvl2", args=3)
def nvl2(args: list[Evaluator]) -> Evaluator:
    """``b`` if ``a`` is not NULL, else ``c``; text beside a number literal is cast to it (as in ``if``)."""
    a, b, c = args
    number = number_beside([b, c])
    return of_one_type(lambda p: as_common_type(c(p) if a(p) is None else b(p), number, "nvl2"), [b, c])


@table.special("if", args=(2, 3))
def if_(args: list[Evaluator]) -> Evaluator:
    """``if(cond, then, else)``: ``then`` where ``cond`` is TRUE, else ``else``; text beside a number literal: cast.

    Spark gives the call one type, as it does ``coalesce``: ``if(c, x, -1)`` over ``'244'`` is 244, over ``'oops'``
    (or ``'2.5'``: no BIGINT) it fails; beside a fraction (``0.5``) text is cast to DOUBLE."""
    cond, then = args[0], args[1]
    other = args[2] if len(args) > 2 else (lambda p: None)
    number = number_beside([then, other])
    return of_one_type(lambda p: as_common_type(then(p) if cond(p) is True else other(p), number, "if"),
                       [then, other])


@table.fn("nullif", args=2, nulls=True)
def nullif(a: Any, b: Any) -> Any:
    """NULL if ``a = b``, else ``a``."""
    if a is None:
        return None
    return None if V.equals(a, b) is True else a


@table.fn("isnull", nulls=True)
def isnull(v: Any) -> bool:
    """Whether the value is NULL."""
    return v is None


@table.fn("isnotnull", nulls=True)
def isnotnull(v: Any) -> bool:
    """Whether the value is not NULL."""
    return v is not None


@table.fn("equal_null", args=2, nulls=True)
def equal_null(a: Any, b: Any) -> bool:
    """Like ``=``, but NULL equals NULL (``a <=> b``)."""
    if a is None or b is None:
        return a is None and b is None
    return V.compare(a, b) == 0


@table.fn("nanvl", args=2)
def nanvl(a: Any, b: Any) -> Any:
    """``a`` unless it is NaN, else ``b``."""
    x = V.to_double(a)
    return V.to_double(b) if x is not None and x != x else x
