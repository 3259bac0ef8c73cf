"""One Spark session for the whole test run (starting one costs ~5 s): every Spark test takes the ``spark``
fixture. Spark tests are marked ``spark``; without PySpark or Java they skip locally and fail in CI
(EDGEWISE_REQUIRE_SERVICES=1)."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import need


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    need(importlib.util.find_spec("pyspark") is not None, "PySpark (pip install -e '.[spark]')")
    need(shutil.which("java") is not None, "Java 17 for Spark")
    import os

    os.environ.setdefault("EDGEWISE_SPARK_LOG_LEVEL", "OFF")
    from edgewise.engine.spark.session import spark_session

    # every job run in this one session leaves ~3.5 MB of plans in the driver's heap (measured over 40 jobs, the
    # same before and after issue 17; a job's own micro-batches do not grow it), and the suite runs a few hundred:
    # Spark's default 1 GB ran out near the end of the run
    session = spark_session("local[2]", app="edgewise-tests", shuffle_partitions=2,
                            conf={"spark.default.parallelism": "2", "spark.driver.memory": "2g"}, short_lived=True)
    yield session
    session.stop()
