"""`make run`: the showcase (examples/hsl/showcase.py) replays the bundled HSL recordings into an edge daemon and
its cell results land in SQLite: checked against a plain batch computation over the same lines, twice in a row
(the run folder is replaced, not appended to). Runs in a copy of the tree, so the repository's out/ is untouched."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.hsl_oracle import cells, positions


@pytest.mark.slow
def test_make_run_shows_the_map_and_keeps_the_cells(tmp_path: Path) -> None:
    (tmp_path / "examples" / "hsl").mkdir(parents=True)
    (tmp_path / "data").symlink_to(ROOT / "data")
    for name in ("live.yaml", "showcase.py"):
        shutil.copy(ROOT / "examples" / "hsl" / name, tmp_path / "examples" / "hsl" / name)
    run_dir = tmp_path / "out" / "showcase"
    run_dir.mkdir(parents=True)
    (run_dir / "left-by-an-earlier-run").write_text("x")
    done = subprocess.run([sys.executable, "examples/hsl/showcase.py", "--speed", "max", "--no-stay"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "/ui/map" in done.stdout and "1990 messages processed" in done.stdout and "0 late" in done.stdout
    with sqlite3.connect(run_dir / "hsl.db") as db:
        rows = [json.loads(p) for (p,) in db.execute("SELECT payload FROM cells")]
    got = {(r["cell"], r["window_start"]): (r["vehicles"], r["positions"]) for r in rows}
    assert len(rows) == len(got)
    assert got == cells(positions())
    assert not (run_dir / "left-by-an-earlier-run").exists()  # the run folder is replaced, not added to
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["showcase"]
