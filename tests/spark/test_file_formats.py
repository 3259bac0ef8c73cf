"""The ``file`` source's formats on Spark (hfp, csv, clf, regex, json): the same records, ids and malformed
records as the local engine, over the bundled HSL recordings (13 files, all named hfp.dump) and over inputs with a
bad record in the middle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from edgewise.config import load_text_plan
from edgewise.engine.spark.job import SparkJob, SparkOptions
from edgewise.testing import run_sources
from tests.conftest import ROOT


def both_engines(spark: Any, tmp_path: Path, source: str, steps: str = "[]") -> tuple[dict, dict, int, list[str]]:
    """(local results by id, Spark results by id, local malformed count, Spark's reports)."""
    text = f"version: 1\nsources: [{source}]\npipelines:\n  - id: p\n    steps: {steps}\n"
    plan = load_text_plan(text, file=str(tmp_path / "pipeline.yaml"), base_dir=str(tmp_path))
    local = run_sources(plan, [plan.source(s) for s in plan.sources])
    got: dict[str, Any] = {}
    reports: list[str] = []

    def collect(route: str, batch_id: int, rows: list[tuple[str, str]]) -> None:
        for event_id, record in rows:
            assert event_id not in got, f"id {event_id} written twice"
            got[event_id] = orjson.loads(record)

    SparkJob(spark, plan, SparkOptions(checkpoint=str(tmp_path / "ck"), once=True), collect=collect,
             report=reports.append).run()
    by_id = dict(local.produced.get("p", []))
    return by_id, got, local.errors.count("\n"), reports


def test_the_bundled_hsl_recordings_give_the_same_events_and_ids_on_both_engines(spark: Any, tmp_path: Path) -> None:
    recordings = ROOT / "data" / "hsl-hfp-apc-dumps"
    local, on_spark, malformed, _ = both_engines(
        spark, tmp_path, f"{{id: rec, type: file, path: '{recordings}/*/hfp.dump', format: hfp}}",
        "[{filter: {id: vp, where: \"event_type = 'VP'\"}}]")
    assert malformed == 0
    assert len(local) > 1000 and on_spark == local
    names = {i.rsplit(":", 1)[0] for i in on_spark}  # files named below the glob's fixed part, never alike
    assert len(names) == 13 and "rec:wrongServiceJourneySelectedAfterDeadRun/hfp.dump" in names


CASES = {
    "csv": ("data.csv", "format: csv", 'id,name,score\n1,ann,3.5\n2,"bo, b",x\n\n3,cy,\n'),
    "csv-nulls": ("flights.csv", "format: csv, null_values: ['NA', '']",
                  'year,dep_delay,tailnum\n2013,2,N14228\n2013,NA,NA\n2013,,N24211\n2013,"NA",x\n'),
    "clf": ("access.log", "format: clf",
            '127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /a.gif HTTP/1.0" 200 2326\n'
            "this is not a log line\n"
            '10.0.0.2 - - [10/Oct/2000:13:56:00 -0700] "POST /b HTTP/1.1" 404 - "-" "curl/8"\n'
            '66.249.66.1 - - [17/May/2015:10:05:03 +0000] "GET /robots.txt HTTP/1.1" 200 26 "-" '
            '"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)\n'),
    "regex": ("app.log", r"format: regex, regex: '^(?P<level>[A-Z]+) (?P<msg>.*)$'",
              "INFO started\nnope\nERROR disk full: 99%\n\nWARN ünïcode\n"),
    "json": ("doc.json", "format: json", json.dumps([{"a": 1}, {"a": [1, 2], "b": None}, {"c": {"d": "e"}}])),
    "json-bad": ("bad.json", "format: json", '[{"a": 1}, {"a": '),
    "hfp": ("rec.dump", "format: hfp",
            '2024-01-01T00:00:00Z /hfp/v2/journey/ongoing/vp/bus/0018/00001/1065/2/X (M)/06:05/1/3/60;24 '
            '{"VP": {"veh": 1, "spd": 3.5}}\n2024-01-01T00:00:01Z /hfp/v2/x {"VP": 3}\n'
            '2024-01-01T00:00:02Z /hfp/v2/journey/ongoing/due/bus/0018/00001 {"DUE": {"veh": 1}}\n'),
}


def test_a_single_file_path_reads_that_file_alone_on_both_engines(spark: Any, tmp_path: Path) -> None:
    # Spark's file stream takes a directory or a glob ("Option 'basePath' must be a directory" for a file); its
    # neighbours, one with a name the file's would match as a glob, are not read
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "flights[1].csv").write_text("origin,dep_delay\nEWR,NA\nJFK,3\n")
    (tmp_path / "data" / "flights1.csv").write_text("origin,dep_delay\nLGA,9\n")
    (tmp_path / "data" / "other.csv").write_text("origin,dep_delay\nLGA,7\n")
    local, on_spark, malformed, _ = both_engines(
        spark, tmp_path, "{id: f, type: file, path: 'data/flights[1].csv', format: csv, null_values: [NA]}")
    assert malformed == 0 and on_spark == local
    assert sorted(local.values(), key=str) == [{"origin": "EWR", "dep_delay": None},
                                               {"origin": "JFK", "dep_delay": "3"}]


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_format_with_a_bad_record_in_the_middle_matches_the_local_engine(spark: Any, tmp_path: Path,
                                                                              case: str) -> None:
    name, options, content = CASES[case]
    (tmp_path / "in" / "a").mkdir(parents=True)
    (tmp_path / "in" / "b").mkdir(parents=True)
    for sub in ("a", "b"):  # two same-named files: ids must keep them apart
        (tmp_path / "in" / sub / name).write_text(content, encoding="utf-8")
    local, on_spark, malformed, reports = both_engines(
        spark, tmp_path, f"{{id: f, type: file, path: 'in/*/{name}', {options}}}")
    assert on_spark == local
    assert len({i.rsplit(":", 1)[0] for i in local}) == (2 if local else 0)
    if malformed:
        assert reports and f"{malformed} " in " ".join(reports), reports
    else:
        assert not any("malformed" in r for r in reports), reports
