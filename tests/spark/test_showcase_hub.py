"""`make run-hub`: the showcase with live.yaml's `hub-cells` pipeline split between the edge daemon and a hub
(examples/showcase.py --city helsinki --hub; issue 38). One file: `edgewise serve live.yaml` runs the steps before
the window and writes the link, one continuous `edgewise spark live.yaml` runs the window from it and posts its
cells to the daemon's live channel `hub-cells`. After the replay the edge's idle source writes heartbeats into the
link, which close the hub's last windows (no closing run); SIGTERM then stops the job. Spark's cells must equal a
plain batch computation over the same lines and the edge's own, and the map's channel must have received every
one of them. Runs in a copy of the tree."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.hsl_oracle import cells, positions


def _cells(db: Path) -> dict[tuple[str, str], tuple[int, int]]:
    with sqlite3.connect(db) as conn:
        rows = [json.loads(p) for (p,) in conn.execute("SELECT payload FROM cells")]
    got = {(r["cell"], r["window_start"]): (r["vehicles"], r["positions"]) for r in rows}
    assert len(rows) == len(got)
    return got


@pytest.mark.slow
def test_make_run_hub_puts_sparks_cells_on_the_same_map(spark: object, tmp_path: Path) -> None:
    (tmp_path / "examples" / "hsl").mkdir(parents=True)
    (tmp_path / "data").symlink_to(ROOT / "data")
    shutil.copy(ROOT / "examples" / "hsl" / "live.yaml", tmp_path / "examples" / "hsl" / "live.yaml")
    shutil.copy(ROOT / "examples" / "showcase.py", tmp_path / "examples" / "showcase.py")
    # at 30x the replay lasts about a minute: the continuous job's JVM starts and its first windows close in it
    done = subprocess.run([sys.executable, "examples/showcase.py", "--city", "helsinki", "--hub", "--speed", "30",
                           "--no-stay", "--via", "http"], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    run_dir = tmp_path / "out" / "showcase"
    log = (run_dir / "hub.log").read_text(errors="replace") if (run_dir / "hub.log").exists() else ""
    assert done.returncode == 0, done.stdout + done.stderr + log[-3000:]
    assert "/ui/map?cells=hub-cells" in done.stdout
    oracle = cells(positions())
    assert _cells(run_dir / "hub.db") == oracle == _cells(run_dir / "hsl.db")
    assert f"Spark's {len(oracle)} cell results equal the edge's" in done.stdout
    # every cell reached the map's channel (a view: a micro-batch Spark runs again posts its cells again)
    posted = re.search(rf"\({len(oracle)} rows in table cells\); (\d+) to the map", done.stdout)
    assert posted and int(posted.group(1)) >= len(oracle), done.stdout
    # one continuous job, from the same file, whose cells reach the map while the replay runs; the last windows
    # closed by the edge's heartbeats, not by a closing run; then stopped by SIGTERM
    assert "Spark's first cell results are on the map during the replay" in done.stdout
    assert "the hub stopped on SIGTERM" in done.stdout
    assert log.count("stopped on SIGTERM; the next run resumes from the checkpoint") == 1
    assert log.count("edgewise: done:") == 1
    assert "Traceback" not in log and "Exception" not in log, log[-3000:]
    assert not (run_dir / "hub.yaml").exists()
    beats = [json.loads(line) for f in (run_dir / "link" / "hub-cells").glob("*.ndjson")
             for line in f.read_text().splitlines() if '"~heartbeat"' in line]
    assert beats, "the idle edge wrote no heartbeat into the link"
    # a local master's queries run as many shuffle partitions as it has cores, not Spark's 200 (issue 17)
    assert _shuffle_partitions(run_dir / "hub-checkpoint") == {str(os.cpu_count())}


def _shuffle_partitions(checkpoint: Path) -> set[str]:
    """The shuffle partitions each query of a checkpoint was started with (its first offsets entry)."""
    found = set()
    for offsets in checkpoint.glob("*/offsets/0"):
        metadata = json.loads(offsets.read_text().splitlines()[1])
        found.add(metadata["conf"]["spark.sql.shuffle.partitions"])
    return found
