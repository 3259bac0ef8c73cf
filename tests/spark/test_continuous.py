"""A continuous `edgewise spark FILE` (no --once), the hub: it processes segments as they are sealed, and SIGTERM
or SIGINT stops it cleanly (exit 0, no traceback, no py4j error) between two polls of its queries; a restart
resumes from the checkpoint exactly once. Results are checked against a plain computation of the windows."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.daemon.helpers import wait_for

PIPELINE = """\
version: 1
event_time: "timestamp_seconds(t)"
sources:
  - {id: spool, type: file, path: in}
pipelines:
  - id: per-key
    steps:
      - window: {id: counts, key: [k], tumbling: 10s, watermark: 2s, aggs: {n: count()}}
    to: [windows-out]
sinks:
  - {id: windows-out, type: file, path: out, fsync: false}
"""


def _segment(spool: Path, n: int, events: list[dict[str, Any]]) -> None:
    path = spool / f"part-{n:06d}.ndjson"
    path.with_suffix(".ndjson.open").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    os.replace(path.with_suffix(".ndjson.open"), path)


def _windows(out: Path) -> list[tuple[str, str, int]]:
    rows = [orjson.loads(line) for p in sorted(out.glob("*.ndjson")) for line in p.read_bytes().splitlines()]
    return sorted((r["k"], r["window_start"], r["n"]) for r in rows)


def _hub(work: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, EDGEWISE_SPARK_LOG_LEVEL="OFF")
    with open(work / "hub.log", "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "edgewise", "spark", "pipeline.yaml", "--checkpoint", "ck",
                                 "--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=2", "--trigger",
                                 "1"], cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=log)


def _events(start: int, stop: int) -> list[dict[str, Any]]:
    return [{"k": f"k{i % 3}", "t": 1000 + i} for i in range(start, stop)]


@pytest.mark.slow
def test_a_continuous_job_stops_cleanly_on_sigterm_and_sigint_and_resumes_exactly_once(spark: Any,
                                                                                      tmp_path: Path) -> None:
    del spark  # the jobs run in their own processes; the fixture only checks that Spark can run here
    (tmp_path / "pipeline.yaml").write_text(PIPELINE)
    spool, out = tmp_path / "in", tmp_path / "out"
    spool.mkdir()
    _segment(spool, 0, _events(0, 25))  # t 1000..1024: windows up to [1010, 1020) close (watermark 1022)

    def run_until(windows: int, signum: signal.Signals, more: Callable[[], None] = lambda: None) -> None:
        """A job until `windows` windows are out (`more` writes input meanwhile), then stopped by `signum`."""
        hub = _hub(tmp_path)
        try:
            more()
            wait_for(lambda: len(_windows(out)) >= windows, timeout=240, what=f"{windows} windows")
            hub.send_signal(signum)
            assert hub.wait(60) == 0
        finally:
            if hub.poll() is None:
                hub.kill()
        log = (tmp_path / "hub.log").read_text(errors="replace")
        assert f"stopped on {signum.name}; the next run resumes from the checkpoint" in log
        assert "Traceback" not in log and "py4j" not in log.lower() and "Exception" not in log, log[-3000:]

    def second_segment() -> None:  # t ..1044: [1020, 1030) and [1030, 1040) close too
        wait_for(lambda: len(_windows(out)) >= 3, timeout=240, what="the first windows")
        _segment(spool, 1, _events(25, 45))

    run_until(9, signal.SIGTERM, second_segment)
    _segment(spool, 2, _events(45, 70))  # read by the restarted job: t ..1069
    run_until(18, signal.SIGINT)
    # every window the watermark (1067) closed, once: a plain count
    closed: Counter[tuple[str, int]] = Counter()
    for e in _events(0, 70):
        start = e["t"] // 10 * 10
        if start + 10 <= 1069 - 2:
            closed[(e["k"], start)] += 1
    got = _windows(out)
    assert len(got) == len(set(got))
    assert [(k, n) for k, _, n in got] == [(k, n) for (k, _), n in sorted(closed.items())]
