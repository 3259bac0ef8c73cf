"""Parse expression text with sqlglot in edgewise's Spark dialect (``dialect.py``).

Imported only when a text is parsed: a run whose expressions were parsed before reads their trees from the cache
(``tree_cache.py``) and never imports sqlglot. The Spark engine writes its SQL from this module's trees.
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokenizer_core import TokenType

from edgewise.errors import ConfigError
from edgewise.expr.dialect import EdgewiseSpark


def parse(text: str) -> Any:
    """Parse expression text; raises ``ConfigError`` saying where the text is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("expected an SQL expression, found an empty value")
    try:
        tree = sqlglot.parse_one(text, dialect=EdgewiseSpark)
    except (ParseError, TokenError) as exc:
        detail = str(exc).split("\n")[0]
        errors = getattr(exc, "errors", None)
        if errors:
            detail = f"{_plain(errors[0].get('description', detail))} at column {errors[0].get('col', '?')}"
        raise ConfigError(f"the expression {text!r} does not parse: {detail}") from None
    _no_split_shift(text)
    if tree is not None:
        tree = tree.transform(_negative_typed_literal)
    if tree is None or isinstance(tree, exp.Select | exp.Query | exp.Command):
        raise ConfigError(f"expected an SQL expression, found {text!r}")
    return tree


_COMPARISON_SIGNS = frozenset({TokenType.GT, TokenType.LT})


def _no_split_shift(text: str) -> None:
    """sqlglot reads ``a > > 1`` as ``a >> 1`` (a shift): two comparison signs apart are a syntax error in Spark, and
    most likely a typo, so say so rather than report an unsupported shift."""
    tokens = EdgewiseSpark().tokenize(text)
    for first, second in pairwise(tokens):
        if first.token_type in _COMPARISON_SIGNS and second.token_type == first.token_type \
                and second.start > first.end + 1:
            raise ConfigError(f"the expression {text!r} does not parse: syntax error at column {second.start + 1}: "
                              f"'{first.text}' follows '{first.text}' (one comparison at a time)")


def _plain(description: str) -> str:
    """A parser message in the user's terms: sqlglot's ``Required keyword: 'expression' missing for <class ...>``
    means an operator without its operand."""
    if "missing for <class" in description or description.startswith("Required keyword"):
        return "an operand is missing (an operator or function without its argument)"
    return re.sub(r"<class '[\w.]+'>", "an expression", description)


_INTEGRAL = frozenset({exp.DataType.Type.TINYINT, exp.DataType.Type.SMALLINT, exp.DataType.Type.INT,
                       exp.DataType.Type.BIGINT})


def _negative_typed_literal(node: exp.Expression) -> exp.Expression:
    """``-128Y`` is the TINYINT -128, not ``128Y`` (out of range) negated: as Spark reads it, on both engines (the
    Spark engine writes its SQL from this tree too)."""
    if isinstance(node, exp.Neg) and _is_typed_literal(node.this):
        negated: exp.Expression = node.this.copy()
        negated.set("this", exp.Literal.number(f"-{node.this.this.this}"))
        return negated
    return node


def _is_typed_literal(node: exp.Expression) -> bool:
    """A number with a type suffix (``128Y``, ``5S``, ``9L``): sqlglot reads it as a cast of the number, without
    the cast's own arguments (a written ``CAST``/``TRY_CAST`` has them)."""
    return (isinstance(node, exp.TryCast) and "format" not in node.args and not node.args.get("safe")
            and isinstance(node.this, exp.Literal) and not node.this.is_string
            and node.args["to"].this in _INTEGRAL)
