"""What a new user trips over in the first five minutes (issue 40), each pinned: the command that recognises the
other command's file, a missing input's exit code, typos read as syntax errors, counted nouns, a file sink rerun,
bytes that are not UTF-8."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgewise.cli import main
from tests.conftest import ROOT

PLAIN = "version: 1\npipelines:\n  - id: p\n    steps: []\n"


def edgewise(*args: str, stdin: bytes = b"", cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "edgewise", *args], input=stdin, capture_output=True,
                          cwd=cwd, timeout=120)


def test_validate_recognises_a_test_file_and_test_a_pipeline_file(capsys: pytest.CaptureFixture[str]) -> None:
    fixture = str(ROOT / "examples" / "hsl" / "pipeline.test.yaml")
    pipeline = str(ROOT / "examples" / "hsl" / "pipeline.yaml")
    assert main(["validate", fixture]) == 2
    err = capsys.readouterr().err
    assert f"this is a test file (pipeline unit tests: `pipeline:` and `tests:`), not a pipeline file: run its " \
           f"tests with `edgewise test {fixture}`" in err
    assert "version" not in err  # not "missing required field 'version'"
    assert main(["test", pipeline]) == 2
    err = capsys.readouterr().err
    assert "this is a pipeline file, not a test file" in err and f"`edgewise validate {pipeline}`" in err
    assert f"the test files beside it: {fixture}" in err


def test_a_missing_input_file_is_exit_2_as_a_missing_pipeline_file_is(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(PLAIN)
    (tmp_path / "src.yaml").write_text(
        "version: 1\nsources: [{id: f, type: file, path: nowhere/*.ndjson}]\npipelines: [{id: p, steps: []}]\n")
    for args in (["run", "p.yaml", "missing.ndjson"], ["run", "src.yaml"], ["run", "missing.yaml"]):
        done = edgewise(*args, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert b"Traceback" not in done.stderr
    assert b"no file matches 'missing.ndjson'" in edgewise("run", "p.yaml", "missing.ndjson", cwd=tmp_path).stderr


@pytest.mark.parametrize(("where", "column"), [("temp > > 1", 8), ("temp < < 1", 8), ("a >  > b", 6)])
def test_two_comparison_signs_apart_are_a_syntax_error(tmp_path: Path, where: str, column: int,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(f"version: 1\npipelines:\n  - id: p\n    steps:\n      - filter: {{id: f, where: \"{where}\"}}\n")
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err
    assert f"does not parse: syntax error at column {column}" in err and "SHIFT" not in err.upper()


def test_a_comparison_with_a_sign_in_a_string_still_parses(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        "version: 1\npipelines:\n  - id: p\n    steps:\n      - filter: {id: f, where: \"s > '>' AND t >= 1\"}\n")
    assert main(["validate", str(tmp_path / "p.yaml")]) == 0


def test_counts_are_written_with_their_noun_in_the_right_number(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.yaml").write_text(PLAIN)
    assert main(["validate", str(tmp_path / "p.yaml")]) == 0
    assert "ok (1 pipeline, 0 steps, 0 sources, 0 sinks)" in capsys.readouterr().out
    (tmp_path / "one.ndjson").write_text('{"a": 1}\n')
    assert main(["run", str(tmp_path / "p.yaml"), str(tmp_path / "one.ndjson")]) == 0
    assert "edgewise: 1 event in;" in capsys.readouterr().err


def test_bytes_that_are_not_utf8_are_reported_as_such_and_the_rest_is_read(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(PLAIN)
    done = edgewise("run", "p.yaml", stdin=b'{"a": "\xff\xfe"}\n{"a": 2}\n', cwd=tmp_path)
    assert done.returncode == 1  # a malformed record
    assert b"<stdin>:1: not UTF-8 text: byte 0xff at byte 8 (invalid start byte)" in done.stderr
    assert b"surrogates" not in done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == [{"a": 2}]


def test_the_hsl_example_run_twice_writes_its_output_once(tmp_path: Path) -> None:
    """examples/hsl/pipeline.yaml's file sink has `mode: replace`; the default, `append`, keeps adding (a spool)."""
    (tmp_path / "examples" / "hsl").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "hsl" / "pipeline.yaml", tmp_path / "examples" / "hsl" / "pipeline.yaml")
    (tmp_path / "data").symlink_to(ROOT / "data")
    out = tmp_path / "out" / "hsl-positions"

    def lines() -> list[str]:
        return sorted(line for f in out.glob("*.ndjson") for line in f.read_text().splitlines())

    for _ in range(2):
        done = edgewise("run", "examples/hsl/pipeline.yaml", "-q", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        if _ == 0:
            first = lines()
    assert first and lines() == first
    (out / "notes.txt").write_text("mine")  # replace removes the sink's segments only
    text = (tmp_path / "examples" / "hsl" / "pipeline.yaml").read_text()
    (tmp_path / "examples" / "hsl" / "pipeline.yaml").write_text(text.replace("mode: replace", "mode: append"))
    assert edgewise("run", "examples/hsl/pipeline.yaml", "-q", cwd=tmp_path).returncode == 0
    assert sorted(lines()) == sorted(first + first)
    assert (out / "notes.txt").read_text() == "mine"


def test_the_pages_declare_their_icon_and_the_charts_labels_do_not_overlap() -> None:
    """A browser asks for /favicon.ico (a 404 in the log) unless the page names an icon; the ops chart drew
    '-2 min' over the y axis's '0' at the bottom left, which read '-0 min'."""
    from edgewise.daemon.live_api import map_page
    from edgewise.daemon.ui import DASHBOARD_HTML

    for page in (DASHBOARD_HTML, map_page()):
        assert '<link rel="icon" href="data:,">' in page
    assert "fillText('-2 min'" not in DASHBOARD_HTML
    assert "fillText('0/s',4,c.height-18)" in DASHBOARD_HTML and "fillText('2 min ago',4,c.height-4)" in DASHBOARD_HTML
