"""The session's defaults that do not need a JVM to check."""

from __future__ import annotations

import os

import pytest

from edgewise.engine.spark.session import local_cores


@pytest.mark.parametrize(("master", "cores"), [("local", 1), ("local[3]", 3), ("local[*]", os.cpu_count()),
                                               ("local[4, 2]", 4), ("local[0]", 1), ("spark://host:7077", None),
                                               ("yarn", None), ("local[x]", None)])
def test_a_local_master_runs_as_many_shuffle_partitions_as_cores(master: str, cores: int | None) -> None:
    assert local_cores(master) == cores
