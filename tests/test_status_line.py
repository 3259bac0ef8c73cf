"""The status line of long jobs on a terminal (``progress.StatusLine``) and what a Spark job shows on it
(``MicroBatchLines.running``). A pseudo-terminal stands in for the user's terminal."""

from __future__ import annotations

import os
import pty
import time

import pytest

from edgewise.engine.spark.progress import MicroBatchLines
from edgewise.progress import StatusLine
from tests.conftest import read_terminal


def test_without_a_terminal_lines_are_plain_and_there_is_no_status(capsys: pytest.CaptureFixture[str]) -> None:
    read_end, write_end = os.pipe()
    try:
        for terminal in (None, write_end):
            with StatusLine(terminal) as status:
                assert not status.enabled
                status.show("starting Spark")
                status.say("edgewise: pipeline p: micro-batch 0: 3 rows in, nothing written (1.0 s)")
    finally:
        os.close(read_end)
        os.close(write_end)
    assert capsys.readouterr().err == "edgewise: pipeline p: micro-batch 0: 3 rows in, nothing written (1.0 s)\n" * 2


def test_a_terminal_that_cannot_redraw_gets_plain_lines(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TERM", "dumb")
    master, slave = pty.openpty()
    try:
        with StatusLine(slave) as status:
            assert not status.enabled
            status.say("edgewise: done")
    finally:
        os.close(slave)
        os.close(master)
    assert capsys.readouterr().err == "edgewise: done\n"


def test_on_a_terminal_the_status_changes_in_place_and_the_lines_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")
    master, slave = pty.openpty()
    try:
        with StatusLine(slave) as status:
            assert status.enabled
            status.show("pipeline p: micro-batch 0 running (3 s)")
            time.sleep(0.3)  # rich redraws the status from its own thread
            status.say("edgewise: pipeline p: micro-batch 0: 3 rows in, 2 to out (3.4 s)")
            status.show("pipeline p: waiting for data to arrive")
            time.sleep(0.3)
    finally:
        os.close(slave)
    shown = read_terminal(master)
    os.close(master)
    assert "pipeline p: micro-batch 0 running (3 s)" in shown
    assert "edgewise: pipeline p: micro-batch 0: 3 rows in, 2 to out (3.4 s)" in shown
    assert "pipeline p: waiting for data to arrive" in shown
    assert "\x1b[" in shown  # drawn with terminal controls: the status is redrawn, not appended as lines


def test_a_running_query_shows_its_micro_batch_and_how_long_it_runs() -> None:
    lines = MicroBatchLines("p", None, {})
    lines.since = 100.0
    assert lines.running({"isTriggerActive": True, "message": "Processing new data"}, 112.4) == (
        "pipeline p: micro-batch 0 running (12 s)")
    lines.report([{"batchId": 0, "sources": [], "durationMs": {"triggerExecution": 12000}}])
    assert lines.since > 100.0  # the next micro-batch counts from the last line
    assert lines.running({"isTriggerActive": True}, lines.since + 2) == "pipeline p: micro-batch 1 running (2 s)"
    assert lines.running({"isTriggerActive": False, "message": "Waiting for data to arrive"}, 0) == (
        "pipeline p: waiting for data to arrive")
