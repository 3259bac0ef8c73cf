"""The guarded Spark SQL of an expression (``engine/spark/sql.py``: each failing operation in its NULL-giving form
plus an error column) grows slowly with nesting. Each guard used to repeat its operands' SQL (a comparison eight
times), so nested conditionals grew it about tenfold per level, and the fuzzer's soak ran Spark's driver out of
heap planning one step. Sizes, not timings; the Spark results of such expressions are checked by the fuzzer
(``tests/spark/test_pipeline_fuzz.py``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from edgewise.engine.spark.fields import FieldTypes
from edgewise.engine.spark.sql import to_guarded_sql


def _conditionals(depth: int) -> str:
    e = "x"
    for i in range(depth):
        e = (f"if({e} > {i}, y.z + 1, s * 2)" if i % 2 == 0 else
             f"CASE WHEN {e} < 3 THEN x * 1.5 WHEN s = '1' THEN 2 ELSE 0 END")
    return e


def _arithmetic_in_conditions(depth: int) -> str:
    e = "x"
    for i in range(depth):
        e = f"if(({e} + s) * 2 > {i}, x, pmod(x, 3))"
    return e


def _mixed_calls(depth: int) -> str:
    """The forms the compiler rewrites by repeating an operand (``engine/spark/mixed_types.py``): nullif, IN lists
    of mixed kinds, uses of calls mixing text with numbers (moved into their values)."""
    e = "x"
    for i in range(depth):
        e = (f"nullif({e}, {i})" if i % 3 == 0 else f"if({e} IN ('a', {i}), s, y.z)" if i % 3 == 1 else
             f"round(coalesce(s, {e}), 1)")
    return e


@pytest.mark.parametrize("nested", [_conditionals, _arithmetic_in_conditions])
def test_guarded_sql_grows_slowly_with_nesting(nested: Callable[[int], str]) -> None:
    sizes = []
    for depth in (1, 6):
        value, error = to_guarded_sql(nested(depth), FieldTypes())
        sizes.append((len(value), len(error or "")))
    (value_1, error_1), (value_6, error_6) = sizes
    # five more levels: at most about 2.5-fold per level, where it was about tenfold (10^5). Not linear yet:
    # arithmetic over a field of unknown type casts its text by the other operand's type, `typeof(<other>)`,
    # which writes the other operand (the nested expression) a second time
    assert value_6 < 100 * value_1 and error_6 < 100 * error_1, sizes


def test_rewrites_that_repeat_an_operand_stop_repeating_long_ones() -> None:
    """Nine levels of `_mixed_calls`: with the caps (``mixed_types.REPEATED_AT_MOST``, ``LIFTED_REPEATS_AT_MOST``)
    the value grows about 7-fold and the error column 28-fold; each rewrite repeating its operand whatever its
    length grew them 63- and 315-fold."""
    (value_1, error_1), (value_9, error_9) = [
        (len(v), len(e or "")) for v, e in (to_guarded_sql(_mixed_calls(d), FieldTypes()) for d in (1, 9))]
    assert value_9 < 15 * value_1 and error_9 < 60 * error_1, (value_1, error_1, value_9, error_9)
