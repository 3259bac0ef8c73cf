"""``edgewise diff`` (issue 16): two versions of the HSL example over the bundled recordings, checked against what
each version's output says independently (``edgewise run`` of each file), plus the matching rules on small cases."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from edgewise.cli import main
from edgewise.diff import MISSING, compare_records, field_changes
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "hsl" / "pipeline.yaml"


def _version(tmp_path: Path, name: str, edit: tuple[str, str] | None = None) -> Path:
    """The HSL example as a file of its own in tmp_path (its data path made absolute), optionally edited."""
    text = EXAMPLE.read_text(encoding="utf-8").replace("../../data/", f"{ROOT}/data/")
    if edit is not None:
        assert edit[0] in text
        text = text.replace(*edit)
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _diff(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["diff", *args, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def _run_output(tmp_path: Path, pipeline: Path) -> list[dict[str, Any]]:
    """What ``edgewise run`` writes to the positions sink for this file: the oracle of what diff compares."""
    out = tmp_path / f"out-{pipeline.stem}"
    text = pipeline.read_text(encoding="utf-8").replace("path: ../../out/hsl-positions", f"path: {out}")
    text = text.replace(_sink_path(pipeline), str(out))
    run_file = tmp_path / f"run-{pipeline.name}"
    run_file.write_text(text, encoding="utf-8")
    subprocess.run([sys.executable, "-m", "edgewise", "run", str(run_file), "--quiet"], check=True,
                   capture_output=True)
    return [json.loads(line) for f in sorted(out.glob("*.ndjson")) for line in f.read_text().splitlines()]


def _sink_path(pipeline: Path) -> str:
    import yaml

    doc = yaml.safe_load(pipeline.read_text(encoding="utf-8"))
    return next(s["path"] for s in doc["sinks"] if s["id"] == "positions-out")


def _output(report: dict[str, Any], kind: str, output_id: str) -> dict[str, Any]:
    return next(o for o in report["outputs"] if o["kind"] == kind and o["id"] == output_id)


def test_an_unchanged_file_is_equal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = _version(tmp_path, "old.yaml"), _version(tmp_path, "new.yaml")
    code, report = _diff(capsys, str(old), str(new))
    assert code == 0 and report["equal"]
    assert report["events"] == {"old": 3690, "new": 3690}
    positions = _output(report, "sink", "positions-out")
    assert positions["old"] == positions["new"] == len(_run_output(tmp_path, old))
    assert all(s["old"] == s["new"] for s in report["steps"])


def test_a_changed_expression_shows_exactly_the_records_it_changes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = _version(tmp_path, "old.yaml")
    new = _version(tmp_path, "new.yaml", ('speed_kmh: "round(spd * 3.6, 1)"\n            minute',
                                          'speed_kmh: "round(spd * 3.6, 0)"\n            minute'))
    code, report = _diff(capsys, str(old), str(new))
    assert code == 1 and not report["equal"]
    positions = _output(report, "sink", "positions-out")
    assert positions["only_old"] == [] and positions["only_new"] == []
    # independently: the records `edgewise run` of the old file writes with a fractional speed are the changed ones
    written = _run_output(tmp_path, old)
    fractional = [r for r in written if r["speed_kmh"] is not None and r["speed_kmh"] != int(r["speed_kmh"])]
    assert len(positions["changed"]) == len(fractional) > 0
    for change in positions["changed"]:
        [f] = change["fields"]
        assert f["path"] == "speed_kmh" and abs(f["new"] - f["old"]) <= 0.5 and f["new"] == round(f["new"])
    # the other pipeline's expression was not changed
    assert _output(report, "pipeline", "speeding")["equal"]
    assert all(s["old"] == s["new"] for s in report["steps"])


def test_an_added_step_shows_what_it_removes_and_its_counters(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = _version(tmp_path, "old.yaml")
    new = _version(tmp_path, "new.yaml", ("      - transform:\n          id: shape",
                                          "      - filter: {id: moving, where: \"speed_kmh > 20\"}\n"
                                          "      - transform:\n          id: shape"))
    code, report = _diff(capsys, str(old), str(new))
    assert code == 1
    positions = _output(report, "sink", "positions-out")
    written = _run_output(tmp_path, old)
    slow = [r for r in written if r["speed_kmh"] is None or r["speed_kmh"] <= 20]
    assert sorted(json.dumps(r["record"], sort_keys=True) for r in positions["only_old"]) == sorted(
        json.dumps(r, sort_keys=True) for r in slow)
    assert positions["only_new"] == [] and positions["changed"] == []
    moving = next(s for s in report["steps"] if s["step"] == "moving")
    assert moving["old"] is None and moving["new"] == {"in": len(written), "filtered": len(slow)}
    shape = next(s for s in report["steps"] if s["step"] == "shape")
    assert shape["old"]["in"] == len(written) and shape["new"]["in"] == len(written) - len(slow)


def test_the_text_report_names_the_differences(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = _version(tmp_path, "old.yaml")
    new = _version(tmp_path, "new.yaml", ("where: \"spd * 3.6 > 40\"", "where: \"spd * 3.6 > 45\""))
    assert main(["diff", str(old), str(new), "--limit", "2"]) == 1
    text = capsys.readouterr().out
    # the recordings hold 10 speeds above 40 km/h, 6 of them above 45
    assert "pipeline speeding: 10 records in old, 6 in new: 4 only in old, 0 only in new, 0 changed" in text
    assert text.count("\n  - ") == 2 and "... and 2 more" in text  # --limit 2
    assert "* speeding/fast" in text and "filtered 3,486 -> 3,490" in text
    assert text.rstrip().endswith("different")


def test_an_invalid_version_is_a_configuration_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = _version(tmp_path, "old.yaml")
    new = _version(tmp_path, "new.yaml", ("where: \"spd * 3.6 > 40\"", "where: \"spd * 3.6 >\""))
    assert main(["diff", str(old), str(new)]) == 2
    assert "new.yaml" in capsys.readouterr().err


def test_records_pair_up_by_id_in_order_and_absent_is_not_null() -> None:
    old = [("a", {"v": 1}), ("a", {"v": 2}), ("b", {"v": None}), ("c", {"v": 1})]
    new = [("a", {"v": 1}), ("a", {"v": 3}), ("a", {"v": 4}), ("b", {}), ("c", {"v": 1.0})]
    d = compare_records("sink", "s", old, new)
    assert [(c.id, [(f.path, f.old, f.new) for f in c.fields]) for c in d.changed] == [
        ("a", [("v", 2, 3)]), ("b", [("v", None, MISSING)]), ("c", [("v", 1, 1.0)])]
    assert d.only_new == [("a", {"v": 4})] and d.only_old == []


def test_field_changes_descend_into_objects_only() -> None:
    assert field_changes({"a": [1, 2]}, {"a": [1, 3]})[0].path == "a"
    assert field_changes({"a": {"b": {"c": 1}}}, {"a": {"b": {"c": 1}}}) == []
    assert field_changes(1, "1")[0].path == "(record)"


def test_the_docs_example_is_what_the_command_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    doc = (ROOT / "docs" / "diff.md").read_text(encoding="utf-8")
    block = doc.split("$ edgewise diff examples/hsl/pipeline.yaml changed.yaml --limit 2\n", 1)[1].split("```")[0]
    shown = [line for line in block.splitlines() if line != "..."]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples" / "hsl").mkdir(parents=True)
    (tmp_path / "examples" / "hsl" / "pipeline.yaml").write_text(
        _version(tmp_path, "old.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    _version(tmp_path, "changed.yaml", ('speed_kmh: "round(spd * 3.6, 1)"\n            minute',
                                        'speed_kmh: "round(spd * 3.6, 0)"\n            minute'))
    assert main(["diff", "examples/hsl/pipeline.yaml", "changed.yaml", "--limit", "2"]) == 1
    printed = iter(capsys.readouterr().out.splitlines())
    assert all(line in printed for line in shown), "the docs show lines the command does not print, in this order"
