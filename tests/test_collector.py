"""The garbage collector's settings for work that makes many small objects (``edgewise/collector.py``)."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator

import pytest

from edgewise import collector


@pytest.fixture
def restored() -> Iterator[None]:
    thresholds, enabled = gc.get_threshold(), gc.isenabled()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    gc.enable() if enabled else gc.disable()


def test_paused_restores_the_collector_as_it_was_even_after_an_error(restored: None) -> None:
    gc.enable()
    with pytest.raises(ValueError), collector.paused():
        assert not gc.isenabled()
        raise ValueError("a step failed")
    assert gc.isenabled()
    gc.disable()  # a host that runs without the collector keeps it off
    with collector.paused():
        pass
    assert not gc.isenabled()


def test_a_run_still_collects_cycles(tmp_path) -> None:
    """``edgewise run`` with the run's thresholds: cycles made while processing are still collected (a pass comes
    every RUN_THRESHOLDS[0] new containers), so memory does not grow with them."""
    script = """
import gc, sys
from edgewise import collector
collector.for_a_run()
assert gc.get_threshold() == collector.RUN_THRESHOLDS and gc.get_freeze_count() > 0
class Node:
    pass
def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
for _ in range(200_000):
    cycle()
alive = sum(isinstance(o, Node) for o in gc.get_objects())
assert alive < 2 * collector.RUN_THRESHOLDS[0] * 2, alive
print("ok", alive)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stderr
