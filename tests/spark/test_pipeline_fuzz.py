"""The differential pipeline fuzzer's Spark oracle (issue 13): generated pipelines over messy generated events give
the same results, dead letters and sink records on the local engine and on Spark (``tests/fuzz``). A fixed seed
and a small budget here; ``make fuzz`` soaks it. Pipelines Spark's static typing refuses before reading any data
are a documented difference (docs/spark.md) and count as neither."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.generate import Case, cases
from tests.fuzz.oracles import Rejected, local_vs_spark, split_vs_whole
from tests.fuzz.reference import reference, reference_applies, reference_cases, reference_vs_engines
from tests.fuzz.test_pipelines import budget, kept_cases, known_defects, split_at


@budget(6)
@given(case=cases(spark=True, max_steps=3))
def test_local_engine_and_spark_agree(spark: Any, case: Case) -> None:
    try:
        problems = local_vs_spark(spark, case)
    except Rejected:
        return
    assert not problems, f"{problems}\n{case.pipeline_text()}\n{case.events}"


@budget(4)
@given(case=cases(spark=True, max_steps=3), data=st.data())
def test_an_edge_then_a_spark_hub_equal_the_whole_pipeline(spark: Any, case: Case, data: st.DataObject) -> None:
    """Issue 38 on Spark: the edge's part (local) into a spool link of several segments, the hub's part on Spark
    from it (a segment per micro-batch where the case says so), against the whole pipeline on the local engine."""
    at = data.draw(st.one_of(st.none(), st.integers(0, len(case.steps) - 1)), label="split before step")
    try:
        problems = split_vs_whole(case, at, spark)
    except Rejected:
        return
    assert not problems, f"{problems}\n{case.pipeline_text()}\n{case.events}"


@budget(5)
@given(case=reference_cases())
def test_both_engines_equal_the_reference_interpreter(spark: Any, case: Case) -> None:
    problems = reference_vs_engines(case, spark)
    assert not problems, f"{problems}\n{case.pipeline_text()}\n{case.events}"


SPARK_CASES = [
    pytest.param(*c, id=c[0], marks=[pytest.mark.xfail(strict=True, reason=f"known defect: {known_defects()[c[0]]}")]
                 if c[0] in known_defects() else [])
    for c in kept_cases() if c[2] in ("all", "spark", "reference", "spark-reference", "spark-split")
    # a reference case holds only what both engines promise (reference.reference_applies): its steps at on_error:
    # fail meet no failing event
    and (c[1].for_spark or (c[2] in ("reference", "spark-reference") and reference_applies(c[1])))]


@pytest.mark.parametrize(("name", "case", "oracle"), SPARK_CASES)
def test_kept_failures_stay_fixed_on_spark(spark: Any, name: str, case: Case, oracle: str) -> None:
    if oracle in ("reference", "spark-reference"):  # found by the reference interpreter: both engines against it
        assert not reference_vs_engines(case, spark), name
    elif oracle == "spark-split":
        assert not split_vs_whole(case, split_at(name), spark), name
    else:
        assert not local_vs_spark(spark, case), name


LATE_WINDOW = [{"window": {"id": "w", "on_error": "skip", "key": ["k"], "aggs": {"n": "count()", "s": "sum(x)"},
                           "tumbling": "10s", "watermark": "5s"}}]
LATE_EVENTS = [{"t": 1, "k": "a", "x": 1}, {"t": 2, "k": "a", "x": 2}, {"t": 25, "k": "a", "x": 100},
               {"t": 4, "k": "a", "x": 1000}]


@pytest.mark.parametrize("micro_batches", [True, False])
def test_a_late_event_per_micro_batch_equals_the_reference(spark: Any, micro_batches: bool) -> None:
    """Issue 39's late event: t=4 after t=25 with a 5 s delay is late for the local engine (its watermark moves
    per event), and on Spark only when it comes in a later micro-batch than t=25; in the same one, Spark counts it
    (docs/state.md, Differences from Spark). The reference says which, and both engines must give what it says."""
    case = Case(LATE_WINDOW, LATE_EVENTS, cuts=[3], micro_batches=micro_batches)
    spark_window = [r for r in reference(case, per_micro_batch=True) if r["window_start"].endswith("00:00Z")]
    assert spark_window == [{"k": "a", "window_start": "1970-01-01T00:00:00Z", "window_end": "1970-01-01T00:00:10Z",
                             "n": 2 if micro_batches else 3, "s": 3 if micro_batches else 1003}]
    assert [r["n"] for r in reference(case) if r["window_start"].endswith("00:00Z")] == [2]
    assert not reference_vs_engines(case, spark)
