from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.helpers import InProcessDaemon


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[Callable[..., InProcessDaemon]]:
    """start_daemon(pipeline_yaml, **options) -> a ready daemon on a free port; stopped after the test."""
    started: list[InProcessDaemon] = []

    def start(pipeline: str, data_dir: Path | None = None, **options: Any) -> InProcessDaemon:
        path = tmp_path / f"pipeline{len(started)}.yaml"
        path.write_text(pipeline)
        d = InProcessDaemon(path, data_dir or tmp_path / "data", **options)
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()
