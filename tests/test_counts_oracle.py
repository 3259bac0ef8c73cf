"""Tumbling windows of counts, and running counts (``aggregate``), against plain event-by-event computations
written here from the documented semantics (steps/window.py's and steps/aggregate.py's docstrings, docs/state.md),
not from the steps' code.

The step counts a batch of events in time order in bulk (``WindowStep._counted_in_order``), takes the keys a
fused head read (``Batch.keyed``), and otherwise goes event by event; whatever path a batch takes, the results,
their ids and order, and the late counts must be the ones of the plain computation. Inputs are generated: keys of
mixed types (``1`` and ``1.0`` are one group, ``True`` is not ``1``), times mostly in order with ties, gaps and
events back in time, batches of any size, several counts, a watermark delay and allowed lateness.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from edgewise.clock import FakeClock
from edgewise.engine.context import RunContext
from edgewise.events import Batch
from edgewise.steps.aggregate import AggregateConfig, AggregateStep
from edgewise.steps.window import WindowConfig, WindowStep

SIZE = 10


@dataclass
class Plain:
    """Tumbling windows of ``count()``, one event at a time: watermark = largest time seen - delay; an event is
    late when its window's end + lateness is at or before the watermark; a window gives its result when the
    watermark reaches its end, in order of (end, key); an event that still lands in a window that gave its result
    gives an updated one (``#n`` ids; a group is named by the key of its first event); a window is forgotten once
    the watermark passes its end + lateness; at the end of input every window still held that has not given a
    result does."""

    delay: int
    lateness: int
    counts: int
    max_time: int = -(2**62)
    windows: dict[tuple[int, str], list[Any]] = field(default_factory=dict)  # (start, key text) -> [n, given, key]
    out: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    late: int = 0

    def add(self, t: int, key: Any) -> None:
        start = t - t % SIZE
        if start + SIZE + self.lateness <= self.max_time - self.delay:
            self.late += 1
        else:
            text = _text(key)
            window = self.windows.setdefault((start, text), [0, 0, key])
            window[0] += 1
            if window[1]:
                self._give(start, text)
        if t > self.max_time:
            self.max_time = t
            self._close(t - self.delay)

    def _close(self, watermark: int) -> None:
        for start, text in sorted(self.windows):
            given = self.windows[(start, text)][1]
            if start + SIZE <= watermark and not given:
                self._give(start, text)
            if start + SIZE + self.lateness <= watermark:
                del self.windows[(start, text)]

    def _give(self, start: int, text: str) -> None:
        window = self.windows[(start, text)]
        # a group is named by its first event's value (1.0 where that came before 1)
        ident = f"w:{start * 1_000_000}:[{orjson.dumps(window[2]).decode()}]" + (f"#{window[1]}" if window[1] else "")
        window[1] += 1
        self.out.append((ident, {"start": start, "key": text, **{f"n{j}": window[0] for j in range(self.counts)}}))

    def finish(self) -> None:
        for start, text in sorted(self.windows):
            if not self.windows[(start, text)][1]:
                self._give(start, text)


def _text(key: Any) -> str:
    """A key's group as SQL's GROUP BY forms it: numbers by value (1 and 1.0 are one), a boolean is not a number."""
    if isinstance(key, float) and key.is_integer():
        key = int(key)
    return orjson.dumps(key).decode()


KEYS = st.sampled_from(["a", "b", "c", 1, 1.0, 2, True, None, ""])


@st.composite
def streams(draw: st.DrawFn) -> list[tuple[int, Any]]:
    clock = draw(st.integers(0, 40))
    events = []
    for _ in range(draw(st.integers(0, 80))):
        clock = max(0, clock + draw(st.sampled_from([0, 0, 0, 1, 2, 3, 9]) | st.integers(-25, 25)))
        events.append((clock, draw(KEYS)))
    return events


def _engine_results(events: list[tuple[int, Any]], cuts: list[int], delay: int, lateness: int, counts: int,
                    keyed: bool) -> tuple[list[tuple[str, dict[str, Any]]], int]:
    config = WindowConfig.model_validate({"id": "w", "key": ["k"], "tumbling": f"{SIZE}s", "watermark": f"{delay}s",
                                          "allowed_lateness": f"{lateness}s",
                                          "aggs": {f"n{j}": "count()" for j in range(counts)}})
    step = WindowStep(config)
    step.track_changes(True)
    ctx = RunContext(clock=FakeClock(0))
    out: list[tuple[str, dict[str, Any]]] = []

    def collect(batch: Batch | None) -> None:
        if batch is None:
            return
        for ident, record in zip(batch.ids(), batch.payloads, strict=True):
            out.append((ident, {"start": int(record["window_start"].timestamp()), "key": _text(record["k"]),
                                **{f"n{j}": record[f"n{j}"] for j in range(counts)}}))

    bounds = [0, *sorted(c % (len(events) + 1) for c in cuts), len(events)]
    for a, b in itertools.pairwise(bounds):
        part = events[a:b]
        if not part:
            continue
        batch = Batch([{"k": k} for _, k in part], source="in", ingest_time_us=0,
                      event_times=[t * 1_000_000 for t, _ in part], offsets=range(a, b))
        if keyed:
            batch.keyed = step.keys.of_values([k for _, k in part], None)
        collect(step.process(batch, ctx))
        step.changes()  # the engine commits after each batch: what the step tracks must not change its results
    collect(step.finish(ctx))
    return out, ctx.stats.steps[("w", "late")]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.lists(st.integers(0, 200), max_size=6), st.sampled_from([0, 0, 3, 15]),
       st.sampled_from([0, 0, 5, 20]), st.integers(1, 3), st.booleans())
@example(events=[(1, "a"), (2, "a"), (3, "a"), (4, "a"), (5, "a"), (12, "a"), (12, "b")], cuts=[],
         delay=0, lateness=0, counts=1, keyed=True)
@example(events=[(5, 1), (6, 1.0), (7, True), (25, "a"), (4, 1)], cuts=[3], delay=0, lateness=20, counts=2,
         keyed=False)
@example(events=[(5, "a"), (20, "a"), (19, "a"), (25, "a")], cuts=[2], delay=0, lateness=0, counts=1, keyed=True)
def test_tumbling_counts_are_those_of_the_plain_computation(events: list[tuple[int, Any]], cuts: list[int],
                                                            delay: int, lateness: int, counts: int,
                                                            keyed: bool) -> None:
    plain = Plain(delay, lateness, counts)
    for t, key in events:
        plain.add(t, key)
    plain.finish()
    results, late = _engine_results(events, cuts, delay, lateness, counts, keyed)
    assert results == plain.out
    assert late == plain.late


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.lists(st.integers(0, 200), max_size=6), st.integers(1, 3),
       st.sampled_from(["so_far", "stats.so_far"]), st.booleans())
@example(events=[(1, 1), (2, 1.0), (3, True), (4, "1"), (5, None), (6, 1)], cuts=[2], counts=1, into="so_far",
         tracked=True)
def test_running_counts_are_those_of_the_plain_computation(events: list[tuple[int, Any]], cuts: list[int],
                                                         counts: int, into: str, tracked: bool) -> None:
    """Each event leaves with its group's counts after it was counted, groups formed as SQL's GROUP BY forms them,
    whatever the batches."""
    seen: dict[str, int] = {}
    expected = []
    for _, key in events:
        seen[_text(key)] = seen.get(_text(key), 0) + 1
        expected.append({f"n{j}": seen[_text(key)] for j in range(counts)})
    config = AggregateConfig.model_validate({"id": "a", "key": ["k"], "into": into,
                                             "aggs": {f"n{j}": "count()" for j in range(counts)}})
    step = AggregateStep(config)
    step.track_changes(tracked)
    ctx = RunContext(clock=FakeClock(0))
    got = []
    bounds = [0, *sorted(c % (len(events) + 1) for c in cuts), len(events)]
    for a, b in itertools.pairwise(bounds):
        if a == b:
            continue
        batch = Batch([{"k": k, "stats": {"x": 1}} for _, k in events[a:b]], source="in", ingest_time_us=0,
                      event_times=[t for t, _ in events[a:b]], offsets=range(a, b))
        for record, (_, key) in zip(step.process(batch, ctx).payloads, events[a:b], strict=True):
            got.append(record["so_far"] if into == "so_far" else record["stats"]["so_far"])
            assert record["k"] is key and record["stats"]["x"] == 1  # the event goes on, with its other fields
        changed = step.changes()
        assert bool(changed) == tracked
    assert got == expected
