"""A source's declared ``schema`` held to each event (edgewise/schema.py): an event whose declared field holds a
value of another kind is malformed input, reported with its place and skipped before any step, on the local engine
(here) and on Spark (tests/spark/test_sources_and_sinks.py); the two engines' verdicts agree value by value
(tests/spark/test_declared_schema.py). A format that decodes text reads its declared fields from text first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from edgewise.errors import ConfigError
from edgewise.schema import (
    BOOLEAN,
    INTEGER,
    NUMBER,
    TEXT,
    checked_columns,
    declared_columns,
    fits,
    held_columns,
    kind_of,
    read_as_declared,
    reads_text,
)

PIPELINE = """\
version: 1
sources:
  - {id: in, type: file, path: in.ndjson, schema: "t BIGINT, k STRING, x DOUBLE, ok BOOLEAN, at TIMESTAMP"}
pipelines:
  - id: p
    steps: [{annotate: {id: a, set: {y: "x * 2"}}}]
"""


def test_events_that_do_not_fit_are_reported_and_skipped_and_the_others_go_on(tmp_path: Path) -> None:
    events = [
        {"t": 1, "k": "a", "x": 2.5},
        {"t": 2, "k": "a", "x": "2.5"},  # text in a DOUBLE: Spark would have cast it, the local engine failed it
        {"t": 3, "k": 5, "x": 1},  # a number in a STRING
        {"t": 4.0, "k": "b", "x": 1},  # 4.0 is no BIGINT
        {"t": 5, "ok": "yes"},  # text in a BOOLEAN
        {"t": 6, "k": None, "x": 3, "ok": True, "at": "not checked"},  # NULL fits; TIMESTAMP is not checked
        {"t": 7, "x": True},  # a boolean is no number
    ]
    (tmp_path / "in.ndjson").write_text("".join(json.dumps(e) + "\n" for e in events))
    (tmp_path / "p.yaml").write_text(PIPELINE)
    done = subprocess.run([sys.executable, "-m", "edgewise", "run", "p.yaml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert [json.loads(line)["t"] for line in done.stdout.splitlines()] == [1, 6]
    assert [json.loads(line)["y"] for line in done.stdout.splitlines()] == [5.0, 6]
    skipped = [line for line in done.stderr.splitlines() if "malformed record skipped" in line]
    assert [line.split("malformed record skipped: ")[1] for line in skipped] == [
        'in:in.ndjson:2: field x is declared DOUBLE but holds "2.5"',
        "in:in.ndjson:3: field k is declared STRING but holds 5",
        "in:in.ndjson:4: field t is declared BIGINT but holds 4.0",
        'in:in.ndjson:5: field ok is declared BOOLEAN but holds "yes"',
        "in:in.ndjson:7: field x is declared DOUBLE but holds true",
    ]
    assert done.returncode != 0 and "Traceback" not in done.stderr  # malformed input is reported as such


def test_the_kinds_each_declared_type_takes() -> None:
    assert [kind_of(t) for t in ("bigint", "int", "double", "decimal(10,2)", "string", "varchar(3)", "boolean",
                                 "timestamp", "array<bigint>", "struct<a: int>")] == [
        INTEGER, INTEGER, NUMBER, NUMBER, TEXT, TEXT, BOOLEAN, None, None, None]
    assert [c.name for c in checked_columns("a BIGINT, `odd name` STRING, s STRUCT<x: INT, y: DOUBLE>")] == [
        "a", "odd name"]
    assert fits(INTEGER, 2 ** 63 - 1) and not fits(INTEGER, 2 ** 63) and not fits(INTEGER, True)
    assert fits(NUMBER, 2 ** 70) and fits(NUMBER, -0.0) and not fits(NUMBER, "1")
    assert all(fits(kind, None) for kind in (INTEGER, NUMBER, TEXT, BOOLEAN))


def test_an_unreadable_schema_is_refused_at_load_with_its_place(tmp_path: Path) -> None:
    from edgewise.config import load_text_plan

    with pytest.raises(ValueError, match="cannot read the schema column"):
        declared_columns("x DOUBLE, 7up")
    text = PIPELINE.replace("t BIGINT, k STRING", "t BIGINT, -k STRING")
    with pytest.raises(ConfigError) as caught:
        load_text_plan(text, file=str(tmp_path / "p.yaml"), base_dir=str(tmp_path))
    assert "p.yaml:3" in str(caught.value) and "cannot read the schema column" in str(caught.value)


def test_every_source_with_a_schema_is_held_to_it_and_text_formats_read_their_text_first(tmp_path: Path) -> None:
    from edgewise.config import load_text_plan

    text = ('version: 1\nsources:\n  - {id: j, type: file, path: a.ndjson, schema: "x DOUBLE"}\n'
            '  - {id: c, type: file, path: a.csv, format: csv, schema: "x DOUBLE"}\n'
            '  - {id: h, type: http, schema: "x DOUBLE, at TIMESTAMP"}\n'
            "pipelines: [{id: p, steps: []}]\n")
    plan = load_text_plan(text, file=str(tmp_path / "p.yaml"), base_dir=str(tmp_path))
    assert {s.id: [c.name for c in held_columns(s)] for s in plan.sources} == {"j": ["x"], "c": ["x"], "h": ["x"]}
    assert [s.id for s in plan.sources if reads_text(s)] == ["c"]


@pytest.mark.parametrize(("declared", "text", "value"), [
    ("DOUBLE", "2.5", 2.5), ("DOUBLE", " 7 ", 7.0), ("DOUBLE", "-1e3", -1000.0), ("DOUBLE", ".5", 0.5),
    ("DOUBLE", "", None), ("DOUBLE", "   ", None), ("BIGINT", "+7", 7), ("BIGINT", "007", 7),
    ("BIGINT", str(2 ** 63 - 1), 2 ** 63 - 1), ("BOOLEAN", "TRUE", True), ("BOOLEAN", " no ", False),
    ("STRING", " 2.5 ", " 2.5 "), ("DECIMAL(10,2)", "1.25", 1.25),
])
def test_a_declared_field_is_read_from_text(declared: str, text: str, value: Any) -> None:
    payload = {"x": text, "other": "1"}
    record, problem = read_as_declared(payload, checked_columns(f"x {declared}"))
    assert problem is None and record == {"x": value, "other": "1"} and type(record["x"]) is type(value)
    assert payload == {"x": text, "other": "1"}  # the decoded record is not changed in place


@pytest.mark.parametrize(("declared", "value"), [
    ("DOUBLE", "abc"), ("DOUBLE", "NaN"), ("DOUBLE", "Infinity"), ("DOUBLE", "1e400"), ("DOUBLE", "1_0"),
    ("BIGINT", "1.5"), ("BIGINT", "7.0"), ("BIGINT", str(2 ** 63)), ("BOOLEAN", "maybe"), ("BIGINT", [1]),
])
def test_text_not_of_the_declared_kind_does_not_fit(declared: str, value: Any) -> None:
    _, problem = read_as_declared({"x": value}, checked_columns(f"x {declared}"))
    assert problem is not None and problem.startswith(f"field x is declared {declared} but holds ")


def test_csv_cells_are_read_at_their_declared_types_and_bad_cells_are_reported(tmp_path: Path) -> None:
    (tmp_path / "rows.csv").write_text("k,x\na,2.5\nb,abc\nc,\nd,-4\n")
    (tmp_path / "p.yaml").write_text(
        'version: 1\nsources: [{id: rows, type: file, path: rows.csv, format: csv, schema: "x DOUBLE"}]\n'
        'pipelines: [{id: p, steps: [{filter: {id: f, where: "x > 0 OR x IS NULL"}}]}]\n')
    done = subprocess.run([sys.executable, "-m", "edgewise", "run", "p.yaml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert [json.loads(line) for line in done.stdout.splitlines()] == [{"k": "a", "x": 2.5}, {"k": "c", "x": None}]
    skipped = [line.split("malformed record skipped: ")[1] for line in done.stderr.splitlines()
               if "malformed record skipped" in line]
    assert skipped == ['rows:rows.csv:3: field x is declared DOUBLE but holds "abc"']
    assert done.returncode != 0 and "Traceback" not in done.stderr
