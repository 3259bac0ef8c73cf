"""Conditional and NULL-handling functions."""

from __future__ import annotations

from typing import Any

from edgewise.expr import values as V
from edgewise.expr.functions.base import Evaluator, FunctionTable

table = FunctionTable("conditional")


@table.special("coalesce", args=(1, None))
def coalesce(args: list[Evaluator]) -> Evaluator:
    """The first non-NULL argument (later arguments are not evaluated)."""

    def first(p: Any) -> Any:
        for a in args:
            v = a(p)
            if v is not None:
                return v
        return None

    return first


@table.special("nvl", "ifnull", args=2)
def nvl(args: list[Evaluator]) -> Evaluator:
    """``a`` unless it is NULL, else ``b``."""
    a, b = args

    def pick(p: Any) -> Any:
        v = a(p)
        return b(p) if v is None else v

    return pick


@table.special("nvl2", args=3)
def nvl2(args: list[Evaluator]) -> Evaluator:
    """``b`` if ``a`` is not NULL, else ``c``."""
    a, b, c = args
    return lambda p: c(p) if a(p) is None else b(p)


@table.special("if", args=(2, 3))
def if_(args: list[Evaluator]) -> Evaluator:
    """``if(cond, then, else)``: ``then`` where ``cond`` is TRUE, else ``else``."""
    cond, then = args[0], args[1]
    other = args[2] if len(args) > 2 else (lambda p: None)
    return lambda p: then(p) if cond(p) is True else other(p)


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
