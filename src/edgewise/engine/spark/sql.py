"""Expressions as Spark SQL: the text the user wrote, with each field reference read from the event's VARIANTs.

The expression is parsed once by the same parser the local engine uses (``edgewise.expr.parsing.parse``), so the
function names and syntax are the same on both engines; only field references and edgewise's own functions
(``geo_cell``) are rewritten. How a reference gets its type is the contract in ``fields.py``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlglot
from sqlglot import exp

from edgewise.engine.spark.fields import FieldTypes
from edgewise.engine.spark.mixed_types import (
    GIVES_TEXT,
    MIXED,
    SCALAR_WANTS,
    VARIANT,
    as_spark_writes_it,
    call_values,
    gives_variant,
    is_variant_call,
    lift_mixed,
    map_values,
    one_type,
    retarget_mixed,
    settle_mixed,
    text_as,
    text_beside_typed_numbers,
    text_target,
    variant_accumulator,
    variant_branches,
    variant_elements,
    variant_value,
)
from edgewise.engine.spark.sqlnodes import (
    COALESCING,
    READ_AT,
    UNTYPED,
    error_if,
    first_error,
    is_text,
    literal_type,
    parsed,
    sql_of,
    standalone_if,
)
from edgewise.expr.dialect import EdgewiseSpark
from edgewise.expr.intervals import beside_interval
from edgewise.expr.parsing import parse
from edgewise.expr.typecheck import ARRAY, BOOLEAN, DATE, MAP, TIMESTAMP, static_type

EVENT = "event"
"""The event map column (``MAP<STRING, VARIANT>``, one entry per top-level field), where a layout has one."""
SOURCE = "_src"
"""The event as the source parsed it (one VARIANT): fields no step changed are read from here."""

# functions whose first argument is an array (a field read for them is ARRAY<VARIANT> when its type is unknown)
_ARRAY_FIRST = {
    "size", "cardinality", "array_size", "element_at", "try_element_at", "array_contains", "array_position",
    "slice", "array_join", "array_distinct", "array_union", "array_intersect", "array_except", "array_remove",
    "array_compact", "array_append", "array_prepend", "array_max", "array_min", "flatten", "sort_array",
    "array_sort", "transform", "filter", "exists", "forall", "aggregate", "reduce", "zip_with", "arrays_zip",
    "arrays_overlap", "array_insert", "explode", "get",
}
# functions of numbers: field reads for them are DOUBLE when their type is unknown
_NUMERIC = {
    "abs", "round", "bround", "ceil", "ceiling", "floor", "sqrt", "cbrt", "exp", "ln", "log", "log10", "log2",
    "pow", "power", "sign", "signum", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "degrees", "radians",
    "greatest", "least", "pmod", "try_add", "try_subtract", "try_multiply", "try_divide", "hypot", "geo_cell",
    "timestamp_seconds", "timestamp_millis", "timestamp_micros", "width_bucket", "negative", "positive",
}
# functions of text: a field no type is known for is read as text for their text argument (the first, or every
# one), not given to them as its VARIANT, whose own cast to text drops a DECIMAL's fraction zeros (30.0 -> '30')
_TEXT_FIRST = {
    "upper", "lower", "ucase", "lcase", "initcap", "ltrim", "rtrim", "btrim", "length", "char_length",
    "character_length", "len", "left", "right", "lpad", "rpad", "split", "split_part", "repeat", "regexp_replace",
    "regexp_extract", "regexp_extract_all", "regexp_like", "regexp", "rlike", "ascii",
}
_TEXT_ALL = {"replace", "translate", "instr", "startswith", "endswith", "contains"}
_TEXT_NODES = (exp.Trim, exp.Substring, exp.RegexpLike)
"""Functions sqlglot parses to nodes of their own, whose ``this`` is their text."""
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.Neg)
_COMPARISON = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ)
_ORDERING = (exp.GT, exp.GTE, exp.LT, exp.LTE)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def json_path(parts: list[str]) -> str:
    """``$.a.b`` for plain names, ``$['odd key']`` otherwise."""
    out = "$"
    for part in parts:
        if _NAME.match(part):
            out += f".{part}"
        else:
            out += "[" + exp.Literal.string(part).sql(dialect="spark") + "]"
    return out


def field_read(parts: list[str], spark_type: str | None, types: FieldTypes) -> str:
    """Spark SQL reading a field where the event's layout holds it (``frame.py``): from the source's VARIANT
    (``variant_get(_src, '$.a.b', 'bigint')``), from the column a step set it in, or from the event map;
    VARIANT when the type is None."""
    base, path = _located(parts, types)
    if len(parts) == 1 and spark_type is not None:
        typed = types.typed_read(parts[0], spark_type)
        if typed is not None:  # the column holds the value where the step that set it did (coalesce: lazily)
            return f"coalesce({typed}, {_read_at(base, path, spark_type)})"
    if spark_type in SAMPLED_MISFITS and tuple(parts) in types.sampled and types.type_of(parts) == spark_type:
        return _checked_read(base, path, spark_type, parts)
    return _read_at(base, path, spark_type)


SAMPLED_MISFITS = {
    # a fraction read as BIGINT is truncated by Spark's variant cast
    "bigint": "{kind} IN ('DOUBLE', 'FLOAT') OR ({kind} LIKE 'DECIMAL%' AND {kind} NOT LIKE '%,0)')",
    # a number or an object read as STRING is its JSON text, which compares as text where the local engine
    # compares the value
    "string": "{kind} NOT IN ('STRING', 'VOID')",
}
"""For the types a sample of the input can pin that a later value can silently not fit: SQL (over ``{kind}``, the
value's ``schema_of_variant``) true where it does not. Other misfits already fail their event (a cast that does
not apply) or read the same value (an integer as DOUBLE)."""


def _checked_read(base: str, path: str, spark_type: str, parts: list[str]) -> str:
    """A read of a field whose type a sample of the input pinned, failing the query with the field, the value and
    what to do where a value does not fit that type, instead of giving a different value than the local engine."""
    value = _variant_in(base, path)
    misfit = SAMPLED_MISFITS[spark_type].format(kind=f"schema_of_variant({value})")
    name = ".".join(parts)
    message = f"field {name} was typed {spark_type.upper()} from a sample of the input, but an event holds "
    ddl = "DOUBLE" if spark_type == "bigint" else "STRING"
    for part in reversed(parts[1:]):
        ddl = f"STRUCT<{part}: {ddl}>"
    # a declared STRING takes text only: an event holding a number there is then malformed input (schema.py)
    then = "" if spark_type == "bigint" else "; an event holding another kind of value there is then malformed"
    advice = f'; declare its type on the source (schema: "{parts[0]} {ddl}"{then}) and run again'

    # the check wraps the VARIANT read from, not the read: the read keeps the form the rest of the compiler
    # recognises (``is_text``, ``_guard``)
    failed = f"raise_error(concat({_string(message)}, to_json({value}), {_string(advice)}))"
    checked = f"CASE WHEN {misfit} THEN CAST({failed} AS VARIANT) ELSE {base} END"
    return f"variant_get({checked}, '{path}', '{spark_type}')"


def _string(text: str) -> str:
    return exp.Literal.string(text).sql(dialect="spark")


def _read_at(base: str, path: str, spark_type: str | None) -> str:
    """SQL reading ``path`` of the VARIANT ``base`` at ``spark_type``; the VARIANT itself where that is None."""
    if spark_type is None or spark_type == "variant":
        read = _variant_in(base, path)
        # a JSON null is NULL, as on the local engine (a VARIANT null is not SQL's NULL)
        return f"CASE WHEN is_variant_null({read}) THEN NULL ELSE {read} END"
    if spark_type == "string":
        # a JSON number with a fraction is a DECIMAL in Spark's VARIANT, whose text drops what the local engine's
        # double keeps (30.0 reads '30', 12345678.9 where locally it is '1.23456789E7'): its text is the double's
        # try_variant_get, although a DECIMAL always reads as a double: Spark's optimiser may compute the branch's
        # read for every row, ahead of the CASE (it did below a lookup's join, and a text field failed the query:
        # found by the reference oracle)
        value = _variant_in(base, path)
        return (f"CASE WHEN schema_of_variant({value}) LIKE 'DECIMAL%' THEN "
                f"CAST(try_variant_get({base}, '{path}', 'double') AS STRING) "
                f"ELSE variant_get({base}, '{path}', 'string') END")
    return f"variant_get({base}, '{path}', '{spark_type}')"


def _located(parts: list[str], types: FieldTypes) -> tuple[str, str]:
    """(the VARIANT that holds the field, the field's JSON path in it)."""
    held = types.holder(parts[0])
    if held is None and not types.base_map:
        return SOURCE, json_path(parts)
    top = held if held is not None else f"{EVENT}[{exp.Literal.string(parts[0]).sql(dialect='spark')}]"
    return top, json_path(parts[1:])


def _variant_in(base: str, path: str) -> str:
    """The VARIANT at ``path`` of ``base`` as it is (a JSON null is a VARIANT null)."""
    return base if path == "$" else f"variant_get({base}, '{path}')"


def _field_parts(node: exp.Expression, lambda_vars: frozenset[str]) -> list[str] | None:
    """The path of a field reference (``a``, ``a.b.c``), or None for anything else (lambda variables too)."""
    path = _path(node)
    return None if path is None or path[0] in lambda_vars else path


def _path(node: exp.Expression) -> list[str] | None:
    if isinstance(node, exp.Column):
        return [p.name for p in node.parts]
    if isinstance(node, exp.Dot):
        head = [node.this.name] if isinstance(node.this, exp.Identifier) else _path(node.this)
        return None if head is None else [*head, node.expression.name]
    if isinstance(node, exp.Identifier) and not isinstance(node.parent, exp.Column | exp.Dot):
        return [node.name]
    return None


def _is_branch(parent: exp.Expression, key: str) -> bool:
    """``key`` of ``parent`` is a value an IF or a CASE gives (not a condition)."""
    return (isinstance(parent, exp.If) and key in ("true", "false")) or (
        isinstance(parent, exp.Case) and key in ("ifs", "default"))


_ELEMENT_PARAM = {"aggregate": 1, "reduce": 1}
"""Which lambda parameter is the array's element (0 for transform, filter, exists, forall, ...)."""


class _Compiler:
    def __init__(self, types: FieldTypes) -> None:
        self.types = types
        self.fields: set[str] = set()
        self.variant_vars: set[str] = set()
        """Lambda variables that are VARIANT elements (of an array whose element type is unknown)."""

    def compile(self, tree: exp.Expression, want: str | None) -> exp.Expression:
        """The parsed expression over the event's layout, its field reads typed."""
        return _follow_value_kinds(self.rewrite(tree, want, frozenset()), self.types)

    def rewrite(self, node: exp.Expression, want: str | None, lambda_vars: frozenset[str]) -> exp.Expression:
        path = _path(node)
        if path is not None and path[0] in lambda_vars:
            if path[0] in self.variant_vars and (len(path) > 1 or want):
                var = path[0]
                read = f"variant_get({var}, '{json_path(path[1:])}'" + (f", '{want}')" if want else ")")
                return parsed(read)
            return node
        if path is not None:
            self.fields.add(path[0])
            known = self.types.type_of(path)
            read_node = parsed(field_read(path, known or want, self.types))
            read_node.meta[READ_AT] = known or want
            if known is None:
                read_node.meta[UNTYPED] = path
            return read_node
        if isinstance(node, exp.Dot) and path is None:
            element = _element_path(node)
            from_element = None if element is None else self._field_of_element(*element, want, lambda_vars)
            if from_element is not None:
                return from_element
        if isinstance(node, exp.Anonymous) and str(node.this).lower() in COALESCING:
            return self._coalescing(node, want, lambda_vars)
        written = as_spark_writes_it(node)
        if written is not None:  # in its place (``is_variant_call`` asks where it is)
            return self.rewrite(node.replace(written), want, lambda_vars)
        if isinstance(node, exp.Anonymous) and str(node.this).lower() == "pmod" and \
                any(_has_fraction_literal(a) for a in node.expressions):
            # a fraction literal is a DECIMAL on Spark, and pmod's DECIMAL result has room for the remainder only
            # (pmod(-0.25, 3) is 2.75, which DECIMAL(2,2) cannot hold: the query failed); the local engine computes
            # over doubles, and so does this (found by the split oracle, issue 38)
            operands = [self.rewrite(a, "double", lambda_vars) for a in node.expressions]
            if any(a.meta.get(MIXED) for a in operands):
                return _double_pmods(_lifted_pmod(node, operands))
            return parsed(f"pmod({', '.join(f'CAST({sql_of(a)} AS DOUBLE)' for a in operands)})")
        if isinstance(node, exp.Anonymous) and str(node.this).lower() == "geo_cell":
            args = [self.rewrite(a, "double", lambda_vars).sql(dialect="spark") for a in node.expressions]
            from edgewise.expr.functions.geo import spark_sql

            return parsed(spark_sql(*args))
        if isinstance(node, exp.Anonymous) and str(node.this).lower() in _ELEMENT_PARAM and len(node.expressions) > 1:
            start = node.expressions[1]
            if isinstance(start, exp.Literal) and not start.is_string and start.this.isdigit():
                # integers are BIGINT in edgewise (an INT start value would not match a BIGINT merge in Spark)
                node.expressions[1].replace(sqlglot.parse_one(f"{start.this}L", dialect=EdgewiseSpark))
        element_type = None
        for key, child in list(node.args.items()):
            if isinstance(child, list):
                rewritten = []
                for i, c in enumerate(child):
                    if isinstance(c, exp.Lambda):
                        rewritten.append(self._lambda(node, c, element_type, lambda_vars))
                        continue
                    r = self._child(node, key, i, c, lambda_vars, want)
                    if i == 0 and element_type is None:
                        element_type = _element_type(r)
                    rewritten.append(r)
                node.set(key, rewritten)
            elif isinstance(child, exp.Lambda):
                node.set(key, self._lambda(node, child, element_type, lambda_vars))
            elif isinstance(child, exp.Expression):
                r = self._child(node, key, 0, child, lambda_vars, want)
                if key == "this":
                    element_type = _element_type(r)
                node.set(key, r)
        if isinstance(node, exp.Anonymous) and str(node.this).lower() in _ELEMENT_PARAM:
            variant_accumulator(node)
        if isinstance(node, exp.Case) or standalone_if(node):
            self._branches_beside_numbers(node, want)
            if want is None:
                variant_branches(node)
            settle_mixed(node, want)
            return node
        if isinstance(node, exp.Anonymous) and str(node.this).lower() == "array":
            variant_elements(node)
        if isinstance(node, exp.Cast) and is_text(node) and _is_untyped_variant(node.this):
            # a VARIANT's own cast to text drops a DECIMAL's fraction zeros: read the field as text instead
            text = parsed(field_read(node.this.meta[UNTYPED], "string", self.types))
            text.meta[READ_AT] = "string"
            node.set("this", text)
        return lift_mixed(node)

    def _branches_beside_numbers(self, node: exp.If | exp.Case, want: str | None) -> None:
        """An IF's or a CASE's values where one is a field no type is known for and another a number literal:
        Spark gives the call one type, so text an event's field holds is cast to the literals' type, as over a
        STRING column and as on the local engine (``_beside_numbers``). (Found by the pipeline fuzzer's soak:
        ``try_divide(if(c, x, -1), 4)`` over ``'oops'``, ``if(c, 5, x) = -1`` over ``'297.27'``.)"""
        values = call_values(node)
        target = text_target(values)
        if target is not None:
            retarget_mixed(values, target, self._untyped_beside)
        if target is None or not any(gives_variant(v) for v in values):
            return
        map_values(node, lambda value: self._beside_numbers(value, target, want))

    def _beside_numbers(self, arg: exp.Expression, target: str | None, want: str | None) -> exp.Expression:
        """A value of ``coalesce``, ``if`` or a CASE next to number literals (of type ``target``) where another value
        is an untyped field: wanted at no type, a VARIANT (``_as_variant``); wanted at a scalar type, the untyped
        field's text is cast to ``target`` first (``coalesce(x, 0)`` over ``'2.5'`` fails: it is no BIGINT), any
        other value it holds read at the wanted type as before."""
        if want is None:
            return self._as_variant(arg, target)
        path = arg.meta.get(UNTYPED)
        if path is None or target is None or want not in SCALAR_WANTS:
            return arg
        text = field_read(path, "string", self.types)
        return parsed(f"CASE WHEN {_kind(path, self.types)} IN ('STRING') THEN "
                     f"CAST(CAST({text} AS {target}) AS {want.upper()}) ELSE {sql_of(arg)} END")

    def _untyped_beside(self, read: exp.Expression, target: str) -> exp.Expression:
        """A field no type is known for, read at a number type, as a value beside number literals of type
        ``target``: its text cast to ``target`` first (``retarget_mixed``)."""
        return self._beside_numbers(read, target, read.meta[READ_AT])

    def _coalescing(self, node: exp.Anonymous, want: str | None, lambda_vars: frozenset[str]) -> exp.Expression:
        """``coalesce``/``nvl``/``ifnull``: Spark gives the call one type, and refuses a VARIANT beside another
        type. A field no type is known for is read at the type the call is wanted at (DOUBLE in arithmetic, as
        the field alone would be); where nothing says (the value a step sets, a string function's argument), the
        call is a VARIANT, every other argument cast to one, so each event's value comes out as it is, as on the
        local engine. (Found by the pipeline fuzzer's soak: ``coalesce(y.z, 0)`` over a field never seen was
        refused by Spark's analyser, an internal error for the user.)"""
        args = [self.rewrite(a, want, lambda_vars) for a in node.expressions]
        literal_target = text_target(args)
        if literal_target is not None:
            retarget_mixed(args, literal_target, self._untyped_beside)
        if any(gives_variant(a) for a in args) or (
                is_variant_call(node, want) and text_beside_typed_numbers(args)):
            target = text_target(args)
            args = [self._beside_numbers(a, target, want) for a in args]
            if want is None:
                node.meta[VARIANT] = True if target else GIVES_TEXT
        node.set("expressions", args)
        settle_mixed(node, want)
        return node

    def _as_variant(self, arg: exp.Expression, target: str | None) -> exp.Expression:
        """An argument of a VARIANT ``coalesce``: the untyped field's VARIANT, anything else cast to one. Text
        beside number literals is cast to their type first (``target``: ``text_target``), as both engines give
        ``coalesce(x, 0)`` over ``'244'`` 244 and fail it over ``'2.5'``; the guard reports the cast's failure
        (``CAST`` becomes ``try_cast`` and ``CAST_INVALID_INPUT``)."""
        if arg.meta.get(VARIANT):  # a call made a VARIANT: its text beside the literals is cast as a field's
            if target is None or arg.meta[VARIANT] != GIVES_TEXT:
                return arg
            value = sql_of(arg)
            return parsed(f"CASE WHEN schema_of_variant({value}) IN ('STRING') THEN "
                         f"try_cast(CAST(variant_get({value}, '$', 'string') AS {target}) AS VARIANT) ELSE {value} END")
        path = arg.meta.get(UNTYPED)
        if path is not None:
            if target is None:
                return arg
            text = field_read(path, "string", self.types)
            return parsed(f"CASE WHEN {_kind(path, self.types)} IN ('STRING') THEN "
                         f"try_cast(CAST({text} AS {target}) AS VARIANT) ELSE {sql_of(arg)} END")
        if target is not None and is_text(arg):
            return parsed(f"try_cast(CAST({sql_of(arg)} AS {target}) AS VARIANT)")
        return variant_value(arg)

    def _field_of_element(self, element: exp.Expression, parts: list[str], want: str | None,
                          lambda_vars: frozenset[str]) -> exp.Expression | None:
        """``items[0].sku``, ``get(items, 0).sku``: the element of an array of unknown element type is a VARIANT,
        whose fields are read like an event's (Spark's ``.`` only extracts from a STRUCT). None where the element
        is typed (a STRUCT: ``.`` works as it is)."""
        rewritten = self.rewrite(element.copy(), None, lambda_vars)
        array = rewritten.this if isinstance(rewritten, exp.Bracket) else rewritten.expressions[0]
        if _element_type(array) != "variant":
            return None
        return parsed(_read_at(sql_of(rewritten), json_path(parts), want))

    def _lambda(self, parent: exp.Expression, node: exp.Lambda, element_type: str | None,
                lambda_vars: frozenset[str]) -> exp.Expression:
        params = [e.name for e in node.expressions]
        name = str(parent.this).lower() if isinstance(parent, exp.Anonymous) else "transform"
        position = _ELEMENT_PARAM.get(name, 0)
        if element_type == "variant" and position < len(params):
            self.variant_vars.add(params[position])
        node.set("this", self.rewrite(node.this, None, lambda_vars | frozenset(params)))
        return node

    def _child(self, parent: exp.Expression, key: str, index: int, child: Any,
               lambda_vars: frozenset[str], parent_want: str | None) -> Any:
        if not isinstance(child, exp.Expression):
            return child
        want = self._want(parent, key, index, child)
        if want is None and _is_branch(parent, key):  # an IF's or a CASE's value is wanted as the whole is
            want = parent_want
        return self.rewrite(child, want, lambda_vars)

    def _want(self, parent: exp.Expression, key: str, index: int, child: exp.Expression) -> str | None:
        """The type a field read should have as this argument of ``parent`` when nothing else says."""
        if isinstance(parent, exp.And | exp.Or | exp.Not):
            return "boolean"
        if isinstance(parent, exp.If) and key == "this":
            return "boolean"
        if isinstance(parent, exp.IntDiv):
            return "bigint"
        if isinstance(parent, exp.Add | exp.Sub) and beside_interval(parent):
            return "string"  # a field beside an INTERVAL is a timestamp's text (JSON has no timestamps)
        if isinstance(parent, _ARITHMETIC):
            return "double"
        if isinstance(parent, (*_COMPARISON, exp.In, exp.Between)):
            siblings = [c for c in parent.iter_expressions() if c is not child]
            for sibling in siblings:
                t = literal_type(sibling)
                if t is not None:
                    return t
            return "double" if isinstance(parent, (*_ORDERING, exp.Between)) else "string"
        if isinstance(parent, exp.Bracket) and key == "this":
            index_node = parent.expressions[0] if parent.expressions else None
            if isinstance(index_node, exp.Literal) and index_node.is_string:
                return "map<string,variant>"
            return "array<variant>"
        if isinstance(parent, exp.Anonymous):
            name = str(parent.this).lower()
            if name in _ARRAY_FIRST and key == "expressions" and index == 0:
                return "array<variant>"
            if name in _NUMERIC:
                return "double"
            if name in _TEXT_ALL or (name in _TEXT_FIRST and key == "expressions" and index == 0):
                return "string"
        if isinstance(parent, _TEXT_NODES) and key == "this":
            return "string"
        if isinstance(parent, exp.Transform) and key == "this":
            return "array<variant>"
        return None


_ELEMENT_ACCESS = ("get", "element_at", "try_element_at")


def _is_untyped_variant(node: exp.Expression) -> bool:
    """A field no type is known for, read as the VARIANT it is."""
    return node.meta.get(UNTYPED) is not None and node.meta.get(READ_AT) is None


def _element_path(node: exp.Dot) -> tuple[exp.Expression, list[str]] | None:
    """``(element, [field, ...])`` where ``node`` reads fields of an array element (``xs[0].a.b``,
    ``get(xs, 0).a``); None for anything else."""
    parts: list[str] = []
    current: exp.Expression = node
    while isinstance(current, exp.Dot) and isinstance(current.expression, exp.Identifier):
        parts.insert(0, current.expression.name)
        current = current.this
    accesses = isinstance(current, exp.Bracket) or (
        isinstance(current, exp.Anonymous) and str(current.this).lower() in _ELEMENT_ACCESS)
    return (current, parts) if accesses and parts else None


DOUBLE_PMOD = "edgewise_double_pmod"
"""Marks a ``pmod`` a mixed value was lifted out of (``_lifted_pmod``), for ``_double_pmods`` to write."""


def _lifted_pmod(node: exp.Expression, args: list[exp.Expression]) -> exp.Expression:
    """``pmod`` over a value mixing text with numbers (``MIXED``) lifted into that value's branches, as any other
    call is (``lift_mixed``): ``pmod(if(c, s, coalesce(0.25, 0)), 3)`` is ``if(c, pmod(s, 3), pmod(coalesce(0.25,
    0), 3))``, so the text ``'3.5'`` meets pmod beside the integer 3 as locally (cast to BIGINT: it fails the
    event), where one type for the IF read it as the number 3.5 (found by the fuzzer's soak)."""
    node.set("expressions", args)
    node.meta[DOUBLE_PMOD] = True
    return lift_mixed(node)


def _double_pmods(tree: exp.Expression) -> exp.Expression:
    """Each lifted ``pmod`` (``DOUBLE_PMOD``) over doubles where an operand holds a fraction literal (a DECIMAL,
    whose remainder can overflow its type on Spark); a field no type is known for stays as it is read, for
    ``_follow_value_kinds`` to cast its text by the other operand's own kind."""
    for call in list(tree.find_all(exp.Anonymous)):
        if call.meta.pop(DOUBLE_PMOD, None):
            call.set("expressions", [
                exp.Cast(this=a, to=exp.DataType.build("DOUBLE"))
                if a.meta.get(UNTYPED) is None and _has_fraction_literal(a) else a for a in call.expressions])
    return tree


def _has_fraction_literal(node: exp.Expression) -> bool:
    """The expression holds a number literal with a fraction or an exponent (a DECIMAL or DOUBLE to Spark)."""
    return any(not lit.is_string and any(c in lit.this for c in ".eE") for lit in node.find_all(exp.Literal))


_TEXT_RULE_OPERATORS = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv, *_COMPARISON)
_TEXT_RULE_FUNCTIONS = frozenset(("pmod", "try_add", "try_subtract", "try_multiply", "try_divide", "try_mod"))


def _follow_value_kinds(tree: exp.Expression, types: FieldTypes) -> exp.Expression:
    """Operators over a field whose type only each event's value tells (``x`` holding ``3`` in one event and
    ``"2.5"`` in another) combine it as the local engine does, by the value's kind, not by one type for all: text
    against a number casts to BIGINT against an integer and to DOUBLE against a fraction (so ``"2.5" * 2`` fails
    with ``CAST_INVALID_INPUT``, as over a STRING column), and a number against text casts the text likewise.
    Without this the read at one type (DOUBLE for arithmetic) would take ``"2.5"`` as 2.5 on Spark only."""
    for node in reversed(list(tree.find_all(*_TEXT_RULE_OPERATORS))):  # operands before what uses them
        untyped = {k: v.meta.get(UNTYPED) for k, v in node.args.items() if isinstance(v, exp.Expression)}
        for key, other_key in (("this", "expression"), ("expression", "this")):
            operand, other = node.args.get(key), node.args.get(other_key)
            if not isinstance(operand, exp.Expression) or not isinstance(other, exp.Expression):
                continue
            path = operand.meta.get(UNTYPED)
            if path is None:
                continue
            other_path = untyped.get(other_key)
            if other_path is not None and key == "this" and not isinstance(node, _COMPARISON):
                # text with text in arithmetic is a type mismatch (Spark's analyser refuses STRING * STRING);
                # over two untyped fields only the events' values tell (found by the fuzzer's soak: x * x)
                operand.replace(_mismatch_if_both_text(operand, other, path, other_path, types))
                continue
            if is_text(other):
                if isinstance(node, _COMPARISON):
                    compared = _compare_by_kind(node, key, path, types)
                    tree = compared if node is tree else tree
                    node.replace(compared)
                    break
                continue
            operand.replace(_number_by_kind(operand, other, path, types))
    # pmod and the try_ arithmetic functions cast text as the operators do (found by the fuzzer's soak)
    for call in reversed([n for n in tree.find_all(exp.Anonymous)
                          if str(n.this).lower() in _TEXT_RULE_FUNCTIONS and len(n.expressions) == 2]):
        a, b = call.expressions
        cast_function = "try_cast" if str(call.this).lower().startswith("try_") else "CAST"
        call.set("expressions", [
            _number_by_kind(operand, other, operand.meta[UNTYPED], types, cast_function)
            if operand.meta.get(UNTYPED) is not None and not is_text(other) else operand
            for operand, other in ((a, b), (b, a))])
    return tree


def _kind(path: list[str], types: FieldTypes) -> str:
    """SQL: the kind of the field's value (``schema_of_variant``: ``BIGINT``, ``DECIMAL(5,2)``, ``STRING``, ...).
    Tests on it use IN and LIKE, which the guard leaves as they are (it rewrites comparisons)."""
    return f"schema_of_variant({_variant_in(*_located(path, types))})"


MISMATCH_MESSAGE = "[DATATYPE_MISMATCH] arithmetic needs numbers; both operands are text"


def _mismatch_if_both_text(read: exp.Expression, other: exp.Expression, path: list[str], other_path: list[str],
                           types: FieldTypes) -> exp.Expression:
    """The untyped field ``read`` beside the untyped field ``other``: a type mismatch where both hold text (the
    guard turns ``raise_error`` with this message into the event's DATATYPE_MISMATCH), else as ``_number_by_kind``."""
    both_text = f"{_kind(path, types)} IN ('STRING') AND {_kind(other_path, types)} IN ('STRING')"
    by_kind = sql_of(_number_by_kind(read, other, path, types))
    return parsed(f"CASE WHEN {both_text} THEN CAST(raise_error('{MISMATCH_MESSAGE}') AS DOUBLE) ELSE {by_kind} END")


def _number_by_kind(read: exp.Expression, other: exp.Expression, path: list[str], types: FieldTypes,
                    cast_function: str = "CAST") -> exp.Expression:
    """The untyped field ``read`` as an operand next to the number ``other``: text cast the way Spark casts text
    next to that number's type (``try_cast`` inside the try_ functions, where text that does not cast is NULL),
    anything else read as it was."""
    cast_text = _text_beside(field_read(path, "string", types), sql_of(other), cast_function)
    return parsed(f"CASE WHEN {_kind(path, types)} IN ('STRING') THEN {cast_text} ELSE {sql_of(read)} END")


def _compare_by_kind(node: exp.Expression, key: str, path: list[str], types: FieldTypes) -> exp.Expression:
    """The comparison of the untyped field (operand ``key``) with text: where the event's value is a number, the
    text is cast to BIGINT (integral value) or DOUBLE (a fraction) and compared as numbers; otherwise as text."""
    kind, op = _kind(path, types), _OPERATORS[type(node)]

    def compared(spark_type: str) -> str:
        value = field_read(path, spark_type, types)
        text = f"CAST({sql_of(node.args['expression' if key == 'this' else 'this'])} AS {spark_type.upper()})"
        return f"{value} {op} {text}" if key == "this" else f"{text} {op} {value}"

    return parsed(f"CASE WHEN {kind} IN ('BIGINT', 'INT', 'SMALLINT', 'TINYINT') THEN {compared('bigint')} "
                 f"WHEN {kind} LIKE 'DECIMAL%' OR {kind} IN ('DOUBLE', 'FLOAT') THEN {compared('double')} "
                 f"ELSE {sql_of(node)} END")


def _element_type(node: exp.Expression) -> str | None:
    """The element type of an array a rewritten field read gives (``variant_get(..., 'array<T>')`` → T)."""
    if isinstance(node, exp.Anonymous) and str(node.this).lower() in ("variant_get", "try_variant_get"):
        args = node.expressions
        if len(args) == 3 and isinstance(args[2], exp.Literal):
            t = str(args[2].this).lower()
            if t.startswith("array<") and t.endswith(">"):
                return t[6:-1]
    return None


def to_spark_sql(text: str, types: FieldTypes, *, want: str | None = None) -> str:
    """The expression ``text`` as Spark SQL over the event; ``want`` types a bare field reference (a
    condition wants ``boolean``)."""
    tree = _Compiler(types).compile(parse(text), want)
    return str(tree.sql(dialect="spark"))


def native(text: str) -> str:
    """A field-free expression as Spark runs it: edgewise's own functions (geo_cell) rewritten to Spark SQL."""
    return to_spark_sql(text, FieldTypes())


# ---------------------------------------------------------------- runtime errors that fail one event

ERROR_MESSAGES = {
    "DIVIDE_BY_ZERO": "division by zero; use try_divide to get NULL instead",
    "ARITHMETIC_OVERFLOW": "the result overflows its type; use the try_ form to get NULL instead",
    "CAST_INVALID_INPUT": "a value cannot be cast to the target type; use try_cast to get NULL instead",
    "INVALID_VARIANT_CAST": "a field's value does not have the type the expression needs",
    "LOOKUP_KEY_MISSING": "no row in the lookup table for the event's key (missing: error)",
}
"""On Spark, the messages of the errors a step catches (their types are Spark's error classes, as locally)."""


SHARE_OVER = 120
"""An operand a guard repeats is bound once (``_Shared``) where its SQL is longer than this."""


class _Shared:
    """Operands a guard's SQL uses several times, each written once: a long one is bound to a lambda variable
    (``element_at(transform(array(<operand>), _s1_ -> <body>), 1)``, Spark SQL's only way to name a value), and
    the body reads the variable. Without it each guard repeated its operands' SQL (a comparison eight times), so the
    SQL grew exponentially with nesting (an `if` in a comparison in a CASE…) until Spark's driver ran out of heap
    planning it; with it the SQL grows linearly. Short operands (a column, a literal) are repeated as they are,
    which keeps the common expression free of lambdas (Spark does not generate code for them)."""

    counter = 0

    def __init__(self, *operands: str) -> None:
        self.bound: list[tuple[str, str]] = []
        self.names: list[str] = []
        for sql in operands:
            if len(sql) > SHARE_OVER:
                _Shared.counter += 1
                name = f"_s{_Shared.counter}_"  # the trailing _: no name is a part of another
                self.bound.append((name, sql))
                self.names.append(name)
            else:
                self.names.append(sql)

    def wrap(self, body: str) -> str:
        """``body`` (written with ``names``) with the long operands it uses more than once bound around it, and
        those it uses once written in place."""
        for name, sql in reversed(self.bound):
            if body.count(name) > 1:
                body = f"element_at(transform(array({sql}), {name} -> {body}), 1)"
            else:
                body = body.replace(name, f"({sql})")
        return body


def _guard(node: exp.Expression) -> tuple[exp.Expression, str | None]:
    """The expression with each failing operation in its NULL-giving form, and SQL giving the first error class
    of the event (NULL when it has none). Errors in a branch not taken (CASE, IF, coalesce) do not count; lambda
    bodies are guarded too, and their errors counted as the local engine's evaluation meets them
    (``_guard_higher_order``)."""
    if isinstance(node, exp.Lambda):  # a lambda is guarded by the call it is an argument of
        return node, None
    higher_order = _higher_order(node)
    if higher_order is not None:
        return _guard_higher_order(node, *higher_order)
    if isinstance(node, exp.Case):
        return _guard_case(node)
    if standalone_if(node):
        # if(c, a, b) is CASE WHEN c THEN a ELSE b END: the error of the branch not taken does not count (it did:
        # `if(k > 3, 1 / 0, 1)` failed events with k 1 on Spark only)
        return _guard_case(exp.Case(ifs=[exp.If(this=node.this, true=node.args["true"])],
                                    default=node.args.get("false")))
    if isinstance(node, exp.And | exp.Or):
        return _guard_connective(node)
    if isinstance(node, exp.Anonymous):
        name = str(node.this).lower()
        if name == "typeof":  # only the operand's type counts: it is not evaluated, and cannot fail
            return node, None
        if name == "raise_error" and MISMATCH_MESSAGE in sql_of(node):  # see _mismatch_if_both_text
            return parsed("CAST(NULL AS DOUBLE)"), "'DATATYPE_MISMATCH'"
        if name in COALESCING:
            return _guard_coalesce(node)
        if name == "array":  # one element type: text beside numbers is cast to it, outside any try form
            return _guard_array(node)
        if name == "variant_get" and len(node.expressions) == 3:
            variant, path, type_ = node.expressions
            v, ev = _guard(variant)
            safe = parsed(f"try_variant_get({sql_of(v)}, {sql_of(path)}, {sql_of(type_)})")
            # an error only where the field holds a value that does not cast: a missing field and a JSON null
            # are NULL, not errors
            found = f"try_variant_get({sql_of(v)}, {sql_of(path)}, 'variant')"
            # text that does not cast is Spark's (and the local engine's) CAST_INVALID_INPUT, as for a STRING
            # column; other values that do not fit the type are the VARIANT's own error
            error_class = (f"CASE WHEN schema_of_variant({found}) = 'STRING' THEN 'CAST_INVALID_INPUT' "
                           "ELSE 'INVALID_VARIANT_CAST' END")
            own = (f"CASE WHEN {found} IS NOT NULL AND NOT is_variant_null({found}) AND {sql_of(safe)} IS NULL "
                   f"THEN {error_class} END")
            return safe, first_error([ev or "", own])
    errors: list[str] = []
    for key, child in list(node.args.items()):
        if isinstance(child, list):
            guarded = []
            for c in child:
                if isinstance(c, exp.Expression):
                    g, e = _guard(c)
                    guarded.append(g)
                    errors.append(e or "")
                else:
                    guarded.append(c)
            node.set(key, guarded)
        elif isinstance(child, exp.Expression):
            g, e = _guard(child)
            node.set(key, g)
            errors.append(e or "")
    if isinstance(node, exp.Anonymous) and str(node.this).lower() == "to_timestamp" and node.expressions \
            and is_text(node.expressions[0]):
        # text that is not a time fails the query on Spark (a CAST under ANSI); locally it fails the event
        args = ", ".join(sql_of(a) for a in node.expressions)
        errors.append(error_if(f"({sql_of(node.expressions[0])}) IS NOT NULL AND try_to_timestamp({args}) IS NULL",
                               "CANNOT_PARSE_TIMESTAMP"))
        return parsed(f"try_to_timestamp({args})"), first_error(errors)
    if isinstance(node, exp.Func) and _function_name(node) in MATH_ON_DOUBLES:
        def as_double(child: exp.Expression) -> exp.Expression:
            if not is_text(child):
                return child
            text = sql_of(child)
            errors.append(error_if(f"({text}) IS NOT NULL AND try_cast({text} AS DOUBLE) IS NULL",
                                    "CAST_INVALID_INPUT"))
            return parsed(f"try_cast({text} AS DOUBLE)")

        for key, child in list(node.args.items()):
            if isinstance(child, list):
                node.set(key, [as_double(c) if isinstance(c, exp.Expression) else c for c in child])
            elif isinstance(child, exp.Expression):
                node.set(key, as_double(child))
        return node, first_error(errors)
    if isinstance(node, exp.Anonymous) and str(node.this).lower() == "pmod" and len(node.expressions) == 2:
        # text beside a number: Spark casts it as in arithmetic (BIGINT against an integer), outside any try form
        a, b = node.expressions
        operands = []
        for text, other in ((a, b), (b, a)):
            if is_text(text):
                errors.append(_text_operand_error(True, sql_of(text), sql_of(other)))
                operands.append(parsed(_text_beside(sql_of(text), sql_of(other), "try_cast")))
            else:
                operands.append(text)
        node.set("expressions", operands)
        return node, first_error(errors)
    access = _array_access(node)
    if access is not None:
        return _guard_array_access(*access, errors)
    if isinstance(node, exp.Add | exp.Sub) and beside_interval(node):
        return _guard_interval_arithmetic(node, errors)
    if isinstance(node, exp.Div | exp.IntDiv | exp.Mod | exp.Add | exp.Sub | exp.Mul):
        shared = _Shared(sql_of(node.this), sql_of(node.expression))
        a, b = shared.names
        own_errors = [_operand_text_error(node.this, a, b), _operand_text_error(node.expression, b, a)]
        if isinstance(node, exp.Div | exp.IntDiv | exp.Mod):
            divisor_zero = f"({b}) = 0"
            if isinstance(node, exp.Div):
                safe_sql = f"try_divide({a}, {b})"
            else:
                operation = sql_of(type(node)(this=parsed(a), expression=parsed(b)))
                safe_sql = f"CASE WHEN {divisor_zero} THEN NULL ELSE {operation} END"
            own_errors.append(error_if(divisor_zero, "DIVIDE_BY_ZERO"))
        else:
            fn = {exp.Add: "try_add", exp.Sub: "try_subtract", exp.Mul: "try_multiply"}[type(node)]
            safe_sql = f"{fn}({a}, {b})"
            own_errors.append(error_if(f"({a}) IS NOT NULL AND ({b}) IS NOT NULL AND {safe_sql} IS NULL",
                                        "ARITHMETIC_OVERFLOW"))
        first_own = first_error(own_errors)
        if first_own:
            errors.append(shared.wrap(first_own))
        return parsed(shared.wrap(safe_sql)), first_error(errors)
    if isinstance(node, _COMPARISON):
        safe_node, own_error = _guard_text_comparison(node)
        errors.append(own_error)
        return safe_node, first_error(errors)
    if isinstance(node, exp.Cast) and not node.args.get("safe"):
        to = sql_of(node.args["to"])
        shared = _Shared(sql_of(node.this))
        [inner] = shared.names
        errors.append(shared.wrap(error_if(f"({inner}) IS NOT NULL AND try_cast({inner} AS {to}) IS NULL",
                                            "CAST_INVALID_INPUT")))
        return parsed(f"try_cast({sql_of(node.this)} AS {to})"), first_error(errors)
    return node, first_error(errors)


_QUANTIFIERS = {"exists": "true", "forall": "false"}
"""The higher-order functions that stop at a decisive element, and the value that decides."""


def _higher_order(node: exp.Expression) -> tuple[str, list[exp.Expression]] | None:
    """``(name, arguments)`` of a call of a higher-order function the local engine has (``transform``, ``filter``,
    ``exists``, ``forall``, ``aggregate``/``reduce``), with its lambdas."""
    if isinstance(node, exp.Transform):
        return "transform", [node.this, node.expression]
    name = str(node.this).lower() if isinstance(node, exp.Anonymous) else ""
    if name in ("filter", *_QUANTIFIERS, *_ELEMENT_PARAM) and any(isinstance(a, exp.Lambda) for a in node.expressions):
        return name, list(node.expressions)
    return None


def _guard_higher_order(node: exp.Expression, name: str, args: list[exp.Expression]) -> tuple[exp.Expression,
                                                                                               str | None]:
    """A higher-order call with its arguments and its lambdas' bodies guarded, and the first error of the event:
    its arguments', then the first a lambda met, element by element as the local engine calls it (every element
    for ``transform`` and ``filter``; up to the deciding one for ``exists`` and ``forall``; the fold up to its
    first error for ``aggregate``, then its finish). Unguarded, an error in a lambda body (``transform(xs, e -> 10
    / e)`` over a 0, ``'oops'`` cast to a number) failed the whole query on Spark where it fails the event locally
    (issue 39). The error is computed beside the value, by the same call over the same array."""
    errors = []
    for i, arg in enumerate(args):
        if not isinstance(arg, exp.Lambda):
            args[i], error = _guard(arg)
            errors.append(error or "")
    lambda_errors = []
    for arg in args:
        if isinstance(arg, exp.Lambda):
            body, error = _guard(arg.this)
            arg.set("this", body)
            lambda_errors.append(error)
    if isinstance(node, exp.Transform):
        node.set("this", args[0])
        node.set("expression", args[1])
    else:
        node.set("expressions", args)
    if any(lambda_errors):
        errors.append(_lambda_error(name, args, lambda_errors))
    return node, first_error(errors)


def _lambda_error(name: str, args: list[exp.Expression], lambda_errors: list[str | None]) -> str:
    """SQL of the first error a higher-order call's lambdas meet (``_guard_higher_order``), NULL for none."""
    array = sql_of(args[0])
    no_error = "CAST(NULL AS STRING)"
    if name in _ELEMENT_PARAM:  # the fold over (accumulator, error) as the local engine folds, then the finish
        start, merge = args[1], args[2]
        acc, element = (p.name for p in merge.expressions)
        merge_error = lambda_errors[0] or no_error
        folded = (f"element_at(transform(array(_ew_s_.acc), {acc} -> named_struct('acc', {sql_of(merge.this)}, "
                  f"'err', {merge_error})), 1)")
        finish_error = "_ew_s_.err"
        if len(args) > 3 and lambda_errors[1]:
            [done] = (p.name for p in args[3].expressions)
            finish_error = (f"coalesce(_ew_s_.err, element_at(transform(array(_ew_s_.acc), {done} -> "
                            f"{lambda_errors[1]}), 1))")
        return (f"aggregate({array}, named_struct('acc', {sql_of(start)}, 'err', {no_error}), (_ew_s_, {element}) "
                f"-> CASE WHEN _ew_s_.err IS NOT NULL THEN _ew_s_ ELSE {folded} END, _ew_s_ -> {finish_error})")
    function = args[1]
    names = [p.name for p in function.expressions]
    params = names[0] if len(names) == 1 else f"({', '.join(names)})"  # Spark parses no `(e) -> ...`
    if name in _QUANTIFIERS and len(function.expressions) == 1:
        decided = f"coalesce(({sql_of(function.this)}) = {_QUANTIFIERS[name]}, false)"
        return (f"aggregate({array}, named_struct('done', false, 'err', {no_error}), (_ew_s_, {names[0]}) -> "
                f"CASE WHEN _ew_s_.done OR _ew_s_.err IS NOT NULL THEN _ew_s_ ELSE named_struct('done', {decided}, "
                f"'err', {lambda_errors[0]}) END, _ew_s_ -> _ew_s_.err)")
    return (f"aggregate(transform({array}, {params} -> {lambda_errors[0]}), {no_error}, (_ew_a_, _ew_b_) -> "
            "coalesce(_ew_a_, _ew_b_))")


def _array_access(node: exp.Expression) -> tuple[str, str, str] | None:
    """``(array SQL, index SQL, form)`` where ``node`` reads an array element by index: ``element_at(xs, i)`` or
    ``xs[i]`` with an index that is not a string literal (which reads a map, as the field reads decide); None for
    anything else."""
    if isinstance(node, exp.Bracket) and len(node.expressions) == 1:
        target, index, form = node.this, node.expressions[0], "[]"
    elif isinstance(node, exp.Anonymous) and str(node.this).lower() == "element_at" and len(node.expressions) == 2:
        (target, index), form = node.expressions, "element_at"
    else:
        return None
    if isinstance(index, exp.Literal) and index.is_string:
        return None
    return sql_of(target), sql_of(index), form


def _guard_array_access(array: str, index: str, form: str, errors: list[str]) -> tuple[exp.Expression, str | None]:
    """An index out of range fails the event, as locally (``INVALID_ARRAY_INDEX_IN_ELEMENT_AT`` and
    ``INVALID_INDEX_OF_ZERO`` for ``element_at``; ``INVALID_ARRAY_INDEX`` for ``[]``): under ANSI Spark raises it,
    which failed the whole query (issue 39). The value is read with ``try_element_at``/``get``, NULL out of range.
    A map read this way (its type only known to Spark) keeps Spark's own rule: a missing key is NULL."""
    shared = _Shared(array, index)
    a, i = shared.names
    if form == "element_at":
        out_of_range = (f"WHEN ({i}) = 0 THEN 'INVALID_INDEX_OF_ZERO' "
                        f"WHEN abs({i}) > size({a}) THEN 'INVALID_ARRAY_INDEX_IN_ELEMENT_AT'")
        safe = f"CASE WHEN ({i}) = 0 THEN NULL ELSE try_element_at({a}, {i}) END"
    else:
        out_of_range = f"WHEN ({i}) < 0 OR ({i}) >= size({a}) THEN 'INVALID_ARRAY_INDEX'"
        safe = f"get({a}, {i})"
    errors.append(shared.wrap(f"CASE WHEN typeof({a}) NOT LIKE 'array%' OR ({a}) IS NULL OR ({i}) IS NULL "
                              f"THEN NULL {out_of_range} END"))
    return parsed(shared.wrap(safe)), first_error(errors)


MATH_ON_DOUBLES = frozenset((
    "abs", "acos", "asin", "atan", "atan2", "cbrt", "ceil", "ceiling", "cos", "degrees", "exp", "floor", "hypot",
    "ln", "log", "log10", "log2", "pow", "power", "radians", "round", "bround", "sign", "signum", "sin", "sqrt",
    "tan", "negative", "positive"))
"""Math functions Spark applies to text by casting it to DOUBLE itself (outside any try_ form)."""


def _function_name(node: exp.Func) -> str:
    return str(node.this).lower() if isinstance(node, exp.Anonymous) else node.sql_name().lower()


def _text_operand_error(text_operand: bool, text: str, other: str) -> str:
    """SQL: ``CAST_INVALID_INPUT`` where the text operand ``text`` of arithmetic does not cast the way Spark casts
    it (BIGINT against an integer, DOUBLE otherwise); empty when the operand is not text by its form."""
    if not text_operand:
        return ""
    return error_if(f"({text}) IS NOT NULL AND {_text_beside(text, other, 'try_cast')} IS NULL",
                     "CAST_INVALID_INPUT")


def _operand_text_error(operand: exp.Expression, text: str, other: str) -> str:
    """``_text_operand_error`` of an arithmetic operand that is text by its form, or that may be text: a lambda's
    variable (an element of an array of text, an accumulator), whose type only Spark knows, tested by ``typeof``
    (its try form gives NULL for text that does not cast, which is the text's error, not an overflow)."""
    if is_text(operand):
        return _text_operand_error(True, text, other)
    if isinstance(operand, exp.Identifier | exp.Column) and operand.meta.get(READ_AT) is None:
        return error_if(f"typeof({text}) = 'string' AND ({text}) IS NOT NULL AND "
                        f"{_text_beside(text, other, 'try_cast')} IS NULL", "CAST_INVALID_INPUT")
    return ""


def _text_beside(text: str, other: str, cast_function: str) -> str:
    """SQL: text next to the number ``other`` in arithmetic, cast as Spark casts it: to BIGINT where ``other`` is
    an integer, to DOUBLE otherwise (``cast_function``: ``CAST`` or ``try_cast``)."""
    return (f"CASE WHEN typeof({other}) IN {_INTEGRAL} THEN {cast_function}({text} AS BIGINT) "
            f"ELSE {cast_function}({text} AS DOUBLE) END")


_OPERATORS: dict[type[exp.Expression], str] = {
    exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=", exp.NullSafeEQ: "<=>"}
_INTEGRAL = "('tinyint', 'smallint', 'int', 'bigint')"


def _guard_interval_arithmetic(node: exp.Expression, errors: list[str]) -> tuple[exp.Expression, str | None]:
    """``x ± INTERVAL``: text is cast to a TIMESTAMP outside any try form, so text that is not a timestamp would
    fail the micro-batch; guarded, the cast is a ``try_cast``, the event gets ``CAST_INVALID_INPUT`` (as locally),
    and the sum is text again, as Spark gives it (``intervals.py``)."""
    for key in ("this", "expression"):
        operand = node.args[key]
        if is_text(operand):
            text = sql_of(operand)
            errors.append(error_if(f"({text}) IS NOT NULL AND try_cast({text} AS TIMESTAMP) IS NULL",
                                   "CAST_INVALID_INPUT"))
            node.set(key, parsed(f"try_cast({text} AS TIMESTAMP)"))
            return parsed(f"CAST({sql_of(node)} AS STRING)"), first_error(errors)
    return node, first_error(errors)


def _guard_text_comparison(node: exp.Expression) -> tuple[exp.Expression, str]:
    """A comparison of text with a number: Spark's analyser casts the text (to BIGINT against an integer, to DOUBLE
    against a fraction) outside any try_ form, so text that does not cast would fail the micro-batch. The guarded
    form makes that cast a ``try_cast`` and reports ``CAST_INVALID_INPUT`` for the event, as the local engine does.
    Which case applies is decided by the operands' static types (``typeof``), so only the taken branch runs. Spark
    analyses every branch, though, so a side the text alone shows is not a number (a TIMESTAMP, a DATE) never gets
    the number's branches: ``to_timestamp(ts) < timestamp'...'`` failed the query with BINARY_OP_DIFF_TYPES
    (BIGINT beside TIMESTAMP in a branch never taken)."""
    if {static_type(node.this), static_type(node.expression)} & {TIMESTAMP, DATE, BOOLEAN, ARRAY, MAP}:
        return node, ""
    shared = _Shared(sql_of(node.this), sql_of(node.expression))
    a, b = shared.names
    op = _OPERATORS[type(node)]

    def fraction(x: str) -> str:
        return f"(typeof({x}) IN ('float', 'double') OR typeof({x}) LIKE 'decimal%')"

    cases = [  # (text side, number side, condition on the number side's type, cast target)
        (a, b, f"typeof({b}) IN {_INTEGRAL}", "BIGINT"), (a, b, fraction(b), "DOUBLE"),
        (b, a, f"typeof({a}) IN {_INTEGRAL}", "BIGINT"), (b, a, fraction(a), "DOUBLE"),
    ]
    value = ["CASE"]
    error = ["CASE"]
    for text, number, number_type, target in cases:
        when = f"typeof({text}) = 'string' AND {number_type}"
        cast_text = f"try_cast({text} AS {target})"
        compared = f"{cast_text} {op} {b}" if text == a else f"{a} {op} {cast_text}"
        value.append(f"WHEN {when} THEN {compared}")
        # a comparison with NULL is NULL before any cast, on both engines (found by the fuzzer's soak once an IN
        # list of mixed kinds became comparisons: `x = 'oops'` with x NULL failed the event on Spark only)
        error.append(f"WHEN {when} AND ({text}) IS NOT NULL AND ({number}) IS NOT NULL AND {cast_text} IS NULL "
                     "THEN 'CAST_INVALID_INPUT'")
    value.append(f"ELSE {a} {op} {b} END")
    error.append("END")
    return parsed(shared.wrap(" ".join(value))), shared.wrap(" ".join(error))


def _guard_case(node: exp.Case) -> tuple[exp.Expression, str | None]:
    """A CASE (an IF too): an error of a branch's value counts where that branch is taken; text among values
    beside number literals is cast to their type, as Spark gives the CASE one type (``text_as``)."""
    errors: list[str] = []
    taken: list[str] = []  # conditions of earlier branches: a later branch runs only when none was TRUE
    target = one_type(call_values(node))
    if node.this is not None:
        subject, e = _guard(node.this)
        node.set("this", subject)
        errors.append(e or "")
    ifs = []
    for branch in node.args.get("ifs") or []:
        cond, ec = _guard(branch.this)
        value, ev = text_as(target, *_guard(branch.args["true"]))
        branch.set("this", cond)
        branch.set("true", value)
        ifs.append(branch)
        not_before = " AND ".join(f"NOT coalesce({t}, false)" for t in taken) or "true"
        if ec:
            errors.append(f"CASE WHEN {not_before} THEN {ec} END")
        cond_sql = sql_of(cond) if node.this is None else f"({sql_of(node.this)}) = ({sql_of(cond)})"
        if ev:
            errors.append(f"CASE WHEN {not_before} AND coalesce({cond_sql}, false) THEN {ev} END")
        taken.append(cond_sql)
    node.set("ifs", ifs)
    default = node.args.get("default")
    if default is not None:
        d, ed = text_as(target, *_guard(default))
        node.set("default", d)
        if ed:
            not_before = " AND ".join(f"NOT coalesce({t}, false)" for t in taken) or "true"
            errors.append(f"CASE WHEN {not_before} THEN {ed} END")
    return node, first_error(errors)


def _guard_connective(node: exp.And | exp.Or) -> tuple[exp.Expression, str | None]:
    """``a AND b`` does not evaluate ``b`` where ``a`` is FALSE (``OR``: TRUE), on Spark as on the local engine, so
    an error of ``b`` there is no error of the event."""
    left, left_error = _guard(node.this)
    right, right_error = _guard(node.expression)
    node.set("this", left)
    node.set("expression", right)
    decided = "false" if isinstance(node, exp.And) else "true"
    errors = [left_error or ""]
    if right_error:
        errors.append(f"CASE WHEN NOT coalesce(({sql_of(left)}) = {decided}, false) THEN {right_error} END")
    return node, first_error(errors)


def _guard_array(node: exp.Anonymous) -> tuple[exp.Expression, str | None]:
    """``array(...)``: Spark gives the elements one type, casting text beside numbers to it outside any try form;
    the guarded form casts with try_cast and reports CAST_INVALID_INPUT (``text_as``), an event's error, not the
    query's."""
    target = one_type(node.expressions)
    guarded = [text_as(target, *_guard(element)) for element in node.expressions]
    node.set("expressions", [g for g, _ in guarded])
    return node, first_error([e or "" for _, e in guarded])


def _guard_coalesce(node: exp.Anonymous) -> tuple[exp.Expression, str | None]:
    """``coalesce``/``nvl``/``ifnull``: an argument's error counts where the arguments before it are NULL. Text
    beside number literals takes their type (Spark's one type for the call: BIGINT beside integers, DOUBLE with a
    fraction), cast outside any try form on Spark: the guarded form casts with try_cast and reports the error."""
    errors: list[str] = []
    args = []
    earlier: list[str] = []
    target = one_type(node.expressions)
    for arg in node.expressions:
        g, e = text_as(target, *_guard(arg))
        args.append(g)
        if e:
            null_before = " AND ".join(f"({x}) IS NULL" for x in earlier) or "true"
            errors.append(f"CASE WHEN {null_before} THEN {e} END")
        earlier.append(sql_of(g))
    node.set("expressions", args)
    return node, first_error(errors)


def to_guarded_sql(text: str, types: FieldTypes, *, want: str | None = None) -> tuple[str, str | None]:
    """``(value, error)``: the expression in a form that gives NULL where it would fail, and SQL giving the
    Spark error class of an event's first failure (NULL when there is none; None when nothing can fail)."""
    with _deep_recursion():
        safe, error = _guard(_Compiler(types).compile(parse(text), want))
        return sql_of(safe), error


@contextmanager
def _deep_recursion(limit: int = 20_000) -> Iterator[None]:
    """sqlglot parses and writes SQL by recursion, a few dozen Python frames per level of nesting, and a guarded
    expression nests deeper than its text (each guard wraps its operands): Python's default limit of 1,000 frames
    would refuse an expression of half a dozen nested conditionals. Python frames live on the heap (3.11+)."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(before)
