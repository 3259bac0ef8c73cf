"""`make run-hub`: the showcase with its `cells` pipeline also on Spark (examples/showcase.py --city helsinki
--hub). While the replay runs, `edgewise spark --once --keep-open` reads the segments the edge daemon has sealed,
again and again on one checkpoint, and after it one `--once` closes the last windows; the runs post their cell
results to the daemon's live channel `hub-cells`. Spark's cells, over all the runs, must equal a plain batch
computation over the same lines and the edge's own, and the map's channel must have received every one of them.
Runs in a copy of the tree."""

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
    # every cell reached the map's channel; a micro-batch the SIGTERM cut short is run again by the closing run,
    # and the live channel (a view, not a store) then gets its cells twice: the map keeps the newest per cell
    posted = re.search(rf"\({len(oracle)} rows in table cells\); (\d+) to the map", done.stdout)
    assert posted and int(posted.group(1)) >= len(oracle), done.stdout
    # one continuous job whose cells reach the map while the replay runs, stopped by SIGTERM, then the closing run
    assert "Spark's first cell results are on the map during the replay" in done.stdout
    assert "the continuous job stopped on SIGTERM" in done.stdout
    assert log.count("stopped on SIGTERM; the next run resumes from the checkpoint") == 1
    assert log.count("edgewise: done:") == 2  # the continuous job's and the closing run's, on one checkpoint
    assert "Traceback" not in log and "Exception" not in log, log[-3000:]
    # a local master's queries run as many shuffle partitions as it has cores, not Spark's 200 (issue 17)
    assert _shuffle_partitions(run_dir / "hub-checkpoint") == {str(os.cpu_count())}


def _shuffle_partitions(checkpoint: Path) -> set[str]:
    """The shuffle partitions each query of a checkpoint was started with (its first offsets entry)."""
    found = set()
    for offsets in checkpoint.glob("*/offsets/0"):
        metadata = json.loads(offsets.read_text().splitlines()[1])
        found.add(metadata["conf"]["spark.sql.shuffle.partitions"])
    return found
