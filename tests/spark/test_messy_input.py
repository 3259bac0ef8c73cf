"""Issue 13 regressions that need a spool read in one micro-batch: the two engines read the same files the same
way (spool envelopes, plain lines, ids), `dedupe` keeps the same event of a micro-batch, and NULLs under
`on_error: skip` are values, not errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from edgewise.config import load_text_plan
from edgewise.engine.local import LocalEngine
from edgewise.jsonio import dumps
from edgewise.testing import FakeClock, ListSink
from tests.spark.test_sources_and_sinks import _collecting, _segment

SPOOL = """
version: 1
sources: [{id: spool, type: file, path: in}]
pipelines:
  - id: p
    steps:"""
"""A pipeline `p` over the spool directory `in`; its steps follow."""
SPOOL_EVENT_TIME = SPOOL.replace("version: 1", 'version: 1\nevent_time: "timestamp_seconds(t)"')


def _spool(base: Path, lines: list[str]) -> None:
    """The spool directory ``in`` with one segment of ``lines``."""
    (base / "in").mkdir()
    _segment(base / "in", 1, lines)


def _local(text: str, base: Path) -> dict[str, Any]:
    """The local engine over the file's own sources: each result's id -> record."""
    plan = load_text_plan(text, file=str(base / "pipeline.yaml"), base_dir=str(base))
    sink = ListSink()
    engine = LocalEngine(plan, clock=FakeClock(0), sinks={"<stdout>": sink})
    engine.run([plan.source_classes[s.id](s, _build(base)) for s in plan.sources])
    return {i: orjson.loads(dumps(r)) for i, r in zip(sink.ids, sink.records, strict=True)}


def _build(base: Path) -> Any:
    from edgewise.config import BuildContext

    return BuildContext(str(base))


def _spark(spark: Any, text: str, base: Path) -> dict[str, Any]:
    got = _collecting(spark, text, base, base / "ck")
    return dict(got.get("", []))


def test_a_daemon_spool_reads_the_same_on_both_engines(spark: Any, tmp_path: Path) -> None:
    """Envelopes keep their id and event time on both engines; plain lines are events of their own, named by
    file and line; a five-key object that looks like an envelope is a plain event."""
    _spool(tmp_path, [
        '{"id":"gh:d-1","event_time":61000000,"source":"gh","payload":{"room":"a","n":1}}',
        '{"room":"b","n":2,"t":5}',
        '{"id":"gh:d-2","event_time":62000000,"source":"gh","payload":{"room":"a","n":3}}',
        '{"id":"x","event_time":1,"source":"s","payload":{"room":"c","n":4},"more":1}',
    ])
    text = SPOOL + """
      - annotate: {id: a, set: {twice: "n * 2", minute: "minute(timestamp_seconds(coalesce(t, 0)))"}}
"""
    local = _local(text, tmp_path)
    on_spark = _spark(spark, text, tmp_path)
    assert set(local) == {"gh:d-1", "gh:d-2", "spool:part-1.ndjson:2", "spool:part-1.ndjson:4"}
    assert local == on_spark
    assert local["gh:d-1"] == {"room": "a", "n": 1, "twice": 2, "minute": 0}


def test_envelope_event_time_drives_windows_on_both_engines(spark: Any, tmp_path: Path) -> None:
    lines = [orjson.dumps({"id": f"gh:{i}", "event_time": t * 1_000_000, "source": "gh",
                           "payload": {"room": room}}).decode()
             for i, (room, t) in enumerate([("a", 1), ("a", 30), ("b", 61), ("a", 65), ("a", 200)])]
    _spool(tmp_path, lines)
    text = SPOOL + """
      - window: {id: per-room, key: [room], tumbling: 1m, aggs: {n: count()}}
"""
    local = _local(text, tmp_path)
    assert sorted((r["room"], r["window_start"][14:16], r["n"]) for r in local.values()) == [
        ("a", "00", 2), ("a", "01", 1), ("a", "03", 1), ("b", "01", 1)]
    assert _spark(spark, text, tmp_path) == local


def test_dedupe_keeps_the_first_event_of_a_micro_batch_on_both_engines(spark: Any, tmp_path: Path) -> None:
    """`a@0, a@30` in one micro-batch: both keep a@0 (dropDuplicatesWithinWatermark kept either); a repeat more
    than `within` later is kept on both (it used to be dropped on Spark)."""
    _spool(tmp_path, ['{"k":"a","t":0}', '{"k":"a","t":30}', '{"k":"b","t":31}', '{"k":"a","t":100}',
                        '{"k":"a","t":159}', '{"t":160}', '{"t":160}'])
    text = SPOOL_EVENT_TIME + """
      - dedupe: {id: once, key: k, within: 1m}
"""
    local = _local(text, tmp_path)
    assert sorted((r.get("k", "-"), r["t"]) for r in local.values()) == [
        ("-", 160), ("-", 160), ("a", 0), ("a", 100), ("b", 31)]
    assert _spark(spark, text, tmp_path) == local


def test_null_and_missing_values_are_not_errors_under_skip(spark: Any, tmp_path: Path) -> None:
    _spool(tmp_path, ['{"id":1,"age":30}', '{"id":2,"age":null}', '{"id":4}', '{"id":5,"age":"x"}',
                        '{"id":6,"age":"41"}'])
    text = SPOOL + """
      - annotate: {id: x, set: {out: "age + 1"}, on_error: skip}
"""
    local = _local(text, tmp_path)
    assert sorted(r["id"] for r in local.values()) == [1, 2, 4, 6]  # "x" fails: skipped
    assert _spark(spark, text, tmp_path) == local


def test_pinned_difference_out_of_order_dedupe_within_a_micro_batch(spark: Any, tmp_path: Path) -> None:
    """docs/spark.md, Order: within a micro-batch Spark takes a key's events by event time, the local engine by
    arrival, so out-of-order repeats keep different events."""
    _spool(tmp_path, ['{"k":"a","t":30}', '{"k":"a","t":0}'])
    text = SPOOL_EVENT_TIME + """
      - dedupe: {id: once, key: k, within: 1m}
"""
    assert [r["t"] for r in _local(text, tmp_path).values()] == [30]
    assert [r["t"] for r in _spark(spark, text, tmp_path).values()] == [0]


def test_an_array_mixing_text_and_a_number_agrees(spark: Any, tmp_path: Path) -> None:
    """docs/spark.md, Implicit casts of mixed types: Spark gives `array(x, 1)` one element type and cast a text `x`
    to BIGINT, failing the whole query on '-539.25' whatever on_error said; where the array is a step's value or
    what `size` counts, its elements are VARIANTs now, each as it is, as locally."""
    _spool(tmp_path, ['{"i":1,"x":"-539.25"}', '{"i":2,"x":"oops"}', '{"i":3,"x":"7"}'])
    text = SPOOL + """
      - annotate: {id: a, set: {n: "size(array(x, 1))", xs: "array(x, 1)"}, on_error: skip}
"""
    local = sorted((r["i"], r["n"], r["xs"]) for r in _local(text, tmp_path).values())
    assert local == [(1, 2, ["-539.25", 1]), (2, 2, ["oops", 1]), (3, 2, ["7", 1])]
    assert local == sorted((r["i"], r["n"], r["xs"]) for r in _spark(spark, text, tmp_path).values())


def test_a_function_of_an_array_mixing_text_and_a_number_agrees(spark: Any, tmp_path: Path) -> None:
    """Where a function reads the elements (`array_contains`), Spark's one element type stays, BIGINT, and the
    guard casts the text: '-539.25' and 'oops' fail their events (the query goes on) and '7' is 7; locally
    `array_contains` compares text with the number 7 as a BIGINT, which gives the same."""
    _spool(tmp_path, ['{"i":1,"x":"-539.25"}', '{"i":2,"x":"oops"}', '{"i":3,"x":"7"}'])
    text = SPOOL + """
      - annotate: {id: a, set: {has: "array_contains(array(x, 1), 7)"}, on_error: skip}
"""
    assert sorted((r["i"], r["has"]) for r in _local(text, tmp_path).values()) == [(3, True)]
    assert sorted((r["i"], r["has"]) for r in _spark(spark, text, tmp_path).values()) == [(3, True)]


@pytest.mark.parametrize("expr", ["x IN ('a', 1)", "x IN (y, 1)", "x NOT IN (1, 'oops')", "x IN ('a', 'b')"])
def test_an_in_list_mixing_text_and_a_number_agrees(spark: Any, tmp_path: Path, expr: str) -> None:
    """docs/spark.md, Implicit casts of mixed types: Spark gave `x IN ('a', 1)` one type for the list, BIGINT, and
    its cast of a text `x` failed the whole query on 'a'; a list that is not literals of one kind is now compiled
    as SQL defines IN (`x = 'a' OR x = 1`), each comparison by its own types, as locally."""
    _spool(tmp_path, ['{"i":1,"x":"a"}', '{"i":2,"x":"oops"}', '{"i":3,"x":"1"}'])
    text = SPOOL + f"""
      - annotate: {{id: a, set: {{v: "{expr}"}}, on_error: skip}}
"""
    local = sorted((r["i"], r["v"]) for r in _local(text, tmp_path).values())
    assert local
    assert local == sorted((r["i"], r["v"]) for r in _spark(spark, text, tmp_path).values())


@pytest.mark.parametrize("expr", ["coalesce(coalesce(s, try_divide(2, 4)), 0)", "if(c, coalesce(s, 2), s)",
                                  "array(coalesce(s, 1), s)"])
def test_a_call_over_an_untyped_field_inside_another_agrees(spark: Any, tmp_path: Path, expr: str) -> None:
    """A coalesce (an if()) over a field whose values are text and numbers is a VARIANT where a step sets it; as a
    value of another such call it counts as one too, and its text meets the outer call's number literals as the
    local engine's outer call meets it. Spark's analyser refused `coalesce(<VARIANT coalesce>, 0)` before reading
    data (found by the fuzzer's soak)."""
    _spool(tmp_path, ['{"i":1,"s":"12","c":true}', '{"i":2,"s":3.5,"c":true}', '{"i":3,"c":false}',
                      '{"i":4,"s":"oops","c":true}', '{"i":5,"s":"2.5","c":false}'])
    text = SPOOL + f"""
      - annotate: {{id: a, set: {{v: "{expr}"}}, on_error: skip}}
"""
    local = sorted((r["i"], r["v"]) for r in _local(text, tmp_path).values())
    assert local
    assert local == sorted((r["i"], r["v"]) for r in _spark(spark, text, tmp_path).values())


@pytest.mark.parametrize("expr", ["x = 'oops'", "'oops' < x", "x IN ('oops', 1)"])
def test_a_comparison_of_null_with_text_is_null_on_both(spark: Any, tmp_path: Path, expr: str) -> None:
    """A number compared with text that is not a number fails the event on both engines, but a NULL compared with
    it is NULL before any cast: the Spark guard reported the cast's failure beside a NULL too (found by the soak,
    tests/fuzz/cases/in-list-of-mixed-kinds-over-a-null.yaml)."""
    _spool(tmp_path, ['{"i":1,"x":2.5}', '{"i":2,"x":null}', '{"i":3}', '{"i":4,"x":7.5}'])
    text = SPOOL + f"""
      - annotate: {{id: a, set: {{v: "{expr}"}}, on_error: skip}}
"""
    local = sorted((r["i"], r["v"]) for r in _local(text, tmp_path).values())
    assert local == [(2, None), (3, None)]
    assert local == sorted((r["i"], r["v"]) for r in _spark(spark, text, tmp_path).values())


@pytest.mark.parametrize("expr", ["if(c, y, x) != 8", "nvl(if(c, y, x), -1) != 8", "coalesce(x, w) * 2",
                                  "if(c, y, x) + 1", "round(coalesce(x, y), 1)", "nvl(if(c, y, x), 0.5) > 1",
                                  "coalesce(w, nvl(if(length(x) > 2, x, w), -1)) <= 19"])
def test_an_untyped_field_in_a_call_under_a_use_agrees(spark: Any, tmp_path: Path, expr: str) -> None:
    """A field whose values are text and numbers (no type for Spark) as a value of an if() or coalesce() that an
    operator or a function uses: locally its text reaches the use as text and meets the use's rules ('0.0' != 8
    casts to BIGINT and fails); Spark read it at the use's number type (DOUBLE: 0.0) and the event passed. The use
    is now lifted into the call's values, where the field is read by each value's kind (found by the fuzzer's
    soak: tests/fuzz/cases/nvl-of-an-if-of-text-and-a-number-under-a-when.yaml; the coalesce with a long last
    value: a-coalesce-whose-long-last-value-kept-it-from-being-lifted.yaml)."""
    _spool(tmp_path, ['{"i":1,"x":"0.0","y":3,"c":false,"w":1}', '{"i":2,"x":7,"y":3,"c":false}',
                      '{"i":3,"x":"12","y":3,"c":false,"w":"2.5"}', '{"i":4,"x":"oops","y":5,"c":true}',
                      '{"i":5,"x":null,"y":4,"c":false,"w":"3"}', '{"i":6,"x":2.5,"y":3,"c":false}',
                      '{"i":7,"y":9,"c":false,"w":4}'])
    text = SPOOL + f"""
      - annotate: {{id: a, set: {{v: "{expr}"}}, on_error: skip}}
"""
    local = sorted((r["i"], r["v"]) for r in _local(text, tmp_path).values())
    assert local
    assert local == sorted((r["i"], r["v"]) for r in _spark(spark, text, tmp_path).values())


@pytest.mark.parametrize("expr", ["nullif(round(if(length(s) > 2, s, x), 1), 0)",
                                  "CASE WHEN k = 'z' THEN 1.5 ELSE if(length(s) > 2, round(s, 1), 2.5) END"])
def test_an_if_as_a_cases_else_fails_only_on_the_value_it_takes(spark: Any, tmp_path: Path, expr: str) -> None:
    """An if() that is a CASE's ELSE (nullif is compiled as an IF around its operand) was taken for one of the
    CASE's WHEN branches, and the guard counted the errors of both its values: `round('')` failed the event on
    Spark where the if() took the other value (found by the fuzzer's soak:
    tests/fuzz/cases/nullif-of-a-round-of-an-if-of-text-over-empty-text.yaml)."""
    _spool(tmp_path, ['{"i":1,"s":""}', '{"i":2,"s":"abc"}', '{"i":3,"s":"12.25","x":4}', '{"i":4,"s":"x","x":7.5}'])
    text = SPOOL + f"""
      - annotate: {{id: a, set: {{v: "{expr}"}}, on_error: skip}}
"""
    local = sorted((r["i"], r["v"]) for r in _local(text, tmp_path).values())
    assert [i for i, _ in local] == [1, 3, 4]  # 'abc' does not round
    assert local == sorted((r["i"], r["v"]) for r in _spark(spark, text, tmp_path).values())


TYPED_SPOOL = SPOOL.replace("path: in}", 'path: in, schema: "x STRING, y BIGINT, c BOOLEAN"}')
TYPED_EVENTS = ['{"x":"oops","y":1,"c":true}', '{"x":"244","y":1,"c":true}', '{"x":"2.5","y":1,"c":false}',
                '{"x":"2.5","y":3,"c":true}']


@pytest.mark.parametrize("expr", [
    "if(c, x, y)", "coalesce(x, y)", "if(c, x, y + 1)", "CASE WHEN c THEN x ELSE y / 2 END", "nvl2(c, x, -y)",
    "upper(if(c, x, y))", "if(c, x, y) * 2", "if(c, x, y) > 3", "if(c, x, y) = 'oops'", "round(coalesce(x, y), 1)",
    "try_divide(if(c, x, y), 4)", "cast(if(c, x, y) AS DOUBLE)", "abs(if(c, x, y))", "if(c, x, y) * 2.5",
    "nullif(if(c, x, y), 0)", "length(if(c, x, y))", "coalesce(x, y) || '!'", "nvl2(c, upper(x), y + 1) = 'OOPS'",
    "transform(array(1), e -> if(c, x, y + e))"])
def test_text_beside_a_typed_number_agrees(spark: Any, tmp_path: Path, expr: str) -> None:
    """docs/spark.md, Implicit casts of mixed types: a STRING `x` beside a BIGINT `y` in one call. Spark gave the
    call one type, BIGINT, and its cast of 'oops' failed the whole query whatever on_error said; now a value a step
    sets comes out as it is, as locally, and in arithmetic and string functions the engines agree."""
    _spool(tmp_path, TYPED_EVENTS)
    text = TYPED_SPOOL + f"""
      - annotate: {{id: a, set: {{v: "{expr}"}}, on_error: skip}}
"""
    local = sorted((r["x"], r["c"], r["v"]) for r in _local(text, tmp_path).values())
    remote = sorted((r["x"], r["c"], r["v"]) for r in _spark(spark, text, tmp_path).values())
    assert local == remote
    assert len(local) >= 2


@pytest.mark.parametrize("agg", ["sum(if(c, x, y))", "avg(coalesce(x, y))"])
def test_text_beside_a_typed_number_in_a_window_aggregate_agrees(spark: Any, tmp_path: Path, agg: str) -> None:
    """An aggregate reads text as DOUBLE on both engines: `sum(if(c, x, y))` adds '2.5' as 2.5, where Spark's one
    type for the if(), BIGINT, failed the event on Spark only."""
    _spool(tmp_path, TYPED_EVENTS[1:])
    text = TYPED_SPOOL.replace("version: 1", 'version: 1\nevent_time: "timestamp_seconds(0)"') + f"""
      - window: {{id: w, tumbling: 1m, watermark: 60s, aggs: {{v: "{agg}", n: count()}}, on_error: skip}}
"""
    local = [(r["v"], r["n"]) for r in _local(text, tmp_path).values()]
    assert local == [(r["v"], r["n"]) for r in _spark(spark, text, tmp_path).values()]
    assert local[0][1] == 3


@pytest.mark.parametrize("expr", ["if(c, coalesce(x, y), 1.5)", "coalesce(coalesce(x, y), 0)"])
def test_text_beside_a_typed_number_under_a_number_literal_agrees(spark: Any, tmp_path: Path, expr: str) -> None:
    """`coalesce(x, y)` (a STRING `x`, a BIGINT `y`) as a value of a call with a number literal: locally the inner
    coalesce gives the text as it is and the outer call casts it beside the literal ('2.5' is 2.5 beside 1.5, and
    fails beside 0); Spark's inner coalesce was BIGINT, whose cast of '2.5' failed the event (and of 'oops', beside
    0, the query). The inner call's text is now cast to the literal's type on Spark too."""
    _spool(tmp_path, TYPED_EVENTS)
    text = TYPED_SPOOL + f"""
      - annotate: {{id: a, set: {{v: "{expr}"}}, on_error: skip}}
"""
    local = sorted((r["x"], r["c"], r["v"]) for r in _local(text, tmp_path).values())
    assert local == sorted((r["x"], r["c"], r["v"]) for r in _spark(spark, text, tmp_path).values())
    assert local  # the events that pass on both


@pytest.mark.parametrize("expr", [
    "aggregate(array(1), y, (acc, e) -> if(c, x, acc))",
    "reduce(array(1, 2), 0, (acc, e) -> if(c, x, acc), acc -> acc)",
    "aggregate(array(1), y, (acc, e) -> coalesce(x, acc))",
    "aggregate(array(1, 2), y, (acc, e) -> if(c, z, acc))",
    "aggregate(array(1), x, (acc, e) -> CASE WHEN c THEN y ELSE acc END)"])
def test_text_beside_a_typed_number_in_a_merge_lambda_agrees(spark: Any, tmp_path: Path, expr: str) -> None:
    """docs/spark.md, Implicit casts of mixed types: the whole body of a merge lambda mixing text with a typed
    number, the accumulator one of its values. Spark gave the accumulator the start's one type (BIGINT) and cast
    'oops' to it inside the lambda, failing the whole query; it had been listed as a difference, and issue 39 calls
    it a defect. The accumulator is now a VARIANT there, and each value comes out as it is, as locally."""
    _spool(tmp_path, TYPED_EVENTS)
    text = TYPED_SPOOL + f"""
      - annotate: {{id: a, set: {{v: "{expr}"}}, on_error: skip}}
"""
    local = sorted((r["x"], r["y"], r["c"], str(r.get("v"))) for r in _local(text, tmp_path).values())
    assert len(local) == len(TYPED_EVENTS)
    assert local == sorted((r["x"], r["y"], r["c"], str(r.get("v"))) for r in _spark(spark, text, tmp_path).values())


LAMBDA_ERRORS = [
    "transform(array(1, n), e -> 10 / e)", "transform(array(x), e -> e + 1)", "filter(array(n, 2), e -> 6 / e > 1)",
    "exists(array(1, n), e -> e = 1 OR 10 / e > 1)", "exists(array(n, 1), e -> e = 1 OR 10 / e > 1)",
    "forall(array(n, 1), e -> 10 / e > 1)", "aggregate(array(n, 2), 100, (a, e) -> a div e)",
    "aggregate(array(1, 2), 0, (a, e) -> a + e, a -> a div n)",
    "transform(array(array(n)), e -> transform(e, f -> 1 / f))",
    "transform(array(n, 1), (e, i) -> 6 / (e - i))", "transform(array(1), e -> if(n = 0, 1, 1 / n))",
    "transform(array(1, 2), e -> element_at(array(10), cast(e AS INT)))",
]


@pytest.mark.parametrize("expr", LAMBDA_ERRORS)
def test_an_error_in_a_lambda_fails_the_event_not_the_query(spark: Any, expr: str) -> None:
    """A division by zero, a text that is no number or an index out of range inside a lambda body: locally the
    event fails (its step's ``on_error``: here a dead letter with the error class); on Spark it failed the whole
    query (issue 39: found checking the merge-lambda case; not a difference Spark imposes). The lambda bodies are
    guarded as the rest of an expression is, and an error counts as the local engine meets it: every element of a
    ``transform``, up to the deciding one of ``exists``, the fold up to its first error, a branch taken only."""
    from tests.fuzz.generate import Case
    from tests.fuzz.oracles import local_vs_spark

    events = [{"t": 1, "n": 0, "x": "oops"}, {"t": 2, "n": 2, "x": "4"}, {"t": 3, "n": 1, "x": "2.5"},
              {"t": 4, "n": None, "x": None}]
    case = Case([{"annotate": {"id": "a", "set": {"v": expr}, "on_error": "dead"}}], events, ["dead"])
    assert not local_vs_spark(spark, case)


def test_equal_null_over_a_field_mixing_text_and_numbers_agrees(spark: Any, tmp_path: Path) -> None:
    """`equal_null(k, 'b')` over a field whose values are text and numbers (no type for Spark): it compared the
    field's VARIANT, which Spark's analyser refused before reading data (found by the fuzzer's soak); it is now
    `k <=> 'b'`, compared by each value's kind as locally (the number 2 beside 'b' fails its event on both)."""
    _spool(tmp_path, ['{"i":1,"k":"b"}', '{"i":2,"k":"a"}', '{"i":3,"k":null}', '{"i":4}', '{"i":5,"k":2}'])
    text = SPOOL + """
      - annotate: {id: a, set: {v: "equal_null(k, 'b')"}, on_error: skip}
"""
    local = sorted((r["i"], r["v"]) for r in _local(text, tmp_path).values())
    assert local == [(1, True), (2, False), (3, False), (4, False)]
    assert local == sorted((r["i"], r["v"]) for r in _spark(spark, text, tmp_path).values())


def test_a_window_with_when_is_refused_on_spark_before_it_starts(spark: Any, tmp_path: Path) -> None:

    from edgewise.errors import ConfigError

    (tmp_path / "in").mkdir()
    text = SPOOL + """
      - window: {id: w, when: "x > 1", tumbling: 1m, aggs: {n: count()}}
"""
    with pytest.raises(ConfigError, match="window with `when` is not compiled for Spark"):
        _spark(spark, text, tmp_path)


def test_min_max_over_text_and_numbers_agree(spark: Any, tmp_path: Path) -> None:
    """Once a pinned difference (Spark read the argument as DOUBLE and skipped 'oops''s event; the local engine
    compared text with text): both now order other text after numbers and numeric text, so 'oops' is the max."""
    _spool(tmp_path, ['{"t":0,"x":"360.0"}', '{"t":1,"x":360.0}', '{"t":2,"x":"oops"}'])
    text = SPOOL_EVENT_TIME + """
      - window: {id: w, tumbling: 1m, watermark: 60s, aggs: {hi: max(x), lo: min(x)}, on_error: skip}
"""
    assert [(r["hi"], r["lo"]) for r in _local(text, tmp_path).values()] == [("oops", 360.0)]
    assert [(r["hi"], r["lo"]) for r in _spark(spark, text, tmp_path).values()] == [("oops", 360.0)]


def test_pinned_difference_static_types(spark: Any, tmp_path: Path) -> None:
    """docs/spark.md, Static types: Spark's analyser refuses CASE branches of different types before reading any
    data; the local engine evaluates the branch each event takes."""
    from pyspark.errors import AnalysisException

    _spool(tmp_path, ['{"b":true}', '{"b":false}'])
    text = SPOOL + """
      - annotate: {id: a, set: {v: "CASE WHEN b THEN b ELSE 0 END"}, on_error: skip}
"""
    assert sorted(str(r["v"]) for r in _local(text, tmp_path).values()) == ["0", "True"]
    with pytest.raises(AnalysisException, match="DATATYPE_MISMATCH"):
        _spark(spark, text, tmp_path)


def test_pmod_of_a_negative_fraction_has_room_for_its_result(spark: Any, tmp_path: Path) -> None:
    """pmod(-0.25, 3) is 2.75: Spark typed it DECIMAL(2,2), which cannot hold it, and the query failed (the split
    oracle found it in `pmod(pmod(negative(0.25), 3), 3) < 4`, issue 38)."""
    _spool(tmp_path, ['{"k":1,"x":-7}'])
    text = SPOOL + """
      - annotate: {id: a, set: {p: "pmod(pmod(negative(0.25), 3), 3)", q: "pmod(x, 2.5)", r: "pmod(x, 3)"}}
"""
    for engine in (_local(text, tmp_path), _spark(spark, text, tmp_path)):
        assert [(r["p"], r["q"], r["r"]) for r in engine.values()] == [(2.75, 0.5, 2)]


@pytest.mark.parametrize("expr", ["pmod(if(c, s, coalesce(0.25, 0)), 3)", "pmod(if(c, s, -0.25), 3)",
                                  "pmod(coalesce(s, try_divide(1, 4)), 3)", "pmod(if(c, s, 1), 0.5)"])
def test_pmod_over_a_call_mixing_text_and_a_fraction_agrees(spark: Any, tmp_path: Path, expr: str) -> None:
    """pmod with a fraction literal among its operands runs over doubles on Spark (see the test above); a call
    mixing text with numbers inside it is lifted into its values first, as under any other call, so text meets
    pmod as locally: ``'3.5'`` beside the integer 3 fails the event, beside 0.5 it is 3.5. Spark gave the IF one
    type and read '3.5' as 3.5 (found by the fuzzer's soak: `a-pmod-over-an-if-of-a-numeric-text-and-a-decimal`)."""
    _spool(tmp_path, ['{"i":1,"s":"3.5","c":true}', '{"i":2,"s":3.5,"c":true}', '{"i":3,"c":false}',
                      '{"i":4,"s":"oops","c":true}', '{"i":5,"s":"7","c":true}', '{"i":6,"s":-2,"c":false}',
                      '{"i":7,"s":null,"c":true}'])
    text = SPOOL + f"""
      - annotate: {{id: a, set: {{v: "{expr}"}}, on_error: skip}}
"""
    local = sorted((r["i"], r["v"]) for r in _local(text, tmp_path).values())
    assert len(local) >= 3
    assert local == sorted((r["i"], r["v"]) for r in _spark(spark, text, tmp_path).values())


def test_text_beside_a_null_operand_must_still_be_a_number(spark: Any, tmp_path: Path) -> None:
    """`t + d` with a text `t` that is not a number and `d` NULL: Spark casts `t` before it looks at values, and the
    event fails; so does it locally now (it was NULL: a pinned difference until the soak of 194e062 met it in
    `pmod(x - y.z, 3)`, kept as tests/fuzz/cases/text-minus-a-missing-field.yaml)."""
    _spool(tmp_path, ['{"t":"abc","d":null}', '{"t":"2","d":null}', '{"t":"","d":null}'])
    text = SPOOL + """
      - annotate: {id: a, set: {v: "t + d", w: "d * t"}, on_error: skip}
"""
    assert [(r["t"], r["v"], r["w"]) for r in _local(text, tmp_path).values()] == [("2", None, None)]
    assert [(r["t"], r["v"], r["w"]) for r in _spark(spark, text, tmp_path).values()] == [("2", None, None)]


def test_pinned_difference_numbers_written_back(spark: Any, tmp_path: Path) -> None:
    """docs/spark.md, Numbers: a JSON 2.0 passed through is written as 2.0 locally and as 2 on Spark (its VARIANT
    holds the decimal 2); by value they are equal."""
    _spool(tmp_path, ['{"v":2.0,"w":2.5}'])
    text = SPOOL + """
      - filter: {id: all, where: "true"}
"""
    [local] = _local(text, tmp_path).values()
    [remote] = _spark(spark, text, tmp_path).values()
    assert isinstance(local["v"], float) and isinstance(remote["v"], int) and local["v"] == remote["v"] == 2
    assert local["w"] == remote["w"] == 2.5


def test_pinned_difference_watermark_moves_once_per_micro_batch(spark: Any, tmp_path: Path) -> None:
    """docs/spark.md, Watermarks: in one micro-batch `t=100` then `t=0` (watermark 10 s): the local engine's
    watermark has passed `t=0`'s window when it arrives (late, dropped); Spark's moves after the micro-batch, so both
    windows are counted."""
    _spool(tmp_path, ['{"t":100}', '{"t":0}'])
    text = SPOOL_EVENT_TIME + """
      - window: {id: w, tumbling: 10s, watermark: 10s, aggs: {n: count()}}
"""
    assert sorted(r["window_start"][:19] for r in _local(text, tmp_path).values()) == ["1970-01-01T00:01:40"]
    assert sorted(r["window_start"][:19] for r in _spark(spark, text, tmp_path).values()) == [
        "1970-01-01T00:00:00", "1970-01-01T00:01:40"]


def test_pinned_difference_dead_letter_messages(spark: Any, tmp_path: Path) -> None:
    """docs/spark.md, Dead-letter messages: the same event, step and error class on both engines; the message names
    the value locally and is the class's own words on Spark."""
    _spool(tmp_path, ['{"x":"oops"}'])
    text = SPOOL + """
      - annotate: {id: a, set: {v: "x * 2"}, on_error: dead}
sinks: [{id: dead, type: stdout}]
"""
    plan = load_text_plan(text, file=str(tmp_path / "pipeline.yaml"), base_dir=str(tmp_path))
    dead = ListSink("dead")
    LocalEngine(plan, clock=FakeClock(0), sinks={"<stdout>": ListSink(), "dead": dead}).run(
        [plan.source_classes[s.id](s, _build(tmp_path)) for s in plan.sources])
    [local] = dead.records
    [(_, remote)] = _collecting(spark, text, tmp_path, tmp_path / "ck")["dead"]
    assert (local["event"], local["step"], local["error"]["type"]) == (
        remote["event"], remote["step"], remote["error"]["type"]) == ({"x": "oops"}, "a", "CAST_INVALID_INPUT")
    assert "'oops'" in local["error"]["message"] and "'oops'" not in remote["error"]["message"]


def test_rows_routed_between_a_window_and_a_keyed_step(spark: Any, tmp_path: Path) -> None:
    """A window, a tee, then an aggregate: the window's result reaches the tee's sink on both engines (found by the
    pipeline fuzzer: Spark lost the copy while the keyed step sent routed rows around it in a second branch)."""
    _spool(tmp_path, ['{"t":0,"k":"a"}', '{"t":1,"k":"a"}', '{"t":12,"k":"b"}', '{"t":25,"k":"a"}'])
    text = SPOOL_EVENT_TIME + """
      - window: {id: w, key: [k], tumbling: 10s, watermark: 60s, aggs: {a0: count()}}
      - tee: {id: t, to: copies}
      - aggregate: {id: a, key: [k], aggs: {n: count()}, into: st}
sinks: [{id: copies, type: stdout}]
"""
    plan = load_text_plan(text, file=str(tmp_path / "pipeline.yaml"), base_dir=str(tmp_path))
    copies, results = ListSink("copies"), ListSink()
    LocalEngine(plan, clock=FakeClock(0), sinks={"<stdout>": results, "copies": copies}).run(
        [plan.source_classes[s.id](s, _build(tmp_path)) for s in plan.sources])
    local_copies = sorted((r["k"], r["a0"]) for r in orjson.loads(dumps(copies.records)))
    assert local_copies == [("a", 1), ("a", 2), ("b", 1)]
    got = _collecting(spark, text, tmp_path, tmp_path / "ck")
    assert sorted((r["k"], r["a0"]) for _, r in got.get("copies", [])) == local_copies
    # the keyed step after the tee still runs each window result once
    local_counts = sorted((r["k"], r["st"]["n"]) for r in orjson.loads(dumps(results.records)))
    assert sorted((r["k"], r["st"]["n"]) for _, r in got[""]) == local_counts == [("a", 1), ("a", 2), ("b", 1)]


KEY_PAIRS = ['"2"', "2", "1", "2.0", "2.00", "0", "-0.0", '"-0.0"', "1e2", "100", '"a"', "true", '"true"', "null",
             "[1]", "[1.0]", '["1"]', "2.5", "2.50"]
"""Key values that are or are not the same key: every pair of them meets in `test_keys_match_by_value_*`."""


def _same_key(value: Any) -> Any:
    """The oracle: keys compare as SQL's GROUP BY compares values: numbers by exact value, text as text."""
    from fractions import Fraction

    if isinstance(value, list):
        return tuple(_same_key(v) for v in value)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    return ("number", Fraction(value))


def _key_pairs_spool(base: Path) -> list[dict[str, Any]]:
    """Each pair of `KEY_PAIRS` as two events a second apart, pairs 100 s apart (beyond `within`)."""
    events = []
    for i, a in enumerate(KEY_PAIRS):
        for j, b in enumerate(KEY_PAIRS):
            t = 100 * (i * len(KEY_PAIRS) + j)
            events += [orjson.loads(f'{{"t":{t},"x":{a}}}'), orjson.loads(f'{{"t":{t + 1},"x":{b}}}')]
    _spool(base, [orjson.dumps(e).decode() for e in events])
    return events


def test_keys_match_by_value_in_dedupe_on_both_engines(spark: Any, tmp_path: Path) -> None:
    """`dedupe` matches keys as `aggregate` groups them and as Spark compares them: `2` and `2.0` are one key, the
    text `"2"` and the number `2` two, `-0.0` is `0` (found by the fuzzer: the text `"-0.0"` and the number `-0.0`
    were one key locally and two on Spark)."""
    events = _key_pairs_spool(tmp_path)
    kept_at: dict[Any, int] = {}
    expected = []
    for e in events:
        if e["x"] is not None:
            key = _same_key(e["x"])
            if key in kept_at and e["t"] - kept_at[key] < 20:
                continue
            kept_at[key] = e["t"]
        expected.append(e["t"])
    text = SPOOL_EVENT_TIME + """
      - dedupe: {id: d, key: x, within: 20s, watermark: 60s, on_error: skip}
"""
    assert sorted(r["t"] for r in _local(text, tmp_path).values()) == expected
    assert sorted(r["t"] for r in _spark(spark, text, tmp_path).values()) == expected


def test_keys_match_by_value_in_aggregate_on_both_engines(spark: Any, tmp_path: Path) -> None:
    events = _key_pairs_spool(tmp_path)
    counts: dict[Any, int] = {}
    expected = []
    for e in events:
        key = _same_key(e["x"])
        counts[key] = counts.get(key, 0) + 1
        expected.append((e["t"], counts[key]))
    text = SPOOL_EVENT_TIME + """
      - aggregate: {id: a, key: [x], aggs: {n: count()}, into: st, on_error: skip}
"""
    assert sorted((r["t"], r["st"]["n"]) for r in _local(text, tmp_path).values()) == expected
    assert sorted((r["t"], r["st"]["n"]) for r in _spark(spark, text, tmp_path).values()) == expected


def test_pinned_difference_events_with_one_event_time_are_taken_by_id(spark: Any, tmp_path: Path) -> None:
    """docs/spark.md, Order: two events with the same event time reach a running aggregate as they arrive locally
    and by id on Spark (here the later one has the smaller id)."""
    _spool(tmp_path, ['{"id":"z-1","event_time":1000000,"source":"s","payload":{"v":"first"}}',
                      '{"id":"a-2","event_time":1000000,"source":"s","payload":{"v":"second"}}'])
    text = SPOOL + """
      - aggregate: {id: a, aggs: {n: count()}, into: st}
"""
    local = {r["v"]: r["st"]["n"] for r in _local(text, tmp_path).values()}
    remote = {r["v"]: r["st"]["n"] for r in _spark(spark, text, tmp_path).values()}
    assert local == {"first": 1, "second": 2} and remote == {"first": 2, "second": 1}


def _all_routes_local(text: str, base: Path, sinks: list[str]) -> dict[str, list[tuple[str, Any]]]:
    """Every route of the local engine (results under ``""``): (id, record) pairs, dead letters by what both engines
    give them (event, step, error class)."""
    plan = load_text_plan(text, file=str(base / "pipeline.yaml"), base_dir=str(base))
    out = {"": ListSink(), **{s: ListSink(s) for s in sinks}}
    LocalEngine(plan, clock=FakeClock(0), sinks={"<stdout>": out[""], **{s: out[s] for s in sinks}}).run(
        [plan.source_classes[s.id](s, _build(base)) for s in plan.sources])
    return {route: sorted(_comparable(route, i, orjson.loads(dumps(r))) for i, r in zip(sink.ids, sink.records,
                                                                                          strict=True))
            for route, sink in out.items()}


def _comparable(route: str, event_id: str, record: Any) -> tuple[str, Any]:
    """Numbers by value (docs/spark.md, Numbers); a dead letter by its event, step and error class."""
    from tests.fuzz.oracles import canonical, dead_letter_key

    if route == "dead":
        return event_id.split("#")[0], dead_letter_key(record)
    return event_id, canonical(record)


def _tee_copy_ids_as_local(routes: dict[str, list[tuple[str, Any]]], sink: str, tee: str) -> None:
    """docs/spark.md, Tee copies: a copy's id is the event's id locally and ``<id>#<tee>`` on Spark."""
    assert all(i.endswith(f"#{tee}") for i, _ in routes[sink]), routes[sink]
    routes[sink] = sorted((i.removesuffix(f"#{tee}"), r) for i, r in routes[sink])


@pytest.mark.parametrize("failing", ["when", "set"])
def test_a_tee_whose_when_or_copy_fails_takes_on_error_on_both_engines(spark: Any, tmp_path: Path,
                                                                         failing: str) -> None:
    """Found by the fuzzer (round-of-empty-text-in-a-when.yaml): Spark's tee ignored its errors (the event was
    copied and passed on). An event whose `when` or copy fails is neither copied nor passed on: a dead letter."""
    _spool(tmp_path, ['{"x":"1.5"}', '{"x":""}', '{"x":20}', '{"x":"abc"}', '{}'])
    when, value = ("round(x, 1) > 1", "'copy'") if failing == "when" else ("true", "x * 2")
    text = SPOOL + f"""
      - tee: {{id: t, when: "{when}", to: copies, set: {{c: "{value}"}}, on_error: dead}}
sinks: [{{id: copies, type: stdout}}, {{id: dead, type: stdout}}]
"""
    local = _all_routes_local(text, tmp_path, ["copies", "dead"])
    got = _collecting(spark, text, tmp_path, tmp_path / "ck")
    remote = {route: sorted(_comparable(route, i, r) for i, r in got.get(route, [])) for route in local}
    _tee_copy_ids_as_local(remote, "copies", "t")
    # '1.5' * 2 fails too: text beside an integer is cast to BIGINT (Spark's ANSI rule, followed locally)
    failed = [{"x": ""}, {"x": "abc"}] if failing == "when" else [{"x": "1.5"}, {"x": ""}, {"x": "abc"}]
    assert [orjson.loads(r)["event"] for _, r in local["dead"]] == failed
    assert local["copies"] and local[""]
    assert remote == local


COUNTED = """
description: which step counters each engine checks
pipeline:
  version: 1
  event_time: "timestamp_seconds(t)"
  pipelines:
    - id: p
      steps:
        - filter: {{id: f, where: "n > 0"}}
        - window: {{id: w, tumbling: 10s, watermark: 0s, aggs: {{c: count()}}}}
tests:
  - name: counters
    input: [{{n: 1, t: 0}}, {{n: 0, t: 1}}, {{n: 1, t: 20}}, {{n: 1, t: 2}}]
    expect:
      - {{c: 1, window_start: "1970-01-01T00:00:00Z", window_end: "1970-01-01T00:00:10Z"}}
      - {{c: 1, window_start: "1970-01-01T00:00:20Z", window_end: "1970-01-01T00:00:30Z"}}
    expect_counters: {{f.filtered: {filtered}, w.late: {late}}}
"""


@pytest.mark.parametrize(("filtered", "late", "local_ok", "spark_ok"), [
    (1, 1, True, True),      # both right
    (7, 1, False, True),     # a filter's counter is checked locally only
    (1, 5, False, False),    # a window's late counter is checked on both
])
def test_pinned_difference_spark_checks_only_the_late_counter(spark: Any, tmp_path: Path, filtered: int,
                                                               late: int, local_ok: bool, spark_ok: bool) -> None:
    """docs/spark.md, Counters: Spark reports a window's `late` counter only; a fixture's other expect_counters are
    not checked there (its output still is)."""
    from edgewise.testing.fixtures import run_fixture_files

    path = tmp_path / "counted.test.yaml"
    path.write_text(COUNTED.format(filtered=filtered, late=late))
    local = run_fixture_files([str(path)])
    remote = run_fixture_files([str(path)], engine="spark", spark=spark)
    assert [r.ok for r in local.results] == [local_ok], local.results
    assert [(r.ok, r.unsupported) for r in remote.results] == [(spark_ok, False)], remote.results


def test_pinned_difference_an_envelopes_source_is_kept_on_spark_only(spark: Any, tmp_path: Path) -> None:
    """docs/spark.md, Envelope sources: the same id, event time and payload on both engines; the `source` an
    `envelope: true` sink writes is the envelope's own on Spark and the reading source's locally."""
    _spool(tmp_path, ['{"id":"gh:d-1","event_time":61000000,"source":"gh","payload":{"n":1}}'])
    text = SPOOL + """
      - annotate: {id: a, set: {m: "n + 1"}}
    to: [out]
sinks: [{id: out, type: file, path: out, envelope: true}]
"""
    plan = load_text_plan(text, file=str(tmp_path / "pipeline.yaml"), base_dir=str(tmp_path))
    LocalEngine(plan, clock=FakeClock(0)).run([plan.source_classes[s.id](s, _build(tmp_path)) for s in plan.sources])
    [local] = [orjson.loads(line) for f in sorted((tmp_path / "out").iterdir()) for line in f.read_bytes().splitlines()]
    for f in (tmp_path / "out").iterdir():
        f.unlink()
    from edgewise.engine.spark.job import SparkJob, SparkOptions

    SparkJob(spark, plan, SparkOptions(checkpoint=str(tmp_path / "ck"), once=True), report=lambda text: None).run()
    [remote] = [orjson.loads(line) for f in sorted((tmp_path / "out").glob("part-*.ndjson"))
                for line in f.read_bytes().splitlines()]
    assert {k: local[k] for k in ("id", "event_time", "payload")} == {k: remote[k] for k in ("id", "event_time",
                                                                                              "payload")}
    assert (local["id"], local["payload"]) == ("gh:d-1", {"n": 1, "m": 2})
    assert (local["source"], remote["source"]) == ("spool", "gh")


def test_pinned_difference_a_completion_times_out_at_the_next_micro_batch(spark: Any, tmp_path: Path) -> None:
    """docs/spark.md, Timeouts: order 2 at t=100 moves event time past order 1's deadline (t=10). Locally order 1
    times out as order 2 arrives; on Spark at a later micro-batch than the one that read order 2 (the watermark
    moves once per micro-batch). The records are the same."""
    (tmp_path / "in").mkdir()
    _segment(tmp_path / "in", 1, ['{"kind":"order","order_id":1,"t":0}'])
    _segment(tmp_path / "in", 2, ['{"kind":"order","order_id":2,"t":100}'])
    text = SPOOL_EVENT_TIME + """
      - complete: {id: c, key: order_id, parts: {ordered: "kind = 'order'", paid: "kind = 'payment'"},
                   timeout: 10s, into: progress}
"""
    plan = load_text_plan(text, file=str(tmp_path / "pipeline.yaml"), base_dir=str(tmp_path))
    sink = ListSink()
    LocalEngine(plan, clock=FakeClock(0), sinks={"<stdout>": sink}).run(
        [plan.source_classes[s.id](s, _build(tmp_path)) for s in plan.sources])
    local = [(r["progress"]["key"], r["progress"]["status"]) for r in sink.records]
    assert local == [(1, "triggered"), (1, "timed_out"), (2, "triggered"), (2, "timed_out")]
    from edgewise.engine.spark.job import SparkJob, SparkOptions

    batches: list[tuple[int, int, str]] = []

    def collect(route: str, batch_id: int, rows: list[tuple[str, str]]) -> None:
        for _, r in rows:
            progress = orjson.loads(r)["progress"]
            batches.append((batch_id, progress["key"], progress["status"]))

    SparkJob(spark, plan, SparkOptions(checkpoint=str(tmp_path / "ck"), once=True, max_files_per_trigger=1),
             collect=collect, report=lambda text: None).run()
    assert sorted((k, s) for _, k, s in batches) == sorted(local)
    when = {(k, s): b for b, k, s in batches}
    assert when[(1, "triggered")] < when[(2, "triggered")] < when[(1, "timed_out")]


ELEMENTS = ['{"nums":[]}', '{"nums":[5,6]}', '{"nums":[7]}', '{"nums":null}', '{"nums":[8,9,10]}']


@pytest.mark.parametrize(("expression", "error_class"), [
    ("element_at(nums, 2)", "INVALID_ARRAY_INDEX_IN_ELEMENT_AT"),
    ("element_at(nums, -2)", "INVALID_ARRAY_INDEX_IN_ELEMENT_AT"),
    ("element_at(nums, 0)", "INVALID_INDEX_OF_ZERO"),
    ("nums[1]", "INVALID_ARRAY_INDEX"),
    ("nums[-1]", "INVALID_ARRAY_INDEX"),
])
def test_an_index_out_of_range_fails_its_event_not_the_query(spark: Any, tmp_path: Path, expression: str,
                                                              error_class: str) -> None:
    """Issue 39: under `on_error` an index out of range (an empty array, a short one) failed the whole Spark query
    (ANSI `element_at` and `[]` raise), and the other pipelines lost their results; locally it fails its event.
    Now the event takes `on_error` on both engines, with the error class the local engine gives."""
    _spool(tmp_path, ELEMENTS)
    text = SPOOL + f"""
      - annotate: {{id: a, set: {{v: "{expression}"}}, on_error: dead}}
sinks: [{{id: dead, type: stdout}}]
"""
    local = _all_routes_local(text, tmp_path, ["dead"])
    got = _collecting(spark, text, tmp_path, tmp_path / "ck")
    remote = {route: sorted(_comparable(route, i, r) for i, r in got.get(route, [])) for route in local}
    from tests.fuzz.oracles import canonical

    events = [orjson.loads(line) for line in ELEMENTS]
    # by hand: element_at is 1-based (negative: from the end), [] 0-based and never negative; NULL reads NULL
    def element(nums: list[int] | None) -> tuple[bool, int | None]:
        at = {"element_at(nums, 2)": 1, "element_at(nums, -2)": -2, "element_at(nums, 0)": None,
              "nums[1]": 1, "nums[-1]": None}[expression]
        if nums is None:
            return True, None
        if at is None or not -len(nums) <= at < len(nums):
            return False, None
        return True, nums[at]

    expected = sorted(canonical({**e, "v": element(e["nums"])[1]}) for e in events if element(e["nums"])[0])
    assert sorted(r for _, r in local[""]) == expected
    assert len(local["dead"]) == len(events) - len(expected)
    assert {orjson.loads(r)["type"] for _, r in local["dead"]} == {error_class}
    assert remote == local


def test_a_failed_pipeline_names_its_step_and_cause_and_the_others_deliver(spark: Any, tmp_path: Path) -> None:
    """Issue 39: a query failing on an event (`on_error: fail`) was reported as `Reason: An exception was raised by
    the Python Proxy. Return Message: Traceback …`, the cause cut off, and the job's other pipelines lost the
    results they had computed. Now the job names the pipeline, the step and Spark's error class, and the other
    pipelines finish, their windows flushed, before it fails."""
    from edgewise.engine.spark.job import SparkJob, SparkJobFailed, SparkOptions

    _spool(tmp_path, ['{"t":1,"nums":[1,2]}', '{"t":2,"nums":[]}', '{"t":15,"nums":[3]}'])
    text = """
version: 1
event_time: "timestamp_seconds(t)"
sources: [{id: spool, type: file, path: in}]
pipelines:
  - id: counts
    steps:
      - window: {id: w, tumbling: 10s, aggs: {n: count()}}
    to: [out]
  - id: firsts
    steps:
      - filter: {id: some, where: "t > 0"}
      - annotate: {id: second, set: {v: "element_at(nums, 2)"}}
sinks: [{id: out, type: file, path: out}]
"""
    plan = load_text_plan(text, file=str(tmp_path / "pipeline.yaml"), base_dir=str(tmp_path))
    with pytest.raises(SparkJobFailed) as failed:
        SparkJob(spark, plan, SparkOptions(checkpoint=str(tmp_path / "ck"), once=True),
                 report=lambda text: None).run()
    message = str(failed.value)
    assert message.startswith("pipeline firsts, step second: the Spark query failed: "
                              "[INVALID_ARRAY_INDEX_IN_ELEMENT_AT] "), message
    assert "\n" not in message and "Traceback" not in message
    written = [orjson.loads(line) for path in sorted((tmp_path / "out").glob("*.ndjson"))
               for line in path.read_bytes().splitlines()]
    assert sorted((r["window_start"], r["n"]) for r in written) == [
        ("1970-01-01T00:00:00Z", 2), ("1970-01-01T00:00:10Z", 1)]


NUMBERS_AS_TEXT = ["30.0", "1.25", "1e3", "1.0E-6", "12345678.9", "123456789012345678901.5", "30", '"30.0"', "true",
                   "null", "0.1", "100000000000000000000.0"]


@pytest.mark.parametrize("expr", ["cast(x AS STRING)", "cast(x AS STRING) = '30.0'", "concat(cast(x AS STRING), '!')"])
def test_a_json_number_cast_to_text_agrees(spark: Any, tmp_path: Path, expr: str) -> None:
    """A JSON number with a fraction is a DECIMAL in Spark's VARIANT, and the VARIANT's own text dropped what the
    local engine's double keeps: `cast(x AS STRING)` of 30.0 was '30' on Spark and '30.0' locally (a kept fuzzer
    case). Cast to text, a field no type is known for now gives a DECIMAL's text from its double. (-0.0 is left
    out: the VARIANT's decimal has no negative zero.)"""
    _spool(tmp_path, [f'{{"i":{i},"x":{n}}}' for i, n in enumerate(NUMBERS_AS_TEXT)])
    text = SPOOL + f"""
      - annotate: {{id: a, set: {{v: "{expr}"}}, on_error: skip}}
"""
    local = sorted((r["i"], r["v"]) for r in _local(text, tmp_path).values())
    assert len(local) == len(NUMBERS_AS_TEXT)
    assert local[0] == (0, {"cast(x AS STRING)": "30.0", "concat(cast(x AS STRING), '!')": "30.0!"}.get(expr, True))
    assert local == sorted((r["i"], r["v"]) for r in _spark(spark, text, tmp_path).values())


TEXT_CALLS = {
    "upper(x)": ["30.0", "1.25", "A", None], "length(x)": [4, 4, 1, None], "lpad(x, 6, '*')":
    ["**30.0", "**1.25", "*****a", None], "replace(x, '.', ',')": ["30,0", "1,25", "a", None],
    "substring(x, 2)": ["0.0", ".25", "", None], "trim(x)": ["30.0", "1.25", "a", None],
    "x RLIKE '0$'": [True, False, False, None], "startswith(x, '3')": [True, False, False, None],
}


@pytest.mark.parametrize("call", sorted(TEXT_CALLS))
def test_a_json_fraction_as_a_text_functions_argument_agrees(spark: Any, tmp_path: Path, call: str) -> None:
    """A string function given a field no type is known for reads it as text, as ``cast(x AS STRING)`` does (the
    test above): ``upper(x)`` of 30.0 is '30.0' on both engines. Given the field's VARIANT, Spark's own conversion
    dropped the DECIMAL's fraction zeros ('30'), a difference docs/spark.md listed until it was fixed. (The field
    holds text too, so no one type is sampled for it.)"""
    _spool(tmp_path, ['{"i":0,"x":30.0}', '{"i":1,"x":1.25}', '{"i":2,"x":"a"}', '{"i":3}'])
    text = SPOOL + f"""
      - annotate: {{id: a, set: {{v: "{call}"}}, on_error: skip}}
"""
    expected = list(enumerate(TEXT_CALLS[call]))
    assert sorted((r["i"], r.get("v")) for r in _local(text, tmp_path).values()) == expected
    assert sorted((r["i"], r.get("v")) for r in _spark(spark, text, tmp_path).values()) == expected


MIN_MAX_WINDOW = SPOOL_EVENT_TIME + """
      - window: {id: w, key: [k], tumbling: 1m, watermark: 60s, aggs: {lo: min(x), hi: max(x)}, on_error: skip}
"""


@pytest.mark.parametrize(("values", "lo", "hi"), [
    (["10", "7", "oops", "1e3", " 5", "-2.50"], "-2.50", "oops"),  # all text: Spark types the field STRING
    ([8, "10", "7", 2.5, "oops", "-2"], "-2", "oops"),  # numbers and text: a field of several kinds (a VARIANT)
    ([8, "10", "7", 2.5, "8"], 2.5, "10"),
    ([7, "7", "7.0"], 7, "7.0"),  # a number before its equal text
    ([True, "b", 3, False], 3, True),  # booleans after text, false before true
])
def test_min_and_max_order_numbers_and_text_alike_on_both_engines(spark: Any, tmp_path: Path, values: list[Any],
                                                                   lo: Any, hi: Any) -> None:
    """docs/state.md's order for min/max: numbers by value, text that reads as a number by that number after the
    number itself, other text last, as text; the value as it came. Expected values worked by hand; the local
    engine and Spark both give them (Spark compiles the order as min_by/max_by over a key: windows._order_key)."""
    _spool(tmp_path, [orjson.dumps({"t": i, "k": "a", "x": v}).decode() for i, v in enumerate(values)])
    for engine in (_local(MIN_MAX_WINDOW, tmp_path), _spark(spark, MIN_MAX_WINDOW, tmp_path)):
        (result,) = engine.values()
        assert (result["lo"], result["hi"]) == (lo, hi)
        assert type(result["lo"]) is type(lo) and type(result["hi"]) is type(hi)  # as it came


def test_pinned_difference_min_and_max_of_arrays_in_a_field_of_several_kinds(spark: Any, tmp_path: Path) -> None:
    """docs/spark.md, Implicit casts of mixed types: arrays in a min/max over a field that also holds text. Locally
    arrays compare as SQL compares them ([9] < [10]) and one beside text fails its comparison, which takes the
    later event by the step's on_error (an order of arrival Spark does not keep within a micro-batch); Spark
    orders them after text and booleans, by their JSON text."""
    _spool(tmp_path, [orjson.dumps({"t": i, "k": "a", "x": v}).decode() for i, v in enumerate([[10], [9], "a"])])
    (local,) = _local(MIN_MAX_WINDOW, tmp_path).values()
    (remote,) = _spark(spark, MIN_MAX_WINDOW, tmp_path).values()
    assert (local["lo"], local["hi"]) == ([9], [10])  # the text's event failed (skipped)
    assert (remote["lo"], remote["hi"]) == ("a", [9])
