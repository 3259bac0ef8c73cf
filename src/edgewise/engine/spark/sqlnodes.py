"""The vocabulary the Spark expression compiler (``sql.py``) and its rules for mixed types (``mixed_types.py``)
share: SQL text to a tree and back, the marks a compiled field read carries, and what a node is by its form."""

from __future__ import annotations

from typing import TypeGuard, cast

import sqlglot
from sqlglot import exp

from edgewise.expr.dialect import EdgewiseSpark


def literal_type(node: exp.Expression) -> str | None:
    if isinstance(node, exp.Literal):
        return "string" if node.is_string else "double"
    if isinstance(node, exp.Boolean):
        return "boolean"
    if isinstance(node, exp.Neg):
        return literal_type(node.this)
    return None


COALESCING = frozenset(("coalesce", "nvl", "ifnull"))


def standalone_if(node: exp.Expression) -> TypeGuard[exp.If]:
    """``node`` is an ``if(...)`` of its own, not one of a CASE's WHEN branches (which sqlglot also makes IFs). An
    ``if(...)`` that is a CASE's ELSE is one of its own: taken for a WHEN branch, the guard counted the errors of
    both its values, taken or not (found by the pipeline fuzzer's soak: ``nullif(round(if(c, s, x), 1), 0)``,
    whose IF of the nullif holds the if() as its ELSE)."""
    return isinstance(node, exp.If) and not (isinstance(node.parent, exp.Case) and node.arg_key == "ifs")


def value_places(node: exp.If | exp.Case) -> list[tuple[exp.Expression, str]]:
    """Where an IF's or a CASE's values are: (holder, key) of each THEN and of the ELSE (which may be empty)."""
    ifs = (node.args.get("ifs") or []) if isinstance(node, exp.Case) else [node]
    return [(i, "true") for i in ifs] + [(node, "default" if isinstance(node, exp.Case) else "false")]


UNTYPED = "edgewise_untyped"
"""Marks a field read whose type the data does not fix (never seen, or seen with several types): its path."""


READ_AT = "edgewise_read_at"
"""Marks a field read with the Spark type it is read at (None: a VARIANT), whatever form its SQL takes (a column a
step set is read as it is)."""


def sql_of(node: exp.Expression) -> str:
    return str(node.sql(dialect="spark"))


def parsed(text: str) -> exp.Expression:
    return cast(exp.Expression, sqlglot.parse_one(text, dialect=EdgewiseSpark))


def error_if(condition: str, error_class: str) -> str:
    return f"CASE WHEN {condition} THEN '{error_class}' END"


def first_error(errors: list[str]) -> str | None:
    errors = [e for e in errors if e]
    if not errors:
        return None
    return errors[0] if len(errors) == 1 else f"coalesce({', '.join(errors)})"


def is_text(node: exp.Expression) -> bool:
    """The expression is text by its form: a string literal, a field read as STRING, a cast to STRING."""
    if node.meta.get(READ_AT) == "string":
        return True
    if isinstance(node, exp.Literal):
        return bool(node.is_string)
    if isinstance(node, exp.Anonymous) and str(node.this).lower() in ("variant_get", "try_variant_get"):
        kind = node.expressions[2] if len(node.expressions) == 3 else None
        return isinstance(kind, exp.Literal) and str(kind.this).lower() == "string"
    if isinstance(node, exp.Cast):
        return node.to.this == exp.DataType.Type.TEXT or node.to.sql().upper() in ("STRING", "VARCHAR", "TEXT")
    if isinstance(node, exp.Case) and node.args.get("default") is not None:  # every branch text (a field's read)
        return is_text(node.args["default"]) and all(is_text(branch.args["true"]) for branch in node.args["ifs"])
    return False


def number_literal(node: exp.Expression) -> str | None:
    """The text of a number literal (``-1`` too), else None."""
    inner = node.this if isinstance(node, exp.Neg) else node
    if isinstance(inner, exp.Literal) and not inner.is_string:
        return str(inner.this)
    return None
