"""The declared schema's check on Spark (``sources.held_to_schema``: Spark's own ``schema_of_variant`` of each
value) against the local engine's (``edgewise/schema.misfit``: Python's types of the decoded JSON), value by value,
over every checked type and JSON values of every kind, the edge ones first (3.0 and -0.0 are DECIMAL(1,0) in a
VARIANT; 2^63 is no BIGINT)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewise.schema import BOOLEAN, INTEGER, NUMBER, Column, checked_columns, misfit, read_as_declared
from tests.spark.test_messy_input import _local, _spark

TYPES = ["BIGINT", "INT", "DOUBLE", "FLOAT", "DECIMAL(10,2)", "STRING", "VARCHAR(5)", "BOOLEAN"]
EDGE_VALUES = ["1", "-7", "3.0", "-0.0", "2.5", "1e3", "1.5e300", str(2 ** 63 - 1), str(2 ** 63), str(-(2 ** 63)),
               str(2 ** 70), '"7"', '"2.5"', '""', '"true"', "true", "false", "null", "{}", '{"a": 1}', "[]", "[1]"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
    max_leaves=3).map(lambda v: orjson.dumps(v).decode())


def _verdicts(spark: Any, values: list[str]) -> list[tuple[str, str, bool, bool]]:
    """(value, declared type, fits locally, fits on Spark) for each checked type and JSON value."""
    from edgewise.engine.spark.sources import held_to_schema

    cases = [(t, v) for t in TYPES for v in values]
    frame = spark.createDataFrame([(i, t, '{"v": ' + v + "}") for i, (t, v) in enumerate(cases)],
                                  "i BIGINT, t STRING, line STRING")
    checked = None
    for declared in TYPES:  # one query for every type: a Spark job each would cost the suite seconds
        chosen = frame.where(frame.t == declared).selectExpr("i", "parse_json(line) AS _src", "'' AS _to",
                                                              "CAST(NULL AS STRING) AS _record")
        one = held_to_schema(chosen, checked_columns(f"v {declared}")).select("i", "_to")
        checked = one if checked is None else checked.unionByName(one)
    assert checked is not None
    on_spark = {r["i"]: r["_to"] == "" for r in checked.collect()}
    return [(v, t, misfit({"v": orjson.loads(v)}, checked_columns(f"v {t}")) is None, on_spark[i])
            for i, (t, v) in enumerate(cases)]


def _disagreements(spark: Any, values: list[str]) -> list[tuple[str, str, bool, bool]]:
    return [v for v in _verdicts(spark, values) if v[2] != v[3]]


def test_both_engines_take_the_same_edge_values_for_each_declared_type(spark: Any) -> None:
    verdicts = _verdicts(spark, EDGE_VALUES)
    assert not [v for v in verdicts if v[2] != v[3]]
    # and the verdicts are not all alike: each type takes some of them and refuses others
    for declared in TYPES:
        taken = {value for value, t, fit, _ in verdicts if t == declared and fit}
        assert "null" in taken and 1 < len(taken) < len(EDGE_VALUES), (declared, taken)


@settings(max_examples=3, deadline=None, derandomize=True)
@given(values=st.lists(json_values, min_size=20, max_size=40))
def test_both_engines_take_the_same_generated_values(spark: Any, values: list[str]) -> None:
    assert not _disagreements(spark, values)


def test_a_declared_type_over_csv_text_is_read_alike(spark: Any, tmp_path: Path) -> None:
    """CSV cells are text. With ``x DOUBLE, n BIGINT`` declared, both engines read ``'2.5'`` as 2.5, ``' 3 '`` as
    3, a blank cell as NULL, and report the rows whose cells are not of the declared kind as malformed (found as a
    known defect: Spark read the text at its type, the local engine as text, and failed ``x > 0``)."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "rows.csv").write_text("k,x,n\na,2.5, 3 \nb,7,1\nc,-1,2\nd,abc,4\ne,,5\nf,1e1,1.5\n")
    text = ('version: 1\nsources: [{id: rows, type: file, path: in, format: csv, '
            'schema: "k STRING, x DOUBLE, n BIGINT"}]\n'
            "pipelines:\n  - id: p\n    steps:\n      - filter: {id: f, where: \"coalesce(x, 1) > 0\"}\n"
            "      - annotate: {id: a, set: {y: \"x * n\"}}\n")
    local = _local(text, tmp_path)
    assert {r["k"]: (r["x"], r["n"], r["y"]) for r in local.values()} == {
        "a": (2.5, 3, 7.5), "b": (7.0, 1, 7.0), "e": (None, 5, None)}
    assert _spark(spark, text, tmp_path) == local


_SPARK_TYPE = {INTEGER: "BIGINT", NUMBER: "DOUBLE", BOOLEAN: "BOOLEAN"}
cell_texts = st.text(alphabet=" +-.0123456789eEtruefalsyno", max_size=8) | st.sampled_from(
    ["9223372036854775807", "9223372036854775808", "-9223372036854775808", "1e308", "1e309", "NaN", "Infinity",
     ".5", "5.", "1.5", "TRUE", " yes ", "0", "1", "007", "+7", "1_0"])


@settings(max_examples=4, deadline=None, derandomize=True)
@given(texts=st.lists(cell_texts, min_size=30, max_size=60))
def test_a_text_edgewise_reads_at_a_declared_type_is_what_spark_casts_it_to(spark: Any, texts: list[str]) -> None:
    """Spark SQL's own ``try_cast`` is the oracle for reading a cell's text at its declared type: where edgewise
    reads a value, Spark casts the text to the same value; where Spark's cast fails, edgewise reads nothing
    (edgewise reads less than Spark: no NaN or Infinity, no fraction in an integer; docs/pipeline-file.md)."""
    cases = [(kind, text) for kind in _SPARK_TYPE for text in texts]
    frame = spark.createDataFrame([(i, k, t) for i, (k, t) in enumerate(cases)], "i BIGINT, k STRING, t STRING")
    cast = " ".join(f"WHEN k = '{kind}' THEN to_json(named_struct('v', try_cast(t AS {sql})))"
                    for kind, sql in _SPARK_TYPE.items())
    on_spark = {r["i"]: orjson.loads(r["v"]).get("v") for r in frame.selectExpr("i", f"CASE {cast} END AS v").collect()}
    for i, (kind, text) in enumerate(cases):
        column = Column("v", _SPARK_TYPE[kind].lower(), kind)
        record, problem = read_as_declared({"v": text}, [column])
        if problem is None and text.strip():
            assert record["v"] == on_spark[i] and type(record["v"]) is type(on_spark[i]), (kind, text, on_spark[i])
        if on_spark[i] is None:
            assert problem is not None or record["v"] is None, (kind, text)