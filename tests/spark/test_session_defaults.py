"""The session's defaults: the shuffle partitions of a local master, the settings given with --conf (no JVM
needed), the checkpoint manager and the compiler of the shared session."""

from __future__ import annotations

import os
from typing import Any

import pytest

from edgewise.engine.spark.session import (
    DRIVER_OPTIONS,
    EXECUTOR_OPTIONS,
    QUICK_COMPILER,
    local_cores,
    session_settings,
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
    quick compiler only (the option reached the JVM, not just the configuration)."""
    assert QUICK_COMPILER in spark.conf.get(DRIVER_OPTIONS).split()  # from short_lived, not the test's environment
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
