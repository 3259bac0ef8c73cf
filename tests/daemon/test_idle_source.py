"""On the daemon: a window and an event-time completion close after the source's ``idle_timeout`` with no further
input (without it they would wait for the next event)."""

from __future__ import annotations

import time
from pathlib import Path

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
