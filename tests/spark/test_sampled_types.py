"""Field types from a bounded sample of the input (issue 17): a new job types its input fields from its first
``SAMPLE_ROWS`` records per source, never from a pass over all of it; a later value that does not fit the type the
sample gave fails the job with the field, the value and the `schema:` to declare, instead of a result that differs
from the local engine's (a fraction in a field typed BIGINT was truncated, a number in a field typed STRING was
compared as text)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from edgewise.engine.spark import job as spark_job
from edgewise.engine.spark.job import SparkJobFailed
from tests.spark.test_messy_input import SPOOL, _local, _spark
from tests.spark.test_sources_and_sinks import _segment

SAMPLE = 4


@pytest.fixture(autouse=True)
def small_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spark_job, "SAMPLE_ROWS", SAMPLE)


def _spool(base: Path, sample: list[dict[str, Any]], later: list[dict[str, Any]]) -> None:
    """A segment of ``SAMPLE`` events, then one of ``later`` ones. Spark reads the largest files first: the
    first segment's events are padded so that it is the sample."""
    assert len(sample) == SAMPLE
    (base / "in").mkdir()
    _segment(base / "in", 1, [json.dumps({**e, "pad": "-" * 64}) for e in sample])
    _segment(base / "in", 2, [json.dumps(e) for e in later])


def _pinned(checkpoint: Path) -> dict[str, Any]:
    return dict(json.loads((checkpoint / spark_job.TYPES_FILE).read_text()))


def test_types_come_from_the_first_records_only(spark: Any, tmp_path: Path) -> None:
    # a field first seen after the sample is not typed from the input (its use decides), and gives what the local
    # engine gives
    _spool(tmp_path, [{"x": i} for i in range(SAMPLE)], [{"x": 9, "late": 2.5}, {"x": 10, "late": 1}])
    text = SPOOL + """
      - annotate: {id: a, set: {y: "late * 2"}}
"""
    assert _spark(spark, text, tmp_path) == _local(text, tmp_path)
    assert _pinned(tmp_path / "ck") == {"x": "bigint", "pad": "string"}


@pytest.mark.parametrize(("later", "field", "expression", "declare"), [
    ({"x": 1.5, "s": "b"}, "x", "x * 2", "x DOUBLE"),
    ({"x": 7, "s": 9}, "s", "s > '10'", "s STRING"),
    ({"x": 7, "o": {"n": 0.5}, "s": "c"}, "o.n", "o.n + 1", "o STRUCT<n: DOUBLE>"),
], ids=["fraction-in-bigint", "number-in-string", "nested-fraction"])
def test_a_later_value_that_does_not_fit_the_sampled_type_fails_the_job(
        spark: Any, tmp_path: Path, later: dict[str, Any], field: str, expression: str, declare: str) -> None:
    _spool(tmp_path, [{"x": i, "s": "a", "o": {"n": i}} for i in range(SAMPLE)], [{"x": 5, "s": "a"}, later])
    text = SPOOL + f"""
      - annotate: {{id: a, set: {{y: "{expression}"}}}}
"""
    with pytest.raises(SparkJobFailed) as failed:
        _spark(spark, text, tmp_path)
    message = str(failed.value)
    assert f"field {field} was typed" in message and "from a sample of the input" in message
    assert f'schema: "{declare}"' in message
    assert "USER_RAISED_EXCEPTION" not in message and "SQLSTATE" not in message
    assert not (tmp_path / "ck" / "p" / "commits" / "0").exists()  # the micro-batch did not commit


def test_declaring_the_type_runs_the_same_checkpoint_to_the_local_engine_s_result(spark: Any,
                                                                                  tmp_path: Path) -> None:
    _spool(tmp_path, [{"x": i} for i in range(SAMPLE)], [{"x": 1.5}])
    text = SPOOL + """
      - annotate: {id: a, set: {y: "x * 2"}}
"""
    with pytest.raises(SparkJobFailed):
        _spark(spark, text, tmp_path)
    declared = text.replace("path: in}", 'path: in, schema: "x DOUBLE"}')
    assert _spark(spark, declared, tmp_path) == _local(declared, tmp_path)


def test_values_that_fit_pass_the_check(spark: Any, tmp_path: Path) -> None:
    # integers of every size, JSON null, a missing field, text in a field typed STRING, an integral decimal
    _spool(tmp_path, [{"x": i, "s": "a"} for i in range(SAMPLE)],
           [{"x": 2**62, "s": "b"}, {"x": None, "s": None}, {"s": "c"}, {"x": -3}, {"x": 1e2}])
    text = SPOOL + """
      - annotate: {id: a, set: {y: "x + 1", t: "concat(s, '!')"}}
"""
    assert _spark(spark, text, tmp_path) == _local(text, tmp_path)
