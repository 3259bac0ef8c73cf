"""Expression semantics over event fields: missing fields, nesting, three-valued logic, lambdas."""

from __future__ import annotations

from decimal import Decimal

import pytest

from edgewise.errors import ConfigError, EvalError
from edgewise.expr.compiler import compile_expression, truth

EVENT = {"a": {"b": 5, "c": [1, 2, 3]}, "s": "Straße", "n": None, "odd key": {"x": 1}, "t": "2023-10-29T13:24:10Z"}


@pytest.mark.parametrize(("text", "expected"), [
    ("missing", None),
    ("missing.deeper", None),
    ("a.b", 5),
    ("a.c[1]", 2),
    ("element_at(a.c, 1)", 1),
    ("`odd key`.x", 1),
    ("s.nope", None),
    ("a.b > 3 AND n IS NULL", True),
    ("n > 1 OR a.b = 5", True),
    ("n > 1 AND a.b = 5", None),
    ("NOT (n > 1)", None),
    ("transform(a.c, x -> x + a.b)", [6, 7, 8]),
    ("filter(a.c, x -> x > a.b - 4)", [2, 3]),
    ("aggregate(transform(a.c, x -> x * 2), 0, (acc, x) -> acc + x)", 12),
    ("transform(a.c, x -> transform(array(10), y -> x + y))", [[11], [12], [13]]),
    ("a.b div 2", 2),
    ("a.b / 2", 2.5),
    ("a.b * 1.5", Decimal("7.5")),
    ("upper(s)", "STRASSE"),
    ("hour(t)", 13),
    ("a.b IN (1, 5)", True),
    ("CASE WHEN a.b > 4 THEN 'big' END", "big"),
])
def test_values(text: str, expected: object) -> None:
    assert compile_expression(text)(EVENT) == expected


def test_filter_keeps_only_true() -> None:
    assert [truth(v) for v in (True, False, None)] == [True, False, False]


@pytest.mark.parametrize(("text", "error_class"), [
    ("a.b / 0", "DIVIDE_BY_ZERO"),
    ("a.c[5]", "INVALID_ARRAY_INDEX"),
    ("cast(s AS INT)", "CAST_INVALID_INPUT"),
    ("a.b + 9223372036854775807", "ARITHMETIC_OVERFLOW"),
    ("a.c > 1", "DATATYPE_MISMATCH"),
])
def test_runtime_errors_are_typed(text: str, error_class: str) -> None:
    with pytest.raises(EvalError) as info:
        compile_expression(text)(EVENT)
    assert info.value.error_class == error_class


@pytest.mark.parametrize(("text", "message"), [
    ("a >", "does not parse"),
    ("nosuchfn(a)", "unknown function nosuchfn()"),
    ("uper(s)", "did you mean upper()"),
    ("upper(s, s)", "upper() takes 1 argument"),
    ("substring(s)", "takes 2 to 3 arguments"),
    ("current_timestamp()", "reads the wall clock"),
    ("transform(a.c, 1)", "needs a lambda"),
    ("cast(a AS MAP<STRING, INT>)", "not supported"),
    ("", "empty"),
])
def test_bad_expressions_are_config_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compile_expression(text)


def test_unicode_and_lambdas_do_not_leak_between_threads() -> None:
    import threading

    expr = compile_expression("transform(xs, x -> concat(x, tag))")
    errors: list[str] = []

    def worker(tag: str) -> None:
        for _ in range(200):
            got = expr({"xs": ["a", "ö"], "tag": tag})
            if got != [f"a{tag}", f"ö{tag}"]:
                errors.append(str(got))

    threads = [threading.Thread(target=worker, args=(t,)) for t in ("1", "2", "3")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


EVENT_FOR_EDGES = {"x": "1e3", "s": "ÄÖ", "k": None, "y": {"z": -1}, "t": 20}


def test_any_function_over_any_edge_value_fails_the_event_or_gives_a_value() -> None:
    """Whatever a function is given (a field's type is known only when an event comes), it gives a value or an
    EvalError that the step's on_error takes; never a Python exception that stops the run. Every built-in
    function, with each of the fuzzer's edge arguments in every place (found by the fuzzer: `make_timestamp` of an
    array stopped the run with a TypeError)."""
    from edgewise.expr.functions import FUNCTIONS
    from tests.fuzz.generate import EDGE_ARGUMENTS, call_text

    stopped = []
    for name, spec in sorted(FUNCTIONS.items()):
        counts = {spec.min_args, spec.max_args if spec.max_args is not None else spec.min_args + 1}
        for count in counts:
            for edge in EDGE_ARGUMENTS:
                text = call_text(name, count, lambda i, edge=edge: edge)  # called at once, in this iteration
                try:
                    compiled = compile_expression(text)
                except ConfigError:
                    continue
                try:
                    compiled.evaluate(EVENT_FOR_EDGES)
                except EvalError:
                    pass
                except Exception as exc:  # what this test is for
                    stopped.append(f"{text}: {type(exc).__name__}: {exc}")
    assert not stopped, "\n".join(stopped)


def test_a_function_given_a_type_it_cannot_take_fails_the_event(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiler's last line of defence for a function whose code meets a type it does not handle: the event
    fails with DATATYPE_MISMATCH (the step's on_error takes it), the run goes on. For one, two and more arguments,
    and for a function that takes NULLs."""
    from dataclasses import replace

    from edgewise.expr import compiler
    from edgewise.expr.functions import FUNCTIONS

    def plus_one(*values: object) -> object:
        return values[0] + 1  # type: ignore[operator]

    for name in ("upper", "substring", "concat_ws", "coalesce_like"):
        spec = replace(FUNCTIONS["upper"], name=name, impl=plus_one, min_args=1, max_args=None,
                       nulls=name == "coalesce_like")
        monkeypatch.setitem(compiler.FUNCTIONS, name, spec)
    for text, types in (("upper(s)", "STRING"), ("substring(s, 1)", "STRING, BIGINT"),
                        ("concat_ws(s, 1, 2)", "STRING, BIGINT, BIGINT"), ("coalesce_like(s)", "STRING")):
        compiler._compile_cached.cache_clear()
        assert compile_expression(text).evaluate({"s": 1}) == 2
        with pytest.raises(EvalError) as info:
            compile_expression(text).evaluate({"s": "x"})
        assert info.value.error_class == "DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE"
        assert f"({types})" in info.value.message
    compiler._compile_cached.cache_clear()
