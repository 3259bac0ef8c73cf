"""The differential pipeline fuzzer's Spark oracle (issue 13): generated pipelines over messy generated events give
the same results, dead letters and sink records on the local engine and on Spark (``tests/fuzz``). A fixed seed
and a small budget here; ``make fuzz`` soaks it. Pipelines Spark's static typing refuses before reading any data
are a documented difference (docs/spark.md) and count as neither."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.generate import Case, cases
from tests.fuzz.oracles import Rejected, local_vs_spark, split_vs_whole
from tests.fuzz.reference import (
    reference,
    reference_applies,
    reference_cases,
    reference_outputs,
    reference_vs_engines,
    spawn_argv,
)
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


SLIDING_LATE = [{"window": {"id": "w", "on_error": "skip", "key": ["k"], "aggs": {"n": "count()"},
                             "sliding": "10s", "every": "5s", "watermark": "5s"}}]
SESSION_LATE = [{"window": {"id": "w", "on_error": "skip", "key": ["k"], "aggs": {"n": "count()"},
                            "session": "5s", "watermark": "0s"}}]


def _windows(records: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    return sorted((r["window_start"][-3:-1], r["window_end"][-3:-1], r["n"]) for r in records)


def test_a_sliding_windows_late_event_goes_to_its_windows_still_open(spark: Any) -> None:
    """Worked by hand: sliding 10 s every 5 s, a 5 s delay; t=1, 6, 22, then t=12. The watermark 22 - 5 = 17 has
    closed [5, 15) but not [10, 20): t=12 goes to the second only (docs/state.md: late only when every window is
    closed). On Spark in one micro-batch the watermark has not moved, and [5, 15) holds t=6 and t=12."""
    events = [{"t": 1, "k": "a"}, {"t": 6, "k": "a"}, {"t": 22, "k": "a"}, {"t": 12, "k": "a"}]
    case = Case(SLIDING_LATE, events, cuts=[3], micro_batches=True)
    local = [("55", "05", 1), ("00", "10", 2), ("05", "15", 1), ("10", "20", 1), ("15", "25", 1), ("20", "30", 1)]
    assert _windows(reference(case)) == sorted(local)
    assert ("05", "15", 1) in _windows(reference(case, per_micro_batch=True))
    one_batch = Case(SLIDING_LATE, events, cuts=[3], micro_batches=False)
    assert ("05", "15", 2) in _windows(reference(one_batch, per_micro_batch=True))
    assert not reference_vs_engines(case, spark)  # the one-micro-batch form: the generated late cases


def test_a_session_given_and_dropped_takes_no_later_event(spark: Any) -> None:
    """Worked by hand: a 5 s gap, no delay; t=1, 4, 12, then t=9. Locally t=12 moves the watermark to 12, which
    closes [1, 9); t=9 is not late (9 + 5 > 12) and its session [9, 14) merges with [12, 17) only. On Spark the
    state is dropped at the end of a micro-batch by the watermark its events met: after the first micro-batch
    [1, 9) is still held, and t=9 joins all three into [1, 17)."""
    events = [{"t": 1, "k": "a"}, {"t": 4, "k": "a"}, {"t": 12, "k": "a"}, {"t": 9, "k": "a"}]
    case = Case(SESSION_LATE, events, cuts=[3], micro_batches=True)
    assert _windows(reference(case)) == [("01", "09", 2), ("09", "17", 2)]
    assert _windows(reference(case, per_micro_batch=True)) == [("01", "17", 4)]
    assert not reference_vs_engines(case, spark)


@budget(2)
@given(case=reference_cases().filter(lambda c: c.continuous))
def test_a_continuous_job_equals_the_reference_interpreter(spark: Any, case: Case) -> None:
    """Issue 39, arrivals: a continuous job (no ``--once``) started on the first segment, the others arriving one
    at a time; the input never ends, so only what the query's watermark closed comes out."""
    problems = reference_vs_engines(case, spark)
    assert not problems, f"{problems}\n{case.pipeline_text()}\n{case.events}"


CONTINUOUS_WINDOW = [{"window": {"id": "w", "on_error": "skip", "key": ["k"], "aggs": {"n": "count()"},
                                 "tumbling": "10s", "watermark": "2s"}}]


def test_a_continuous_job_gives_what_its_last_watermark_closed(spark: Any) -> None:
    """Worked by hand: t=1, 2 | 12 | 25, a segment each. Locally the input ends and every window closes; the
    continuous job's last watermark is 25 - 2 = 23 s, past [0, 10) and [10, 20), short of [20, 30)."""
    events = [{"t": 1, "k": "a"}, {"t": 2, "k": "a"}, {"t": 12, "k": "a"}, {"t": 25, "k": "a"}]
    case = Case(CONTINUOUS_WINDOW, events, cuts=[2, 3], schema="t BIGINT, k STRING", continuous=True)
    starts = sorted((r["window_start"][-3:-1], r["n"]) for r in reference(case, per_micro_batch=False))
    assert starts == [("00", 2), ("10", 1), ("20", 1)]
    still_open = reference_outputs(case, per_micro_batch=True, ends=False)[""]
    assert sorted((r["window_start"][-3:-1], r["n"]) for r in still_open) == [("00", 2), ("10", 1)]
    assert not reference_vs_engines(case, spark)


def test_spawn_on_both_engines_equals_the_reference(spark: Any) -> None:
    """``spawn`` (its program as JSON on stdin, its output under ``into`` or replacing the event, no output
    leaving it as it was, a non-zero exit or no JSON failing it) on both engines, with ``when`` and a dead-letter
    sink; worked by hand from the reference's programs (reference.SPAWNED)."""
    steps = [{"spawn": {"id": "sp", "argv": spawn_argv("into"), "into": "out", "on_error": "dead"}},
             {"spawn": {"id": "re", "argv": spawn_argv("replace"), "on_error": "dead", "when": "k IS NOT NULL"}}]
    events = [{"t": 1, "k": "c", "x": 2}, {"t": 2, "k": "b", "x": 1}, {"t": 3, "x": 5}, {"t": 4, "k": "a", "x": 1},
              {"t": 5, "k": "c"}]
    case = Case(steps, events, ["dead"], schema="t BIGINT, k STRING, x BIGINT")
    outputs = reference_outputs(case)
    assert sorted(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) for r in outputs[""]) == sorted(
        orjson.dumps(r, option=orjson.OPT_SORT_KEYS) for r in [
            {"k": "c", "x": 2, "from": "spawn", "__id": "spool:part-1.ndjson:1"},  # replaced, `out` with it
            {"t": 3, "x": 5, "__id": "spool:part-1.ndjson:3"},  # no key: no output, and no `when`
            {"k": "c", "x": None, "from": "spawn", "__id": "spool:part-1.ndjson:5"}])
    # k=b: the first program exits 3; k=a: the second prints a list, which cannot replace the event
    assert sorted((d["step"], d["event"]["t"]) for d in outputs["dead"]) == [("re", 4), ("sp", 2)]
    assert not reference_vs_engines(case, spark)


def test_pinned_difference_processing_time_completions_stay_open_at_the_end_of_once(spark: Any) -> None:
    """docs/spark.md, Differences: a local run's end times out every open completion; Spark's processing-time
    timers fire by its clock only, so a ``--once`` run leaves them open in its checkpoint."""
    steps = [{"complete": {"id": "c", "key": "k", "parts": {"p": "x IS NULL", "q": "x > 0"}, "timeout": "1h",
                           "time": "processing", "into": "done", "on_error": "skip"}}]
    events = [{"t": 1, "k": "a", "x": 1}, {"t": 2, "k": "b", "x": 1}, {"t": 3, "k": "b", "x": None}]
    case = Case(steps, events, schema="t BIGINT, k STRING, x BIGINT")
    local = [r["done"]["status"] for r in reference(case)]
    spark_side = [r["done"]["status"] for r in reference(case, per_micro_batch=True)]
    assert sorted(local) == ["completed", "timed_out", "triggered", "triggered"]
    assert sorted(spark_side) == ["completed", "triggered", "triggered"]
    assert not reference_vs_engines(case, spark)
