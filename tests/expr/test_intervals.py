"""INTERVAL arithmetic on the local engine (``expr/intervals.py``): what Spark refuses is refused at load, and what
the values are is checked against real Spark by tests/data/function_cases.txt (the INTERVAL section)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from edgewise.errors import ConfigError, EvalError
from edgewise.expr.compiler import compile_expression


def value(text: str, **fields: object) -> object:
    return compile_expression(text).evaluate(fields)


def test_a_field_of_timestamp_text_moves_and_stays_text() -> None:
    assert value("ts + INTERVAL 2 DAYS", ts="2024-01-31T10:00:00Z") == "2024-02-02 10:00:00"
    assert value("to_timestamp(ts) - INTERVAL '30' MINUTE", ts="2024-01-31T10:00:00Z") == datetime(
        2024, 1, 31, 9, 30, tzinfo=UTC)
    assert value("to_date(ts) + INTERVAL '1' MONTH", ts="2024-01-31") == date(2024, 2, 29)
    assert value("ts + INTERVAL 2 DAYS", ts=None) is None
    assert value("missing + INTERVAL 2 DAYS") is None


def test_text_that_is_not_a_timestamp_fails_as_its_cast_fails() -> None:
    with pytest.raises(EvalError) as failed:
        value("ts + INTERVAL 2 DAYS", ts="soon")
    assert failed.value.error_class == "CAST_INVALID_INPUT"
    with pytest.raises(EvalError) as mismatch:
        value("n + INTERVAL 2 DAYS", n=3)
    assert mismatch.value.error_class == "DATATYPE_MISMATCH"


def test_a_window_of_time_is_a_condition() -> None:
    keep = compile_expression("to_timestamp(ts) + INTERVAL 1 HOUR > to_timestamp(deadline)").evaluate
    assert keep({"ts": "2024-01-31T10:00:00Z", "deadline": "2024-01-31T10:30:00Z"}) is True
    assert keep({"ts": "2024-01-31T10:00:00Z", "deadline": "2024-01-31T11:30:00Z"}) is False


@pytest.mark.parametrize(("text", "says"), [
    ("INTERVAL '2' DAY", "not a value of its own"),
    ("INTERVAL 2 DAYS + INTERVAL 3 HOURS", "not a value of its own"),
    ("1 + INTERVAL '2' DAY", "not a number"),
    ("ts + INTERVAL '2.5' DAY", "only seconds and milliseconds take a fraction"),
    ("INTERVAL '2' DAY - ts", "minus a timestamp is not defined"),
    ("ts + INTERVAL 1 MONTH 2 DAYS", "cannot mix years or months with days"),
    ("ts + INTERVAL '1-2' YEAR TO MONTH", "one unit here"),
    ("ts + INTERVAL '2' FORTNIGHT", "INTERVAL units are"),
])
def test_what_spark_refuses_is_refused_at_load(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        compile_expression(text)
