"""Partitioned workers (``engine/partitions.py``, issue 41) on the cases where a key's results depend on another
key's events: through the watermark they move. Keys ``a`` and ``b`` fall in partitions 12 and 85, so with two
workers each has one. Each case states what one worker gives, worked out by hand from docs/state.md, and the
workers together must give it, with the events in one queue entry or one entry each."""

from __future__ import annotations

from typing import Any

import pytest

from edgewise.engine.partitions import PARTITIONS, partition_of, partitions_of, stored_partition
from tests.fuzz.generate import Case
from tests.fuzz.oracles import partitioned_vs_one


def test_a_and_b_are_on_different_workers() -> None:
    assert partition_of('["a"]') % 2 != partition_of('["b"]') % 2
    assert partition_of('"a"') % 2 != partition_of('"b"') % 2
    assert sorted(p for i in range(3) for p in partitions_of(i, 3)) == list(range(PARTITIONS))


def test_a_stored_key_has_the_partition_of_its_key() -> None:
    assert stored_partition('w/10000000/["a"]') == partition_of('["a"]')
    assert stored_partition('s/["b"]') == partition_of('["b"]')
    assert stored_partition('k/"a"') == partition_of('"a"')
    assert stored_partition("meta") is None


def window(**config: Any) -> dict[str, Any]:
    return {"window": {"id": "w", "key": ["k"], "watermark": "0s", "aggs": {"n": "count()", "s": "sum(x)"},
                       "on_error": "skip", "late": "late", **config}}


CASES = {
    # b@30 moves the watermark to 30: a@5's window [0, 10) ended before it, so a@5 is late
    "late by another key's event": (
        [window(tumbling="10s")], [{"k": "a", "t": 1, "x": 1}, {"k": "b", "t": 30, "x": 2}, {"k": "a", "t": 5, "x": 4}],
        {"late": 1}),
    # b@30's x is not a number: sum fails it, so it moves no event time, and a@5 is on time
    "a failed event moves no time": (
        [window(tumbling="10s")],
        [{"k": "a", "t": 1, "x": 1}, {"k": "b", "t": 30, "x": "oops"}, {"k": "a", "t": 5, "x": 4}],
        {"late": 0}),
    # b@5 closes a's session [0, 5) before a@5 comes: a@5 starts a session of its own (touching sessions merge
    # only while open)
    "a session closed by another key at its end": (
        [window(session="5s", emit="final")],
        [{"k": "a", "t": 0, "x": 1}, {"k": "b", "t": 5, "x": 2}, {"k": "a", "t": 5, "x": 4},
         {"k": "b", "t": 100, "x": 8}],
        {"sessions of a": 2}),
    # b@10 times a's completion out (deadline 4) before a@3 comes: a@3 opens a new one
    "a completion timed out by another key": (
        [{"complete": {"id": "c", "key": "k", "parts": {"pos": "x > 0", "neg": "x <= 0"}, "timeout": "4s",
                       "watermark": "0s", "into": "done"}}],
        [{"k": "a", "t": 0, "x": 1}, {"k": "b", "t": 10, "x": 1}, {"k": "a", "t": 3, "x": -1}],
        {"completed": 0}),
    # b@20 makes dedupe forget a@0 (within 5 s, watermark 0): a@3 is kept, though 3 s after a@0
    "a kept time forgotten because of another key": (
        [{"dedupe": {"id": "d", "key": "k", "within": "5s", "watermark": "0s"}}],
        [{"k": "a", "t": 0}, {"k": "b", "t": 20}, {"k": "a", "t": 3}],
        {"kept": 3}),
}


def one_worker_gives(steps: list[dict[str, Any]], events: list[dict[str, Any]]) -> dict[str, int]:
    """What the hand-worked expectation counts, from one engine (``partitioned_vs_one`` holds the workers to it)."""
    from edgewise.testing import run
    from tests.fuzz.oracles import load_text_plan

    case = Case(steps, events, ["late"] if "window" in steps[0] else [])
    result = run(load_text_plan(case.pipeline_text(), file="pipeline.yaml", base_dir="."), events)
    out = result.outputs["p"]
    late = result.sinks["late"].unique() if "late" in result.sinks else []
    return {"late": len(late), "sessions of a": sum(1 for r in out if r.get("k") == "a"),
            "completed": sum(1 for r in out if (r.get("done") or {}).get("status") == "completed"),
            "kept": len(out)}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("entry_size", [1, 1000])
def test_workers_give_what_one_gives_where_keys_meet_in_time(name: str, entry_size: int) -> None:
    steps, events, expected = CASES[name]
    counted = one_worker_gives(steps, events)
    assert {k: counted[k] for k in expected} == expected  # the hand-worked expectation
    case = Case(steps, events, ["late"] if "window" in steps[0] else [])
    assert partitioned_vs_one(case, 2, entry_size) == []
