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

    session = spark_session("local[2]", app="edgewise-tests", shuffle_partitions=2,
                            conf={"spark.default.parallelism": "2"})
    yield session
    session.stop()
