"""INTERVAL arithmetic on the Spark engine against the local engine, over fields (text, as JSON has no timestamps),
with a value that is not a timestamp in the middle, failing one event only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from edgewise.config import load_text_plan
from edgewise.engine.spark.job import SparkJob, SparkOptions
from edgewise.jsonio import dumps
from edgewise.testing import run_sources


def test_interval_arithmetic_over_fields_agrees_with_the_local_engine(spark: Any, tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    events = [{"ts": "2024-01-31T10:00:00Z", "d": "2024-01-31"}, {"ts": "2024-02-29 23:30:00", "d": "2023-03-31"},
              {"ts": "not a time", "d": "2024-01-01"}, {"ts": None, "d": None}, {"d": "2024-12-31"}]
    (tmp_path / "in" / "part-1.ndjson").write_text("".join(json.dumps(e) + "\n" for e in events))
    steps = """[{annotate: {id: shift, on_error: dead, set: {
        later: "ts + INTERVAL 2 DAYS",
        earlier: "to_timestamp(ts) - INTERVAL '90' MINUTE",
        next_month: "to_date(d) + INTERVAL '1' MONTH",
        soon: "ts + INTERVAL 2 HOURS 30 MINUTES",
        overdue: "to_timestamp(ts) + INTERVAL 1 DAY < timestamp'2024-02-02 00:00:00'",
        before: "to_timestamp(ts) < timestamp'2024-02-01 00:00:00'"}}}]"""
    text = (f"version: 1\nsources: [{{id: f, type: file, path: in}}]\npipelines:\n  - id: p\n    steps: {steps}\n"
            "sinks: [{id: dead, type: stdout}]\n")
    plan = load_text_plan(text, file=str(tmp_path / "pipeline.yaml"), base_dir=str(tmp_path))
    ran = run_sources(plan, [plan.source(s) for s in plan.sources])
    local = {i: orjson.loads(dumps(payload)) for i, payload in ran.produced["p"]}  # as a sink writes it
    on_spark: dict[str, dict[str, Any]] = {}

    def collect(route: str, batch_id: int, rows: list[tuple[str, str]]) -> None:
        on_spark.update((f"{route}/{i}" if route else i, orjson.loads(record)) for i, record in rows)

    SparkJob(spark, plan, SparkOptions(checkpoint=str(tmp_path / "ck"), once=True), collect=collect).run()
    letters = {k: v for k, v in on_spark.items() if k.startswith("dead/")}
    assert {k: v for k, v in on_spark.items() if k not in letters} == local
    assert [(k, v["error"]["type"]) for k, v in letters.items()] == [
        ("dead/f:part-1.ndjson:3#shift", "CAST_INVALID_INPUT")]
    assert local["f:part-1.ndjson:1"]["later"] == "2024-02-02 10:00:00"
    assert local["f:part-1.ndjson:2"]["next_month"] == "2023-04-30"
    assert "f:part-1.ndjson:3" not in local  # dead-lettered (CAST_INVALID_INPUT), on both engines alike
    assert local["f:part-1.ndjson:4"]["later"] is None


def test_timestamps_under_on_error_fail_the_event_not_the_query(spark: Any, tmp_path: Path) -> None:
    """Found writing the test above: with on_error set, a comparison of two TIMESTAMPs failed the query's analysis
    (a text branch never taken compared BIGINT with TIMESTAMP), and to_timestamp of text that is not a time failed
    the query (under ANSI it is a CAST) where the local engine fails the event."""
    (tmp_path / "in").mkdir()
    events = [{"ts": "2024-01-31T10:00:00Z"}, {"ts": "whenever"}, {"ts": "2024-03-01 00:00:00"}]
    (tmp_path / "in" / "part-1.ndjson").write_text("".join(json.dumps(e) + "\n" for e in events))
    text = """version: 1
sources: [{id: f, type: file, path: in}]
pipelines:
  - id: p
    steps:
      - filter: {id: recent, where: "to_timestamp(ts) >= timestamp'2024-02-01 00:00:00'", on_error: skip}
"""
    plan = load_text_plan(text, file=str(tmp_path / "pipeline.yaml"), base_dir=str(tmp_path))
    local = {i: orjson.loads(dumps(p)) for i, p in run_sources(plan, [plan.source(s) for s in plan.sources])
             .produced["p"]}
    on_spark: dict[str, Any] = {}
    SparkJob(spark, plan, SparkOptions(checkpoint=str(tmp_path / "ck"), once=True),
             collect=lambda route, _, rows: on_spark.update((i, orjson.loads(r)) for i, r in rows)).run()
    assert on_spark == local == {"f:part-1.ndjson:3": {"ts": "2024-03-01 00:00:00"}}
