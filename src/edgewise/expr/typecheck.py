"""Static types of expressions, where the text alone decides them: checked at load time.

A field's type is only known when data arrives, so most expressions type-check at run time (as Spark does when
a column has no declared type). What the text alone decides is checked when the file is loaded, so a mistake
is a config error at its line instead of a pipeline that silently drops every event:

* a condition (``filter``/``gate`` ``where``, every ``when``, a ``CASE WHEN`` or ``if`` condition, an operand
  of ``AND``/``OR``/``NOT``) must be BOOLEAN: ``temp + 1`` or ``'yes'`` is an error, ``temp > 1`` or a bare
  field (its type unknown until run time) is fine;
* arithmetic with a string literal that is not a number (``speed + 'fast'``) is an error.

>>> static_type(parse_node("temp + 1")), static_type(parse_node("temp > 1")), static_type(parse_node("temp")) is None
('NUMERIC', 'BOOLEAN', True)
>>> check_condition("temp + 1")
Traceback (most recent call last):
...
edgewise.errors.ConfigError: a condition must be BOOLEAN, but 'temp + 1' is NUMERIC (compare it, e.g. 'temp + 1 > 0')
"""

from __future__ import annotations

from typing import Any

from edgewise.errors import ConfigError
from edgewise.expr import values as V
from edgewise.expr.intervals import beside_interval
from edgewise.expr.tree import Node, enum_name, isa
from edgewise.expr.tree_cache import parse_node

BOOLEAN, NUMERIC, STRING, TIMESTAMP, DATE, ARRAY, MAP = "BOOLEAN", "NUMERIC", "STRING", "TIMESTAMP", "DATE", \
    "ARRAY", "MAP"

_BOOLEAN_NODES = ("And", "Or", "Not", "EQ", "NEQ", "GT", "GTE", "LT", "LTE", "NullSafeEQ", "Is", "In", "Like", "ILike",
                  "RegexpLike", "Between", "Boolean", "Exists")
_NUMERIC_NODES = ("Add", "Sub", "Mul", "Div", "IntDiv", "Mod", "Neg", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
                  "BitwiseNot", "BitwiseLeftShift", "BitwiseRightShift")
_ARITHMETIC = ("Add", "Sub", "Mul", "Div", "IntDiv", "Mod")

_FUNCTION_TYPES = {
    BOOLEAN: ("array_contains", "startswith", "endswith", "contains", "isnull", "isnotnull", "isnan", "exists",
              "forall", "rlike", "like", "ilike", "regexp_like", "regexp", "arrays_overlap", "equal_null",
              "is_variant_null"),
    NUMERIC: ("abs", "round", "bround", "floor", "ceil", "ceiling", "sqrt", "cbrt", "pow", "power", "exp", "ln",
              "log", "log10", "log2", "length", "char_length", "size", "cardinality", "instr", "locate",
              "unix_timestamp", "unix_seconds", "unix_millis", "unix_micros", "year", "month", "day", "hour",
              "minute", "second", "dayofweek", "dayofmonth", "dayofyear", "weekofyear", "quarter", "datediff",
              "greatest_number", "sign", "signum", "mod", "pmod", "try_add", "try_subtract", "try_multiply",
              "try_divide", "hash", "xxhash64", "crc32", "array_position", "ascii", "bit_length", "octet_length",
              "negative", "positive", "try_mod", "pi", "e", "asin", "acos", "atan2", "hypot", "array_size",
              "character_length", "len", "position", "str_position", "to_unix_timestamp"),
    STRING: ("concat", "concat_ws", "lower", "upper", "lcase", "ucase", "substring", "substr", "trim", "ltrim",
             "rtrim", "lpad", "rpad", "replace", "regexp_replace", "regexp_extract", "initcap", "reverse",
             "translate", "md5", "sha1", "sha2", "to_json", "date_format", "format_string", "repeat", "left",
             "right", "split_part", "geo_cell", "btrim", "base64", "char", "chr", "sha", "string", "from_unixtime",
             "array_join"),
    TIMESTAMP: ("to_timestamp", "timestamp_seconds", "timestamp_millis", "timestamp_micros", "from_unixtime_ts",
                "date_trunc", "make_timestamp", "try_to_timestamp"),
    DATE: ("to_date", "date_add", "date_sub"),
    ARRAY: ("array", "split", "transform", "filter", "sequence", "array_distinct", "array_union", "array_except",
            "array_intersect", "sort_array", "array_sort", "slice", "flatten", "array_remove", "map_keys",
             "map_values", "array_append", "array_prepend", "array_compact", "arrays_zip", "regexp_extract_all"),
    MAP: ("map", "named_struct", "struct", "from_json", "map_from_arrays", "map_from_entries"),
}
_FUNCTION_TYPE = {name: kind for kind, names in _FUNCTION_TYPES.items() for name in names}
_CAST_TYPES = {"BOOLEAN": BOOLEAN, "STRING": STRING, "VARCHAR": STRING, "CHAR": STRING, "TEXT": STRING,
               "TIMESTAMP": TIMESTAMP, "DATE": DATE, "ARRAY": ARRAY, "MAP": MAP, "STRUCT": MAP}
_NUMERIC_CASTS = ("INT", "BIGINT", "SMALLINT", "TINYINT", "DOUBLE", "FLOAT", "DECIMAL", "LONG", "SHORT", "BYTE")


def static_type(node: Any) -> str | None:
    """The type class the text alone gives ``node`` (``BOOLEAN``, ``NUMERIC``, ``STRING``, ...), or ``None`` where
    it depends on the data (a field, ``coalesce`` of fields, a function not listed here)."""
    if isa(node, "Paren"):
        return static_type(node.this)
    if isa(node, *_BOOLEAN_NODES):
        return BOOLEAN
    if isa(node, "Add", "Sub") and beside_interval(node):
        # a TIMESTAMP or text stays one; a DATE stays one or becomes a TIMESTAMP, by the unit (``intervals.py``)
        kinds = {static_type(operand) for operand in (node.this, node.expression)}
        return next((kind for kind in (TIMESTAMP, STRING) if kind in kinds), None)
    if isa(node, *_NUMERIC_NODES):
        return NUMERIC
    if isa(node, "Literal"):
        return STRING if node.is_string else NUMERIC
    if isa(node, "DPipe"):
        return STRING
    if isa(node, "Cast"):
        target = enum_name(node.to.this) if isa(node.to, "DataType") else ""
        if target in _NUMERIC_CASTS:
            return NUMERIC
        return _CAST_TYPES.get(target)
    if isa(node, "Case", "If"):
        branches = [i.args.get("true") for i in node.args.get("ifs", [])] if isa(node, "Case") \
            else [node.args.get("true")]
        branches.append(node.args.get("default") or node.args.get("false"))
        kinds = {static_type(b) for b in branches if b is not None and not isa(b, "Null")}
        return kinds.pop() if len(kinds) == 1 else None
    if isa(node, "Anonymous"):
        return _FUNCTION_TYPE.get(str(node.this).lower())
    if isa(node, "Func") and not isa(node, "Anonymous"):
        return _FUNCTION_TYPE.get(node.sql_name().lower())
    return None


def check_types(tree: Node, text: str) -> None:
    """Every condition inside ``tree`` is BOOLEAN where the text decides, and no arithmetic has a string literal
    that is not a number. Raises ``ConfigError``."""
    # ``CASE subject WHEN value THEN ...`` compares values: its WHENs are not conditions
    compared = {id(branch) for case in tree.find_all("Case") if case.this is not None
                for branch in case.args.get("ifs", [])}
    for node in tree.walk():
        if isa(node, "If") and id(node) in compared:
            continue
        if isa(node, "If", "And", "Or", "Not"):
            slots = [node.this] if isa(node, "If", "Not") else [node.this, node.expression]
            for child in slots:
                _require_boolean(child, text, "a condition")
        if isa(node, *_ARITHMETIC) and not beside_interval(node):
            for operand in (node.this, node.expression):
                if isa(operand, "Literal") and operand.is_string and not _numeric_text(operand.this):
                    sql = node.sql(dialect="spark")
                    where = f"{text!r}" if sql == text else f"{sql!r} in {text!r}"
                    raise ConfigError(f"{where}: the string {operand.sql()} is not a number, so this fails for "
                                      "every event")


def _numeric_text(text: str) -> bool:
    try:
        V.to_double(text)
    except Exception:  # noqa: BLE001  # EvalError: not a number
        return False
    return True


def _require_boolean(node: Any, text: str, what: str) -> None:
    kind = static_type(node)
    if kind is not None and kind != BOOLEAN:
        sql = node.sql(dialect="spark")
        hint = f" (compare it, e.g. '{sql} > 0')" if kind == NUMERIC else ""
        where = f"{sql!r}" if sql == text else f"{sql!r} in {text!r}"
        raise ConfigError(f"{what} must be BOOLEAN, but {where} is {kind}{hint}")


def check_condition(text: str) -> None:
    """``text`` parses, type-checks, and is BOOLEAN where the text decides. Raises ``ConfigError``."""
    tree = parse_node(text)
    _require_boolean(tree, text, "a condition")
    check_types(tree, text)
