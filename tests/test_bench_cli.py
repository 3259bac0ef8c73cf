"""`edgewise bench`: a pipeline file timed on the local engine over its own input. Only what it counts is
checked (timings vary); the counts are compared with `edgewise run` over the same input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgewise.cli import main
from tests.conftest import ROOT

PIPELINE = """
version: 1
sources: [{id: gen, type: generator, workload: ysb, count: 3000, seed: 7}]
pipelines:
  - id: views
    steps:
      - filter: {id: views-only, where: "event_type = 'view'"}
      - transform: {id: project, ops: [keep: [ad_id, event_time]]}
  - id: per-type
    steps:
      - aggregate: {id: counts, key: [event_type], aggs: {n: count()}, into: stats}
"""


def _run_counts(pipeline: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, int]:
    assert main(["run", str(pipeline), *extra]) == 0
    counts: dict[str, int] = {}
    out = capsys.readouterr().out
    views = [json.loads(line) for line in out.splitlines()]
    counts["views"] = sum(1 for v in views if set(v) == {"ad_id", "event_time"})
    counts["per-type"] = sum(1 for v in views if "stats" in v)
    assert counts["views"] + counts["per-type"] == len(views)
    return counts


def test_bench_counts_what_run_gives_and_times_every_step(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(PIPELINE)
    expected = _run_counts(pipeline, capsys)
    assert main(["bench", str(pipeline), "--rounds", "3", "--json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["events"] == 3000 and len(result["round_seconds"]) == 3
    assert result["events_out"] == expected
    assert set(result["step_share"]) == {"views/views-only", "views/project", "per-type/counts"}
    assert 0 < sum(result["step_share"].values()) <= 1
    assert result["peak_memory_mb"] > 0
    assert "round 3/3" in captured.err  # progress, one line per round


def test_bench_reads_an_input_file_and_stops_at_events(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("version: 1\npipelines: [{id: big, steps: [{filter: {id: f, where: 'x > 5'}}]}]\n")
    data = tmp_path / "in.ndjson"
    data.write_text("".join(json.dumps({"x": i}) + "\n" for i in range(20)))
    assert main(["bench", str(pipeline), str(data), "--events", "10", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "10 events" in out and "out: big 4" in out and "big/f" in out


@pytest.mark.parametrize(("text", "problem"), [
    ("version: 1\nsources: [{id: m, type: mqtt, url: 'mqtt://127.0.0.1:1883', topics: [t]}]\n"
     "pipelines: [{id: p, steps: []}]\n", "does not end by itself"),
    ("version: 1\npipelines: [{id: p, steps: []}]\n", "declares no source"),
])
def test_bench_refuses_input_it_cannot_read_to_the_end(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       text: str, problem: str) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(text)
    assert main(["bench", str(pipeline)]) == 2
    assert problem in capsys.readouterr().err


def test_bench_of_the_ysb_example_names_its_steps(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", str(ROOT / "examples" / "ysb" / "pipeline.yaml"), "--events", "5000", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "events/s" in out and "views/campaign" in out and "5,000 events" in out
