"""Exactly-once on Spark: the driver is killed (SIGKILL of its process group: Python and the JVM) several times
while it consumes a spool that keeps growing; each restart resumes from the checkpoint. At the end the sinks must
hold exactly what one batch computation over all the input gives: nothing missing, nothing twice."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from edgewise.config import load
from edgewise.jsonio import dumps
from edgewise.testing import run

KILLS = int(os.environ.get("EDGEWISE_SPARK_KILLS", "3"))
SEGMENTS = 24
PER_SEGMENT = 150
KEYS = ["k0", "k1", "k2", "k3", "k4"]

PIPELINE = """\
version: 1
event_time: "timestamp_seconds(t)"
sources:
  - {id: spool, type: file, path: in}
pipelines:
  - id: enriched
    steps:
      - filter: {id: not-noise, where: "v % 7 <> 0"}
      - annotate: {id: score, set: {score: "v * 10 + length(k)", bucket: "CAST(t / 60 AS BIGINT)"}}
    to: [enriched-out]
  - id: per-key
    steps:
      - window: {id: counts, key: [k], tumbling: 10s, watermark: 2s, aggs: {n: count(), total: sum(v)}}
    to: [windows-out]
  - id: once
    steps:
      - dedupe: {id: first-of-each, key: "v % 1000", within: 1h, watermark: 2s}
    to: [once-out]
sinks:
  - {id: enriched-out, type: file, path: out/enriched, fsync: false}
  - {id: windows-out, type: file, path: out/windows, fsync: false}
  - {id: once-out, type: file, path: out/once, fsync: false}
"""


def _event(segment: int, i: int) -> dict[str, Any]:
    n = segment * PER_SEGMENT + i
    return {"k": KEYS[n % len(KEYS)], "v": n, "t": 1_000 + n // 10}


def _write_segment(spool: Path, segment: int) -> list[dict[str, Any]]:
    events = [_event(segment, i) for i in range(PER_SEGMENT)]
    path = spool / f"part-{segment:06d}.ndjson"
    tmp = path.with_suffix(".ndjson.open")
    tmp.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    os.replace(tmp, path)
    return events


def _spark(work: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, EDGEWISE_SPARK_LOG_LEVEL="OFF")
    with open(work / "spark.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "edgewise.cli", "spark", "pipeline.yaml", "--checkpoint", "ck", "--master",
             "local[2]", "--conf", "spark.sql.shuffle.partitions=2", "--max-files-per-trigger", "3", *extra],
            cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)


def _log(work: Path) -> str:
    return (work / "spark.log").read_text(encoding="utf-8", errors="replace")[-3000:]


def _records(directory: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.ndjson")):
        out += [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    return out


@pytest.mark.slow
def test_killed_driver_resumes_with_exactly_once_output(spark: Any, tmp_path: Path) -> None:
    del spark  # the jobs run in their own processes; the fixture only checks that Spark can run here
    (tmp_path / "pipeline.yaml").write_text(PIPELINE, encoding="utf-8")
    spool = tmp_path / "in"
    spool.mkdir()
    written: list[dict[str, Any]] = []
    written += _write_segment(spool, 0)
    rng = random.Random(7)  # reproducible kill times

    def grow() -> None:
        for segment in range(1, SEGMENTS):
            time.sleep(0.4)
            written.extend(_write_segment(spool, segment))

    writer = threading.Thread(target=grow)
    writer.start()
    kills = 0
    try:
        while kills < KILLS:
            job = _spark(tmp_path)
            deadline = time.monotonic() + 90
            before = len(list((tmp_path / "out" / "enriched").glob("*.ndjson"))) if kills else 0
            # kill once the job has committed something new, at a random moment after that
            while time.monotonic() < deadline and job.poll() is None:
                done = len(list((tmp_path / "out" / "enriched").glob("*.ndjson"))) if (tmp_path / "out").exists() \
                    else 0
                if done > before:
                    break
                time.sleep(0.2)
            assert job.poll() is None, f"the Spark job exited early: {_log(tmp_path)}"
            time.sleep(rng.uniform(0.2, 2.0))
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
            kills += 1
    finally:
        writer.join()
    final = _spark(tmp_path, "--once")
    assert final.wait(timeout=300) == 0, _log(tmp_path)

    assert len(written) == SEGMENTS * PER_SEGMENT
    plan = load(str(tmp_path / "pipeline.yaml"))
    expected = {pid: [orjson.loads(dumps(r)) for r in records] for pid, records in run(plan, written).outputs.items()}

    enriched = _records(tmp_path / "out" / "enriched")
    assert len(enriched) == len(expected["enriched"]), "events missing or written twice"
    assert Counter(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) for r in enriched) == \
        Counter(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) for r in expected["enriched"])

    windows = _records(tmp_path / "out" / "windows")
    key = ("k", "window_start", "window_end", "n", "total")
    assert Counter(tuple(r[k] for k in key) for r in windows) == \
        Counter(tuple(r[k] for k in key) for r in expected["per-key"])
    assert len(windows) == len({(r["k"], r["window_start"]) for r in windows}), "a window was written twice"

    # a keyed step's state (applyInPandasWithState: the pipeline's one stateful step) across micro-batches and
    # kills: each key's later events, in later segments, are duplicates of its first
    once = _records(tmp_path / "out" / "once")
    assert sorted(r["v"] for r in once) == sorted(r["v"] for r in expected["once"]) == list(range(1000))
