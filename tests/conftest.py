"""Shared test fixtures. Tests that need a service or Spark are marked; with EDGEWISE_REQUIRE_SERVICES=1 (CI) a
missing service fails the test instead of skipping it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REQUIRE_SERVICES = os.environ.get("EDGEWISE_REQUIRE_SERVICES") == "1"


def need(condition: bool, reason: str) -> None:
    """Skip (locally) or fail (CI) when a required service or tool is missing."""
    if condition:
        return
    if REQUIRE_SERVICES:
        pytest.fail(f"required for this test and missing: {reason}")
    pytest.skip(reason)


@pytest.fixture
def root() -> Path:
    return ROOT
