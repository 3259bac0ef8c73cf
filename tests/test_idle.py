"""Idle sources: once every source has been quiet for its ``idle_timeout``, event time moves on with processing
time, so windows close and event-time completions time out with no further input (engine/idle.py)."""

from __future__ import annotations

import io
from typing import Any

import pytest

from edgewise.clock import FakeClock
from edgewise.config import load_text_plan
from edgewise.engine.idle import Idleness
from edgewise.engine.local import LocalEngine
from edgewise.errors import ConfigError
from edgewise.events import Batch
from edgewise.testing import ListSink

PIPELINE = """
version: 1
event_time: "timestamp_seconds(t)"
pipelines:
  - id: w
    steps:
      - window: {id: per2s, key: [k], tumbling: 2s, watermark: 1s, aggs: {n: count()}}
    to: [windows]
  - id: c
    steps:
      - complete: {id: pair, key: k, parts: {a: "part = 'a'", b: "part = 'b'"}, timeout: 3500ms, into: s}
      - filter: {id: timed-out, where: "s.status = 'timed_out'"}
    to: [timeouts]
sinks:
  - {id: windows, type: stdout}
  - {id: timeouts, type: stdout}
"""


def test_event_time_moves_on_only_when_every_source_is_quiet() -> None:
    idle = Idleness({"a": 2_000_000, "b": 5_000_000, "never": None})
    assert not idle.enabled
    idle = Idleness({"a": 2_000_000, "b": 5_000_000})
    idle.start(0)
    idle.arrived("a", 1_000_000)
    assert idle.advance_by(4_000_000) == 0  # a is idle (3 s), b only 4 s of its 5
    assert idle.advance_by(5_000_000) == 4_000_000  # both: since the last arrival (a's, at 1 s)
    assert idle.advance_by(5_500_000) == 500_000  # then by each tick's elapsed time, never twice
    idle.arrived("b", 6_000_000)
    assert idle.advance_by(7_000_000) == 0


def test_a_replayed_source_keeps_its_recorded_pace_while_idle() -> None:
    """idle_speed: a source fed at 1200x its recorded pace moves event time 1200 s a second once quiet; with
    several sources the slowest speed holds."""
    idle = Idleness({"replay": 2_000_000}, {"replay": 1200.0})
    idle.start(0)
    idle.arrived("replay", 1_000_000)
    assert idle.advance_by(2_500_000) == 0
    assert idle.advance_by(3_000_000) == 2_000_000 * 1200
    assert idle.advance_by(3_001_000) == 1_000 * 1200
    both = Idleness({"replay": 2_000_000, "live": 2_000_000}, {"replay": 1200.0, "live": 1.0})
    both.start(0)
    assert both.advance_by(3_000_000) == 3_000_000


def test_idle_speed_is_checked_at_load() -> None:
    with pytest.raises(ConfigError, match="idle_speed"):
        load_text_plan("version: 1\nsources: [{id: a, type: http, idle_speed: 0}]\npipelines: [{id: p, steps: []}]\n")


def engine(clock: FakeClock, timeouts: dict[str, int | None]) -> tuple[LocalEngine, dict[str, ListSink]]:
    plan = load_text_plan(PIPELINE)
    sinks = {sid: ListSink(sid) for sid in plan.sinks}
    e = LocalEngine(plan, clock=clock, stdout=io.BytesIO(), sinks=sinks, idle_timeouts=timeouts)
    e.open()
    return e, sinks


def feed(e: LocalEngine, clock: FakeClock, events: list[dict[str, Any]]) -> None:
    e.process(Batch(events, source="in", ingest_time_us=clock.now_us(), event_times=[0] * len(events),
                    ids=[f"in:{clock.now_us()}:{i}" for i in range(len(events))]))
    e.tick()


def test_a_window_and_a_completion_close_after_the_idle_timeout_with_no_further_input() -> None:
    clock = FakeClock(1_000_000_000)
    e, sinks = engine(clock, {"in": 2_000_000})
    feed(e, clock, [{"k": "x", "t": 1000.0, "part": "a"}, {"k": "x", "t": 1000.5, "part": "c"}])
    for _ in range(4):  # 2 s of quiet: idle now, event time at 1000.5 + 2 = 1002.5: watermark 1001.5
        clock.advance(0.5)
        e.tick()
    assert sinks["windows"].records == [] and sinks["timeouts"].records == []
    clock.advance(0.5)
    e.tick()  # event time 1003: watermark 1002 reaches the window's end
    assert [(r["k"], r["n"]) for r in sinks["windows"].records] == [("x", 2)]
    assert sinks["timeouts"].records == []  # the completion times out at 1003.5 (watermark 0 s): not yet
    clock.advance(0.5)
    e.tick()
    assert [r["s"]["status"] for r in sinks["timeouts"].records] == ["timed_out"]


def test_without_idle_timeouts_nothing_closes_however_long_the_quiet() -> None:
    """The oracle for the test above: the same input, no timeouts (a source that is never idle)."""
    clock = FakeClock(1_000_000_000)
    e, sinks = engine(clock, {"in": None})
    feed(e, clock, [{"k": "x", "t": 1000.0, "part": "a"}])
    clock.advance(3600)
    e.tick()
    assert sinks["windows"].records == [] and sinks["timeouts"].records == []
    e.finish()  # the end of input still flushes
    assert len(sinks["windows"].records) == 1 and len(sinks["timeouts"].records) == 1


def test_an_event_after_the_quiet_is_judged_against_the_moved_watermark() -> None:
    clock = FakeClock(1_000_000_000)
    e, sinks = engine(clock, {"in": 1_000_000})
    feed(e, clock, [{"k": "x", "t": 1000.0, "part": "a"}])
    clock.advance(10)
    e.tick()  # event time moved to 1010
    assert [r["n"] for r in sinks["windows"].records] == [1]
    feed(e, clock, [{"k": "y", "t": 1001.0, "part": "a"}])  # late now: its window ended before the watermark
    assert e.ctx.stats.steps[("per2s", "late")] == 1
    assert [r["n"] for r in sinks["windows"].records] == [1]  # and opened no window


def test_command_mode_says_that_idle_timeout_is_the_daemons(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """One file runs everywhere, so the option is accepted in command mode, and the user is told it does nothing
    there (the input's end closes windows), rather than it being silently ignored."""
    from edgewise.cli import main

    (tmp_path / "in.ndjson").write_text('{"k": "x", "t": 1000}\n')
    (tmp_path / "p.yaml").write_text(PIPELINE.replace("pipelines:", "sources: [{id: f, type: file, path: in.ndjson, "
                                                      "idle_timeout: 5s}]\npipelines:", 1))
    assert main(["run", str(tmp_path / "p.yaml"), "--quiet"]) == 0
    out = capsys.readouterr()
    assert "source f: idle_timeout applies to the edge daemon (edgewise serve), not to command mode" in out.err
    assert '"n":1' in out.out.replace(" ", "")


def test_spark_is_told_too() -> None:
    from edgewise.config import load_text_plan as load
    from edgewise.engine.idle import unused_idle_timeouts

    plan = load(PIPELINE.replace("pipelines:", "sources: [{id: f, type: file, path: in, idle_timeout: 5s}, "
                                 "{id: g, type: file, path: in2}]\npipelines:", 1))
    assert unused_idle_timeouts(plan.sources, "Spark") == [
        "source f: idle_timeout applies to the edge daemon (edgewise serve), not to Spark: Spark's watermark moves "
        "only with data (docs/spark.md)"]
