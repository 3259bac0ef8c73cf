"""The Spark commands, in process (they reuse the test run's Spark session): `edgewise spark`, `explain --engine
spark`, `test --engine spark`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from edgewise.cli import main
from tests.conftest import ROOT, read_terminal

PIPELINE = """\
version: 1
event_time: "timestamp_seconds(t)"
sources: [{id: spool, type: file, path: in, schema: "t BIGINT, room STRING"}]
pipelines:
  - id: loud
    steps: [{filter: {id: over-60, where: "db > 60"}}]
    to: [out]
  - id: per-room
    steps:
      - window: {id: rooms, key: [room], tumbling: 1m, aggs: {n: count(), peak: max(db)}}
    to: [windows]
sinks:
  - {id: out, type: file, path: out/loud}
  - {id: windows, type: file, path: out/windows}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pipeline.yaml").write_text(PIPELINE, encoding="utf-8")
    (tmp_path / "in").mkdir()
    rows = [{"room": "a", "t": 1, "db": 70}, {"room": "a", "t": 30, "db": 50}, {"room": "b", "t": 61, "db": 80}]
    (tmp_path / "in" / "part-1.ndjson").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def _lines(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for p in sorted(directory.glob("*.ndjson")) for line in p.read_text().splitlines()]


def test_spark_once_runs_every_pipeline_and_flushes_windows(spark: Any, project: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["spark", str(project / "pipeline.yaml"), "--checkpoint", str(project / "ck"), "--once"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "2 pipelines on Spark 4" in err and "done:" in err
    assert "pipeline loud: micro-batch 0: 3 rows in, 2 to out (" in err  # the filter kept 2 of 3
    # the end-of-input marker is read with the data but is not input; the windows close in the batch after it
    assert "pipeline per-room: micro-batch 0: 3 rows in, nothing written (" in err
    assert "pipeline per-room: micro-batch 1: 0 rows in, 2 to windows (" in err
    assert sorted(r["db"] for r in _lines(project / "out" / "loud")) == [70, 80]
    windows = sorted((r["room"], r["window_start"], r["n"], r["peak"]) for r in _lines(project / "out" / "windows"))
    assert windows == [("a", "1970-01-01T00:00:00Z", 2, 70), ("b", "1970-01-01T00:01:00Z", 1, 80)]
    # a second run on the same checkpoint has nothing new to do and writes nothing twice
    assert main(["spark", str(project / "pipeline.yaml"), "--checkpoint", str(project / "ck"), "--once"]) == 0
    assert len(_lines(project / "out" / "loud")) == 2


def test_explain_prints_the_spark_plan_of_each_pipeline(spark: Any, project: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(project / "pipeline.yaml"), "--engine", "spark"]) == 0
    out = capsys.readouterr().out
    assert "== pipeline loud (output mode: append" in out and "== pipeline per-room" in out
    assert "Physical Plan" in out and "variant_get" in out.lower()


def test_a_pipeline_without_sources_is_a_config_error(spark: Any, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("version: 1\npipelines: [{id: p, steps: []}]\n")
    assert main(["spark", str(path), "--checkpoint", str(tmp_path / "ck"), "--once"]) == 2
    assert "declares none" in capsys.readouterr().err


def test_a_window_after_a_window_is_a_config_error_before_spark_starts(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A dedupe or an aggregate before a window runs in one query (``test_chained_steps.py``); a window after a
    window cannot (its input comes out behind the query's one watermark), and the plan check says so at the
    second window's line, naming both steps, before a JVM starts."""
    (tmp_path / "in").mkdir()
    path = tmp_path / "p.yaml"
    path.write_text("""\
version: 1
event_time: "timestamp_seconds(t)"
sources: [{id: spool, type: file, path: in}]
pipelines:
  - id: p
    steps:
      - window: {id: minutely, key: [k], tumbling: 1m, aggs: {n: count()}}
      - window: {id: hourly, key: [], tumbling: 1h, aggs: {n: sum(n)}}
""")
    assert main(["spark", str(path), "--checkpoint", str(tmp_path / "ck"), "--once"]) == 2
    err = capsys.readouterr().err
    assert "p.yaml:8:" in err and "step hourly: on Spark a window cannot follow window minutely" in err
    assert not (tmp_path / "ck").exists()  # refused before the job made its checkpoint


def test_test_command_runs_fixtures_on_spark(spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["test", str(ROOT / "examples" / "ysb" / "pipeline.test.yaml"), "--engine", "spark"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "1 passed, 0 failed" in out


def test_spark_commands_keep_sparks_chatter_off_stderr(tmp_path: Path) -> None:
    """Issue 17 (quiet by default): the Python worker's prints of a keyed step and Spark's start-up notices are
    filtered from stderr (`--verbose` lets them through). A separate process, as a user runs it."""
    import subprocess
    import sys

    # one case of a keyed step: its Python worker prints its chatter (a whole conformance file took ~100 s)
    fixture = tmp_path / "keyed.test.yaml"
    fixture.write_text("""\
pipeline:
  version: 1
  pipelines:
    - id: p
      steps: [{aggregate: {id: per-sensor, key: [sensor], aggs: {n: count()}, into: stats}}]
tests:
  - name: a running count per sensor
    input: [{sensor: x}, {sensor: y}, {sensor: x}]
    expect: [{sensor: x, stats: {n: 1}}, {sensor: y, stats: {n: 1}}, {sensor: x, stats: {n: 2}}]
""", encoding="utf-8")
    quiet = subprocess.run([sys.executable, "-m", "edgewise", "test", str(fixture), "--engine", "spark"],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr[-2000:]
    assert "passed, 0 failed" in quiet.stdout
    assert "TransformWithStateInPandas Python worker" not in quiet.stderr
    assert "log4j profile" not in quiet.stderr


def test_a_short_once_run_starts_its_jvm_with_the_quick_compiler(project: Path) -> None:
    """`--once` over a few bytes: the driver JVM compiles with C1 only (`sources.short_job`). Java itself says
    so: `-XX:+PrintFlagsFinal` prints the flags the JVM runs with, and where each came from. A separate process,
    as the flag applies when the command launches the JVM (without the test run's own `SPARK_SUBMIT_OPTS`, which
    gives every test JVM the quick compiler: conftest.py)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}
    run = subprocess.run([sys.executable, "-m", "edgewise", "spark", "pipeline.yaml", "--once", "--checkpoint", "ck",
                          "--conf", "spark.driver.extraJavaOptions=-XX:+PrintFlagsFinal"],
                         capture_output=True, text=True, timeout=600, cwd=project, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    flag = [line for line in run.stdout.splitlines() if " TieredStopAtLevel " in line]
    assert len(flag) == 1 and flag[0].split()[3] == "1" and "{command line}" in flag[0], flag


def test_spark_on_a_terminal_shows_what_it_is_doing_on_a_status_line(project: Path) -> None:
    """Issue 17 (a progress line per micro-batch, rich): on a terminal, ``edgewise spark`` keeps a status line
    (what it is doing now) below its lines; the lines are the ones a log gets. A separate process on a
    pseudo-terminal, as a user runs it."""
    import os
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "200"}
    cmd = [sys.executable, "-m", "edgewise", "spark", str(project / "pipeline.yaml"), "--checkpoint",
           str(project / "ck"), "--once", "--master", "local[2]"]
    with subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave, env=env,
                          cwd=project) as proc:
        os.close(slave)
        text = read_terminal(master)
        code = proc.wait(timeout=600)
    os.close(master)
    assert code == 0, text[-3000:]
    assert "starting Spark" in text  # the status, before the JVM is up
    assert "pipeline per-room: micro-batch 1: 0 rows in, 2 to windows (" in text  # the lines stay
    assert "edgewise: done: 2 to out, 2 to windows" in text
    assert "\x1b[" in text


def test_rows_in_are_the_events_each_micro_batch_read_where_segments_are_read_whole(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a dedupe keeps state by key and reads event ids, so each segment is read whole and its lines numbered: Spark's
    # own count is then one row per segment ("1 rows in" whatever the segment held)
    (tmp_path / "in").mkdir()
    for n, count in ((1, 3), (2, 5)):
        segment = tmp_path / "in" / f"part-{n}.ndjson"
        segment.write_text("".join(json.dumps({"k": i % 2, "t": 10 * n + i}) + "\n" for i in range(count))
                           + ("not json\n" if n == 2 else ""))
        os.utime(segment, (1_000_000 + n, 1_000_000 + n))
    (tmp_path / "p.yaml").write_text("""\
version: 1
event_time: "timestamp_seconds(t)"
sources: [{id: spool, type: file, path: in}]
pipelines:
  - id: once
    steps: [{dedupe: {id: first, key: k, within: 1h}}]
    to: [out]
sinks: [{id: out, type: file, path: out}]
""")
    code = main(["spark", str(tmp_path / "p.yaml"), "--checkpoint", str(tmp_path / "ck"), "--once",
                 "--max-files-per-trigger", "1"])
    err = capsys.readouterr().err
    assert code == 1, err  # the malformed line
    assert "1 malformed input records skipped" in err, err
    assert "pipeline once: micro-batch 0: 3 rows in, 2 to out (" in err
    assert "pipeline once: micro-batch 1: 6 rows in, nothing written (" in err  # 5 events and a malformed line
