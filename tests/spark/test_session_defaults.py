"""The session's defaults: the shuffle partitions of a local master (no JVM needed), the checkpoint manager."""

from __future__ import annotations

import os
from typing import Any

import pytest

from edgewise.engine.spark.session import local_cores


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


def test_a_short_lived_driver_compiles_with_c1_only(spark: Any) -> None:
    """The shared test session is short_lived, as `explain --engine spark`'s is: its JVM was launched with the
    quick compiler only (the option reached the JVM, not just the configuration)."""
    from edgewise.engine.spark.session import DRIVER_OPTIONS, QUICK_COMPILER

    assert QUICK_COMPILER in spark.conf.get(DRIVER_OPTIONS).split()  # from short_lived, not the test's environment
    arguments = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
    assert QUICK_COMPILER in list(arguments)
