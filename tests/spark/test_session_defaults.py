"""The session's defaults: the shuffle partitions of a local master, the settings given with --conf (no JVM
needed), the checkpoint manager and the compiler of the shared session."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from edgewise.engine.spark.session import (
    DRIVER_OPTIONS,
    EXECUTOR_OPTIONS,
    QUICK_COMPILER,
    local_cores,
    session_settings,
    with_task_retries,
)


@pytest.mark.parametrize(("master", "cores"), [("local", 1), ("local[3]", 3), ("local[*]", os.cpu_count()),
                                               ("local[4, 2]", 4), ("local[0]", 1), ("spark://host:7077", None),
                                               ("yarn", None), ("local[x]", None)])
def test_a_local_master_runs_as_many_shuffle_partitions_as_cores(master: str, cores: int | None) -> None:
    assert local_cores(master) == cores


def test_a_local_session_writes_checkpoints_through_the_file_system_api(spark: Any) -> None:
    """Hadoop's FileContext forks `readlink` and `chmod` for every checkpoint file without its native library
    (session.py); the shared test session is local, as an edge hub's is."""
    manager = spark.conf.get("spark.sql.streaming.checkpointFileManagerClass")
    assert manager.endswith(".FileSystemBasedCheckpointFileManager")


def test_python_processes_wait_two_minutes_for_the_jvms_sockets(spark: Any) -> None:
    """Spark's 15 s failed jobs with CANNOT_OPEN_SOCKET on a loaded machine (issue 40). Spark hands the setting to
    its Python processes as SPARK_AUTH_SOCKET_TIMEOUT: the driver's own Python sees it too."""
    import os

    assert spark.sparkContext.getConf().get("spark.python.authenticate.socketTimeout") == "120s"
    assert os.environ.get("SPARK_AUTH_SOCKET_TIMEOUT") == "120"


def test_a_short_lived_driver_compiles_with_c1_only(spark: Any) -> None:
    """The shared test session is short_lived, as `explain --engine spark`'s is: its JVM was launched with the
    quick compiler only (the option reached the JVM, not just the configuration). The session's configuration is
    not read: an `edgewise spark` run in this process before (without short_lived) sets it again."""
    arguments = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
    assert QUICK_COMPILER in list(arguments)


def test_java_options_given_add_to_edgewises_and_other_settings_replace_them() -> None:
    """`edgewise spark --conf spark.driver.extraJavaOptions=-Xmx3g` keeps -Duser.timezone=UTC (the JVM's own time
    conversions in the session's zone), with the given options last so that they win a contrary option."""
    given = {DRIVER_OPTIONS: "-Xmx3g -XX:TieredStopAtLevel=4", EXECUTOR_OPTIONS: "-Xss4m",
             "spark.sql.shuffle.partitions": "8", "spark.sql.ansi.enabled": "false"}
    settings = session_settings("local[2]", conf=given, short_lived=True)
    assert settings[DRIVER_OPTIONS].split() == ["-Duser.timezone=UTC", QUICK_COMPILER, "-Xmx3g",
                                                "-XX:TieredStopAtLevel=4"]
    assert settings[EXECUTOR_OPTIONS].split() == ["-Duser.timezone=UTC", "-Xss4m"]
    assert settings["spark.sql.shuffle.partitions"] == "8"
    assert settings["spark.sql.ansi.enabled"] == "false"
    assert session_settings("local[2]")[DRIVER_OPTIONS] == "-Duser.timezone=UTC"


def test_a_cluster_master_keeps_sparks_shuffle_partitions_and_checkpoint_manager() -> None:
    settings = session_settings("spark://host:7077")
    assert "spark.sql.shuffle.partitions" not in settings
    assert "spark.sql.streaming.checkpointFileManagerClass" not in settings
    assert session_settings("local[3]")["spark.sql.shuffle.partitions"] == "3"


@pytest.mark.parametrize(("master", "given"), [("local", "local[1,4]"), ("local[2]", "local[2,4]"),
                                               ("local[*]", "local[*,4]"), ("local[2,1]", "local[2,1]"),
                                               ("spark://host:7077", "spark://host:7077"), ("yarn", "yarn")])
def test_a_local_master_retries_a_failed_task(master: str, given: str) -> None:
    assert with_task_retries(master) == given
    assert local_cores(given) == local_cores(master)


def test_the_shared_session_retries_tasks(spark: Any) -> None:
    assert spark.sparkContext.master == "local[2,4]"


def test_a_lost_python_worker_is_reported_with_what_to_try() -> None:
    from edgewise.engine.spark.job import _first_line

    spark_said = ("An exception was thrown from the Python worker. Job aborted due to stage failure: Task 0 in "
                  "stage 3.0 failed 4 times, most recent failure: Lost task 0.3 (TID 9): org.apache.spark."
                  "SparkException: Python worker failed to connect back.\n\tat org.apache.spark.api.python...")
    line = _first_line(RuntimeError(spark_said))
    assert line.startswith("An exception was thrown from the Python worker.")
    assert "Run again: the checkpoint resumes" in line and "--master local[1]" in line and "\n" not in line
    assert _first_line(RuntimeError("[DIVIDE_BY_ZERO] Division by zero.")) == "[DIVIDE_BY_ZERO] Division by zero."
    assert _first_line(RuntimeError()) == "RuntimeError"


SHORT_RUN = """\
version: 1
sources: [{id: spool, type: file, path: in}, {id: csv, type: file, path: rows, format: csv}]
pipelines: [{id: p, steps: [], to: [out]}]
sinks: [{id: out, type: stdout}]
"""


def test_a_once_run_over_little_input_is_a_short_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`edgewise spark --once` over files of at most SHORT_JOB_BYTES starts its JVM with the quick compiler
    (BENCHMARKS.md: 21% less time over 20 MB, 30% more over 200 MB): the bytes are the spool's sealed segments and
    the other formats' files, a segment being written and hidden files aside."""
    from edgewise.config import load_text_plan
    from edgewise.engine.spark import sources

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-1.ndjson").write_bytes(b"x" * 300)
    (tmp_path / "in" / "part-2.ndjson").write_bytes(b"x" * 200)
    (tmp_path / "in" / "part-3.ndjson.open").write_bytes(b"x" * 10_000)
    (tmp_path / "rows").mkdir()
    (tmp_path / "rows" / "a.csv").write_bytes(b"x" * 40)
    (tmp_path / "rows" / ".hidden").write_bytes(b"x" * 10_000)
    plan = load_text_plan(SHORT_RUN, base_dir=str(tmp_path))
    assert sources.input_bytes(plan) == 540
    assert sources.short_job(plan, once=True)
    assert not sources.short_job(plan, once=False)  # a continuous job lives on
    monkeypatch.setattr(sources, "SHORT_JOB_BYTES", 539)
    assert not sources.short_job(plan, once=True)
    generated = load_text_plan(SHORT_RUN.replace("{id: csv, type: file, path: rows, format: csv}",
                                                 "{id: gen, type: generator, workload: ysb, count: 10}"),
                               base_dir=str(tmp_path))
    assert sources.input_bytes(generated) is None  # not files: the run's length is not known
    shutil.rmtree(tmp_path / "in")
    assert sources.input_bytes(plan) is None
