"""The daemon's queue against its model (``queue_model.py``), over generated histories of appends, leases, acks,
dead letters, crashes, restarts and replays. ``make fuzz`` soaks the same property (the ``queue`` oracle)."""

from __future__ import annotations

from hypothesis import given

from tests.fuzz.queue_model import queue_ops, queue_vs_model
from tests.fuzz.test_pipelines import budget


@budget(60)
@given(ops=queue_ops())
def test_the_queue_does_what_its_model_does(ops: list[tuple[object, ...]]) -> None:
    problems = queue_vs_model(ops)
    assert not problems, problems


def test_the_model_catches_a_lost_entry() -> None:
    """A check that can fail: the same history with one ack too many, as the queue would do it with its ack's
    range one entry too long, disagrees with the model."""
    from edgewise.daemon import queue

    history = [("append", 1), ("append", 1), ("lease", 0, 1), ("ack", 0, [0])]
    assert not queue_vs_model(history)
    original = queue._runs
    queue._runs = lambda entries: [(a, b + 1) for a, b in original(entries)]  # type: ignore[assignment]
    try:
        problems = queue_vs_model(history)
    finally:
        queue._runs = original
    assert problems and "counts" in problems[0], problems
