"""The declared schema's check on Spark (``sources.held_to_schema``: Spark's own ``schema_of_variant`` of each
value) against the local engine's (``edgewise/schema.misfit``: Python's types of the decoded JSON), value by value,
over every checked type and JSON values of every kind, the edge ones first (3.0 and -0.0 are DECIMAL(1,0) in a
VARIANT; 2^63 is no BIGINT)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewise.schema import checked_columns, misfit
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


@pytest.mark.xfail(strict=True, reason="known defect: a format that decodes text (csv, clf, regex) is not held to "
                   "a declared type; Spark reads its text at that type, the local engine as text")
def test_a_declared_type_over_csv_text_is_read_alike(spark: Any, tmp_path: Path) -> None:
    """CSV cells are text. With ``x DOUBLE`` declared, Spark reads ``'2.5'`` as 2.5 and keeps it for ``x > 0``;
    the local engine compares the text with an integer, casts it to BIGINT and fails it. Not checked yet (only
    JSON-typed sources are, ``schema.held_columns``): the two engines must first read a declared type out of text
    alike (a cast at decoding on both)."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "rows.csv").write_text("k,x\na,2.5\nb,7\nc,-1\n")
    text = ('version: 1\nsources: [{id: rows, type: file, path: in, format: csv, schema: "k STRING, x DOUBLE"}]\n'
            "pipelines:\n  - id: p\n    steps: [{filter: {id: f, where: \"x > 0\", on_error: skip}}]\n")
    assert sorted(r["k"] for r in _spark(spark, text, tmp_path).values()) == sorted(
        r["k"] for r in _local(text, tmp_path).values())
