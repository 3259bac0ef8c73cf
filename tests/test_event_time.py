"""The direct event-time path must agree with evaluating the expression, value for value and error for error."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from edgewise.engine.event_time import event_time_function
from edgewise.errors import EvalError
from edgewise.expr.compiler import compile_expression

SHAPES = ["timestamp_millis(cast(ts AS BIGINT))", "timestamp_seconds(cast(ts AS BIGINT))",
          "timestamp_micros(cast(ts AS BIGINT))", "timestamp_millis(ts)", "timestamp_seconds(ts)"]

values = st.one_of(
    st.integers(min_value=-(10**19), max_value=10**19),
    st.integers(min_value=0, max_value=10**15).map(str),
    st.sampled_from(["", " 12", "+12", "-5", "1_000", "١٢", "1.5", "12a", "99999999999999999999", None, True, 1.5,
                     "1,2", "12,", ",", "0" * 18]),
)


def _general(text: str, payload: dict[str, Any]) -> Any:
    fn = event_time_function(compile_expression(text))
    try:
        return fn.one(payload)
    except EvalError as exc:
        return ("error", exc.error_class)


@settings(max_examples=300)
@given(st.sampled_from(SHAPES), st.lists(values, min_size=1, max_size=5))
# found by this test (2026-11-26): a second before the year 1 took the direct path, where it is an overflow
@example("timestamp_seconds(cast(ts AS BIGINT))", [-62135596801])
@example("timestamp_millis(ts)", [-62135596800000, -62135596800001])
@example("timestamp_micros(cast(ts AS BIGINT))", [-62135596800000000])
# the check of digit texts by their commas: a comma inside a value, values of the first one's width or not
@example("timestamp_millis(cast(ts AS BIGINT))", ["12", "1,", "2"])
@example("timestamp_millis(cast(ts AS BIGINT))", ["12", "1,"])
@example("timestamp_millis(cast(ts AS BIGINT))", ["1", "22", "333"])
def test_batch_path_equals_the_general_path(text: str, batch: list[Any]) -> None:
    fn = event_time_function(compile_expression(text))
    assert fn.shape is not None
    payloads = [{"ts": v} for v in batch]
    direct = fn.many(payloads)
    if direct is not None:
        assert direct == [_general(text, p) for p in payloads]


def test_the_direct_path_is_taken_for_epoch_millisecond_strings() -> None:
    fn = event_time_function(compile_expression("timestamp_millis(cast(ts AS BIGINT))"))
    assert fn.many([{"ts": "1700000000000"}, {"ts": "1700000000001"}]) == [1_700_000_000_000_000,
                                                                          1_700_000_000_001_000]
    assert fn.many([{"ts": "1700000000000"}, {"ts": " 1"}]) is None  # one odd value: the general path for all
    assert event_time_function(compile_expression("to_timestamp(ts)")).shape is None


@settings(max_examples=200)
@given(st.lists(st.one_of(st.sampled_from(["view", "click", "1", ""]), st.none(), st.integers(-2, 2),
                          st.floats(allow_nan=False)), min_size=1, max_size=6),
       st.sampled_from(["kind = 'view'", "kind <> 'view'", "kind = '1'"]))
def test_a_filter_batch_mask_equals_evaluating_each_event(kinds: list[Any], condition: str) -> None:
    expr = compile_expression(condition)
    mask = expr.evaluate.mask  # type: ignore[attr-defined]
    payloads = [{"kind": k} for k in kinds]
    expected = []
    for p in payloads:
        try:
            expected.append(expr.evaluate(p) is True)
        except EvalError:
            expected = None  # type: ignore[assignment]
            break
    if expected is None:
        try:
            mask(payloads)
        except EvalError:
            return
        raise AssertionError("the mask must fail where evaluation fails")
    assert mask(payloads) == expected
