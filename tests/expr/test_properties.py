"""Property-based tests: random expressions over random events never crash the process; they yield a value or
a typed evaluation error."""

from __future__ import annotations

import contextlib
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgewise.errors import ConfigError, EvalError
from edgewise.expr.compiler import compile_expression
from edgewise.expr.functions import FUNCTIONS

FIELDS = ["a", "b", "c", "s", "xs", "obj.x"]
SCALAR_FUNCTIONS = sorted(n for n, s in FUNCTIONS.items() if not s.lambda_args)

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                                    st.dictionaries(st.text(max_size=3), inner,
                                                                                    max_size=3)), max_leaves=8)
events = st.fixed_dictionaries({"a": json_values, "b": json_values, "c": json_values, "s": st.text(max_size=10),
                                "xs": st.lists(json_scalars, max_size=5),
                                "obj": st.dictionaries(st.sampled_from(["x", "y"]), json_values, max_size=2)})

literals = st.one_of(st.integers(-1000, 1000).map(str), st.sampled_from(["NULL", "TRUE", "FALSE", "1.5", "0",
                                                                         "'x'", "'2023-10-29 13:24:10'", "'ä'"]))


def expressions(fields: list[str] = FIELDS, literal_texts: st.SearchStrategy[str] = literals,
                functions: list[str] = SCALAR_FUNCTIONS, element_of: str = "a") -> st.SearchStrategy[str]:
    """Random expression text: fields and literals combined by operators, ``functions``, higher-order functions
    over ``xs`` (the lambda variable replaces the first ``element_of``), CASE and try_cast."""
    leaves = st.one_of(st.sampled_from(fields), literal_texts)

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        binary = st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%", "div", "=", "<>", "<", ">=", "AND",
                                                   "OR", "<=>", "||"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})")
        unary = st.tuples(st.sampled_from(["NOT ", "-"]), inner).map(lambda t: f"({t[0]}{t[1]})")
        call = st.sampled_from(functions).flatmap(
            lambda name: st.lists(inner, min_size=FUNCTIONS[name].min_args,
                                  max_size=min(FUNCTIONS[name].max_args or 3, FUNCTIONS[name].min_args + 1))
            .map(lambda args: f"{name}({', '.join(args)})"))
        hof = st.tuples(st.sampled_from(["transform", "filter", "exists", "forall"]), inner).map(
            lambda t: f"{t[0]}(xs, x -> {t[1].replace(element_of, 'x', 1)})")
        cases = st.tuples(inner, inner, inner).map(lambda t: f"CASE WHEN {t[0]} THEN {t[1]} ELSE {t[2]} END")
        return st.one_of(binary, unary, call, hof, cases,
                         st.tuples(inner, st.sampled_from(["INT", "BIGINT", "DOUBLE", "STRING", "BOOLEAN",
                                                           "TIMESTAMP"]))
                         .map(lambda t: f"try_cast({t[0]} AS {t[1]})"))

    return st.recursive(leaves, extend, max_leaves=6)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=expressions(), event=events)
def test_random_expressions_never_crash(text: str, event: dict[str, Any]) -> None:
    try:
        expr = compile_expression(text)
    except ConfigError:
        return  # e.g. a lambda in a place that takes none: reported at load time, which is fine
    with contextlib.suppress(EvalError):  # a typed, per-event failure: what the contract promises
        expr(event)
