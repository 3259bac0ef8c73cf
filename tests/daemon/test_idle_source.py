"""On the daemon: a window and an event-time completion close after the source's ``idle_timeout`` with no further
input (without it they would wait for the next event)."""

from __future__ import annotations

import time
from pathlib import Path

import orjson

from edgewise.clock import FakeClock
from edgewise.daemon.queue import Append, queue_path
from edgewise.daemon.writer import QueueWriter
from edgewise.events import Batch
from tests.daemon.helpers import worker_in, worker_pauses
from tests.daemon.test_api import read_spool

PIPELINE = """
version: 1
sources: [{{id: http, type: http, anonymous: true, idle_timeout: {idle}}}]
event_time: "timestamp_seconds(t)"
pipelines:
  - id: w
    steps:
      - window: {{id: per2s, key: [k], tumbling: 2s, aggs: {{n: count()}}}}
    to: [windows]
  - id: c
    steps:
      - complete: {{id: pair, key: k, parts: {{a: "part = 'a'", b: "part = 'b'"}}, timeout: 3s, into: s}}
      - filter: {{id: timed-out, where: "s.status = 'timed_out'"}}
    to: [timeouts]
sinks:
  - {{id: windows, type: file, path: {out}/windows, max_age: 100ms}}
  - {{id: timeouts, type: file, path: {out}/timeouts, max_age: 100ms}}
"""


def wait_for_records(directory: Path, timeout: float) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        records = read_spool(directory)
        if records:
            return records
        time.sleep(0.1)
    return []


def test_a_window_and_a_completion_close_when_the_source_goes_quiet(start_daemon, tmp_path: Path) -> None:
    d = start_daemon(PIPELINE.format(idle="1s", out=tmp_path / "out"))
    posted = d.post("/v1/events", '{"k": "x", "t": 1000.0, "part": "a"}\n{"k": "x", "t": 1000.5, "part": "c"}\n',
                    "application/x-ndjson")
    assert posted.status_code == 202, posted.text
    windows = wait_for_records(tmp_path / "out" / "windows", 30)
    timeouts = wait_for_records(tmp_path / "out" / "timeouts", 30)
    assert [(r["k"], r["n"]) for r in windows] == [("x", 2)]
    assert [(r["s"]["status"], r["s"]["missing"]) for r in timeouts] == [("timed_out", ["b"])]


def test_with_idle_timeout_0_they_stay_open(start_daemon, tmp_path: Path) -> None:
    """The control: the same input with idleness off: nothing closes in the same time."""
    d = start_daemon(PIPELINE.format(idle="0", out=tmp_path / "out"))
    d.post("/v1/events", '{"k": "x", "t": 1000.0, "part": "a"}\n', "application/x-ndjson")
    d.wait_processed(1)
    assert wait_for_records(tmp_path / "out" / "windows", 6) == []
    assert read_spool(tmp_path / "out" / "timeouts") == []


BACKLOG = """
version: 1
sources: [{id: http, type: http, anonymous: true, idle_timeout: 10s, idle_speed: 1200}]
event_time: "timestamp_seconds(t)"
pipelines:
  - id: w
    steps:
      - window: {id: per5m, key: [k], tumbling: 5m, watermark: 1m, aggs: {n: count()}}
    to: [windows]
sinks: [{id: windows, type: file, path: ./windows}]
"""


def test_a_source_is_not_quiet_while_what_it_sent_waits_in_the_queue(tmp_path: Path, monkeypatch) -> None:
    """A worker on a loaded machine whose batches each take longer than the source's ``idle_timeout``: while a
    backlog waits in the queue the source is not quiet, and event time does not move on by itself. It once did
    (``make run`` beside two soaks: a replay at 1200x saw event time jump hours ahead, and 5,918 positions that
    still waited in the queue were late)."""
    writer = QueueWriter(queue_path(str(tmp_path)), "none")
    for minute in range(12):  # one event a minute of event time, each its own request: a backlog of 12 entries
        writer.submit(Append("http", "json", orjson.dumps({"k": "x", "t": 60.0 * minute}), 1)).result(10)
    clock = FakeClock(1_000_000)
    worker = worker_in(tmp_path, BACKLOG, clock, max_batch=1)  # an entry a lease
    worker_pauses(monkeypatch, lambda seconds: None)
    process = worker.engine.process

    def slow(batch: Batch) -> None:
        process(batch)
        clock.advance(11.0)  # each batch takes longer than the source's idle_timeout

    monkeypatch.setattr(worker.engine, "process", slow)
    while worker.step():
        pass
    outcomes = {what: n for (step, what), n in worker.engine.ctx.stats.steps.items() if step == "per5m"}
    assert outcomes.get("late", 0) == 0
    worker.engine.finish()
    worker.close()
    writer.close()
    assert sorted(r["n"] for r in read_spool(tmp_path / "windows")) == [2, 5, 5]  # minutes 0-4, 5-9, 10-11
