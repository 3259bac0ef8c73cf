"""``typecheck.static_type`` against what the local engine evaluates: a function's static type class is the class of
the values it gives. The Spark compiler decides from these types whether text meets numbers in a call (a function
missing from the table made ``coalesce(s, negative(-2))`` unguarded, and Spark's own cast failed the query:
tests/fuzz/cases/coalesce-of-text-and-negative-under-a-literal.yaml)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest

from edgewise.expr.compiler import compile_expression
from edgewise.expr.parsing import parse
from edgewise.expr.typecheck import ARRAY, BOOLEAN, NUMERIC, STRING, TIMESTAMP, static_type

CALLS = [
    "negative(2)", "positive(2.5)", "try_mod(7, 3)", "pi()", "e()", "asin(0.5)", "acos(0.5)", "atan2(1, 1)",
    "hypot(3, 4)", "array_size(array(1, 2))", "character_length('ab')", "len('ab')", "position('b', 'ab')",
    "to_unix_timestamp(timestamp_seconds(0))", "btrim(' a ')", "base64('a')", "chr(65)", "char(65)", "sha('a')",
    "string(1)", "from_unixtime(0)", "array_join(array('a', 'b'), ',')", "regexp('abc', 'b')",
    "array_append(array(1), 2)", "array_prepend(array(1), 0)", "array_compact(array(1, NULL))",
    "arrays_zip(array(1), array(2))", "regexp_extract_all('a1b2', '[0-9]', 0)",
    "make_timestamp(2024, 1, 2, 3, 4, 5)", "try_to_timestamp('2024-01-02')",
]


def _class_of(value: Any) -> str:
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, int | float | Decimal):
        return NUMERIC
    if isinstance(value, str):
        return STRING
    if isinstance(value, list):
        return ARRAY
    if isinstance(value, datetime):
        return TIMESTAMP
    raise AssertionError(f"unexpected value {value!r}")


@pytest.mark.parametrize("call", CALLS)
def test_a_functions_static_type_is_the_class_of_its_values(call: str) -> None:
    value = compile_expression(call).evaluate({})
    assert static_type(parse(call)) == _class_of(value)
