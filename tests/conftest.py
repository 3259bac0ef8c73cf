"""Shared test fixtures. Tests that need a service or Spark are marked; with EDGEWISE_REQUIRE_SERVICES=1 (CI) a
missing service fails the test instead of skipping it."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from edgewise.engine.spark.session import QUICK_COMPILER

ROOT = Path(__file__).resolve().parent.parent
REQUIRE_SERVICES = os.environ.get("EDGEWISE_REQUIRE_SERVICES") == "1"
# Spark JVMs the tests launch neither make nor use a class archive in the user's cache (edgewise/engine/spark/
# startup.py): the tests stay independent of earlier runs, and no 30 s archive build competes with them.
# tests/spark/test_startup.py turns it on, with its own cache.
os.environ["EDGEWISE_SPARK_ARCHIVE"] = "off"
# what runs keep between runs (parsed expressions: edgewise/expr/tree_cache.py) goes to a directory of this test
# process's own, removed when it ends, never the user's cache: a test sees only what this test run parsed
_CACHE = tempfile.mkdtemp(prefix="edgewise-test-cache-")
os.environ["EDGEWISE_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
# Spark drivers the tests launch compile with C1 only, as the shared session does (spark_session's short_lived),
# commands in a subprocess included: the workers keep both cores busy, and C2's compiling cost the suite a sixth
# of its CPU (DEVELOPING.md)
if "TieredStopAtLevel" not in os.environ.get("SPARK_SUBMIT_OPTS", ""):
    os.environ["SPARK_SUBMIT_OPTS"] = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} {QUICK_COMPILER}".strip()


def need(condition: bool, reason: str) -> None:
    """Skip (locally) or fail (CI) when a required service or tool is missing."""
    if condition:
        return
    if REQUIRE_SERVICES:
        pytest.fail(f"required for this test and missing: {reason}")
    pytest.skip(reason)


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a service listens on the port (Redis 6379, PostgreSQL 5432, ...)."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def read_terminal(fd: int) -> str:
    """Everything written to a pseudo-terminal until every writer closed it (the master side gives EIO then)."""
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out.decode("utf-8", "replace")


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture
def load_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache directory of the test's own with the load caches on (parsed expressions, loaded files, validated
    configs), for a test of what a second load reads from them. ``tmp_path_factory``: hypothesis tests use it."""
    directory = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("EDGEWISE_CACHE_DIR", str(directory))
    monkeypatch.delenv("EDGEWISE_LOAD_CACHE", raising=False)
    return directory

