"""The command: `edgewise run`, exit codes, `explain`, `test`, `functions`, and the README's commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgewise.cli import main
from tests.conftest import ROOT

PIPELINE = """\
version: 1
pipelines:
  - id: views
    steps:
      - filter: {id: v, where: "kind = 'view'"}
      - annotate: {id: r, set: {ratio: "1 / n"}}
"""


def edgewise(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "edgewise", *args], input=stdin, capture_output=True,
                          cwd=ROOT, timeout=60, check=False)


def test_run_reads_stdin_and_writes_ndjson(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(PIPELINE)
    done = edgewise("run", str(p), stdin=b'{"kind":"view","n":4}\n{"kind":"click","n":1}\n')
    assert done.returncode == 0, done.stderr
    assert [json.loads(x) for x in done.stdout.splitlines()] == [{"kind": "view", "n": 4, "ratio": 0.25}]


def test_run_exit_code_1_when_an_event_fails(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(PIPELINE)
    data = tmp_path / "in.ndjson"
    data.write_text('{"kind":"view","n":0}\n{"kind":"view","n":2}\n')
    done = edgewise("run", str(p), str(data))
    assert done.returncode == 1
    assert [json.loads(x) for x in done.stdout.splitlines()] == [{"kind": "view", "n": 2, "ratio": 0.5}]
    assert b"DIVIDE_BY_ZERO" in done.stderr and b"input:in.ndjson:1" in done.stderr


def test_run_exit_code_2_on_config_error(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(PIPELINE.replace("1 / n", "1 /"))
    done = edgewise("run", str(p))
    assert done.returncode == 2
    assert b"p.yaml:6:" in done.stderr and b"Traceback" not in done.stderr


def test_run_one_pipeline(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(PIPELINE + "  - id: all\n    steps: []\n")
    done = edgewise("run", str(p), "--pipeline", "all", "-q", stdin=b'{"kind":"x"}\n')
    assert done.returncode == 0 and done.stdout == b'{"kind":"x"}\n' and done.stderr == b""


def test_explain_shows_compiled_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(ROOT / "examples" / "hsl" / "pipeline.yaml")]) == 0
    out = capsys.readouterr().out
    assert "pipeline positions:" in out and "GEO_CELL(lat, long, 14)" in out and "-> positions-out" in out


def test_edgewise_test_runs_the_conformance_suite(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", str(ROOT / "conformance"), str(ROOT / "examples")]) == 0
    out = capsys.readouterr().out
    assert " 0 failed" in out


def test_edgewise_test_reports_a_wrong_expectation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fixture = tmp_path / "bad.test.yaml"
    fixture.write_text("""
pipeline:
  version: 1
  pipelines: [{id: p, steps: [{filter: {id: f, where: "x > 1"}}]}]
tests:
  - name: wrong
    input: [{x: 2}, {x: 0}]
    expect: [{x: 0}]
""")
    assert main(["test", str(fixture)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and 'missing:    {"x":0}' in out and 'unexpected: {"x":2}' in out


def test_functions_lists_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["functions"]) == 0
    assert "geo_cell" in capsys.readouterr().out


def test_readme_run_command_works_on_bundled_data(tmp_path: Path) -> None:
    # the example as it stands, in a copy of the tree whose out/ is the test's own: nothing lands in the repo's out/
    (tmp_path / "examples" / "hsl").mkdir(parents=True)
    (tmp_path / "data").symlink_to(ROOT / "data")
    example = tmp_path / "examples" / "hsl" / "pipeline.yaml"
    example.write_text((ROOT / "examples" / "hsl" / "pipeline.yaml").read_text())
    done = edgewise("run", str(example))
    assert done.returncode == 0, done.stderr
    assert list((tmp_path / "out" / "hsl-positions").glob("*.ndjson"))
    speeding = [json.loads(x) for x in done.stdout.splitlines()]
    assert speeding and all(s["speed_kmh"] > 40 for s in speeding)
    assert b"3690 events in" in done.stderr


def test_public_api_is_exactly_all() -> None:
    import edgewise

    modules = {"cli", "config", "errors", "events", "expr", "steps", "engine", "sinks", "sources", "jsonio",
               "testing", "clock", "durations", "annotations", "state", "daemon", "diff", "replay", "progress",
               "entwine", "binge", "bench", "wording", "tracecontext", "cachedir", "placement", "schema", "collector",
               "declare"}
    public = {n for n in dir(edgewise) if not n.startswith("_")} - modules
    assert public == set(edgewise.__all__) - {"__version__"}


def test_docs_function_table_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["functions", "--markdown"]) == 0
    table = capsys.readouterr().out.strip()
    assert table in (ROOT / "docs" / "expressions.md").read_text(encoding="utf-8")


def test_an_internal_error_is_one_line_and_exit_70(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """No traceback reaches a user: an unexpected exception is one line naming the command and where it came
    from; --debug shows the traceback."""
    import edgewise.engine.local as local

    def broken(self: object, batch: object) -> object:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(local.LocalEngine, "process", broken)
    p = tmp_path / "p.yaml"
    p.write_text(PIPELINE)
    data = tmp_path / "in.ndjson"
    data.write_text('{"kind":"view","n":1}\n')
    assert main(["run", str(p), str(data)]) == 70
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "internal error" in line]
    assert len(lines) == 1 and "Traceback" not in err
    assert "`edgewise run`: RuntimeError: boom (at edgewise/" in lines[0] and "--debug" in lines[0]
    with pytest.raises(RuntimeError, match="boom"):
        main(["--debug", "run", str(p), str(data)])
    # the hint's own form works too: the flag after the command
    with pytest.raises(RuntimeError, match="boom"):
        main(["run", str(p), str(data), "--debug"])
    assert main(["run", str(p), str(data)]) == 70  # and without it, neither form leaks into the next call


def test_keep_open_without_once_is_refused_before_spark_starts(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["spark", str(ROOT / "examples" / "ysb" / "windowed.yaml"), "--keep-open"])
    assert code == 2
    assert "--keep-open goes with --once" in capsys.readouterr().err


def test_only_the_named_command_is_built_and_every_command_is_still_listed(capsys: pytest.CaptureFixture[str]
                                                                           ) -> None:
    """The parser builds the options of the command a run names (``cli._Commands``); help, a misspelt command and
    a command after a top-level option read as with every command built."""
    from edgewise.cli import build_parser

    full = {name: sorted(p._option_string_actions) for name, p in build_parser().
            _subparsers._group_actions[0].choices.items()}  # type: ignore[union-attr]
    assert len(full) >= 17
    for argv in (["run", "p.yaml"], ["--debug", "serve", "p.yaml"], ["keygen", "k"]):
        name = next(a for a in argv if not a.startswith("-"))
        built = build_parser(argv)._subparsers._group_actions[0].choices  # type: ignore[union-attr]
        assert list(built) == [name]
        assert sorted(built[name]._option_string_actions) == full[name]
    with pytest.raises(SystemExit):
        main(["rnu", "p.yaml"])
    err = capsys.readouterr().err
    assert "invalid choice: 'rnu'" in err and all(f"'{name}'" in err for name in full)
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in full)


@pytest.mark.parametrize("columns", ["", "40", "132", "not a number", "0"])
def test_help_is_as_wide_as_shutil_says_the_terminal_is(columns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The help's width is found without importing shutil (cli._columns); shutil's own answer is the oracle, with
    COLUMNS set or not and standard output a pipe (no terminal)."""
    import shutil

    from edgewise.cli import _columns

    if columns:
        monkeypatch.setenv("COLUMNS", columns)
    else:
        monkeypatch.delenv("COLUMNS", raising=False)
    assert _columns() == shutil.get_terminal_size().columns


def test_a_run_does_not_import_what_only_help_or_the_daemon_needs(tmp_path: Path) -> None:
    """shutil (argparse's way to the terminal's width), concurrent.futures and tempfile (a cache write) are not
    imported by a run whose pipeline file's caches are warm."""
    (tmp_path / "in.ndjson").write_text('{"a": 1}\n')
    (tmp_path / "p.yaml").write_text("version: 1\nsources:\n  - {id: in, type: file, path: in.ndjson}\n"
                                     "pipelines:\n  - id: p\n    steps:\n      - filter: {id: f, where: 'a = 1'}\n")
    probe = ("import sys\nfrom edgewise.cli import main\nmain(['run', '--quiet', 'p.yaml'])\n"
             "print(sorted({'shutil', 'concurrent.futures', 'tempfile'} & set(sys.modules)), file=sys.stderr)\n")
    env = {**os.environ, "EDGEWISE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("EDGEWISE_LOAD_CACHE", None)
    runs = [subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                           check=True) for _ in range(2)]
    assert "tempfile" in runs[0].stderr  # the first run writes the caches: the probe sees imports
    assert runs[1].stderr.strip() == "[]"
