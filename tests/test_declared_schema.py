"""A source's declared ``schema`` held to each event (edgewise/schema.py): an event whose declared field holds a
value of another kind is malformed input, reported with its place and skipped before any step, on the local engine
(here) and on Spark (tests/spark/test_sources_and_sinks.py); the two engines' verdicts agree value by value
(tests/spark/test_declared_schema.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def test_only_sources_whose_events_come_as_json_are_held_to_it(tmp_path: Path) -> None:
    from edgewise.config import load_text_plan

    text = ('version: 1\nsources:\n  - {id: j, type: file, path: a.ndjson, schema: "x DOUBLE"}\n'
            '  - {id: c, type: file, path: a.csv, format: csv, schema: "x DOUBLE"}\n'
            '  - {id: h, type: http, schema: "x DOUBLE, at TIMESTAMP"}\n'
            "pipelines: [{id: p, steps: []}]\n")
    plan = load_text_plan(text, file=str(tmp_path / "p.yaml"), base_dir=str(tmp_path))
    assert {s.id: [c.name for c in held_columns(s)] for s in plan.sources} == {"j": ["x"], "c": [], "h": ["x"]}
