"""`make run`: the showcase (examples/showcase.py) replays a bundled recording into an edge daemon and its cell
results land in SQLite: checked against a plain batch computation over the same rows. Austin (the default) runs
with only the core install's packages (tests/core_only.py), as a new user's `make run` does; Helsinki runs twice in
a row (the run folder is replaced, not appended to). Each runs in a copy of the tree, so the repository's out/ is
untouched."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests import austin_oracle, hsl_oracle
from tests.conftest import ROOT, need, port_open
from tests.core_only import core_only_env


def showcase_tree(tmp_path: Path) -> Path:
    """The showcase and its pipeline files in a copy of the tree (the data linked), with an earlier run's leftover."""
    for city in ("austin", "hsl"):
        (tmp_path / "examples" / city).mkdir(parents=True)
        shutil.copy(ROOT / "examples" / city / "live.yaml", tmp_path / "examples" / city / "live.yaml")
    shutil.copy(ROOT / "examples" / "showcase.py", tmp_path / "examples" / "showcase.py")
    (tmp_path / "data").symlink_to(ROOT / "data")
    run_dir = tmp_path / "out" / "showcase"
    run_dir.mkdir(parents=True)
    (run_dir / "left-by-an-earlier-run").write_text("x")
    return run_dir


def stored_cells(db: Path) -> dict[tuple[str, str], tuple[int, int]]:
    with sqlite3.connect(db) as conn:
        rows = [json.loads(p) for (p,) in conn.execute("SELECT payload FROM cells")]
    got = {(r["cell"], r["window_start"]): (r["vehicles"], r["positions"]) for r in rows}
    assert len(rows) == len(got)  # one result per cell and window
    return got


@pytest.mark.slow
@pytest.mark.service
@pytest.mark.parametrize("via", ["mqtt", "http"])
def test_make_run_replays_austins_day_with_the_core_install_only(tmp_path: Path, via: str) -> None:
    """Through the MQTT broker (mosquitto, as `make run` does where one runs) and over HTTP."""
    if via == "mqtt":
        need(port_open(1883), "an MQTT broker on 127.0.0.1:1883 (mosquitto)")
    run_dir = showcase_tree(tmp_path)
    done = subprocess.run([sys.executable, "examples/showcase.py", "--speed", "max", "--no-stay", "--via", via],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=core_only_env(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"/ui/map\?vehicle_ttl=600\n", done.stdout)
    assert f"as fast as possible over {via.upper()}" in done.stdout
    if via == "mqtt":  # the daemon ran the city's file with an mqtt source on a topic of the run's own
        ran = (run_dir / "live.yaml").read_text()
        assert "type: mqtt" in ran and "edgewise-showcase/" in ran and str(run_dir / "cells.db") in ran
    expected = austin_oracle.cells()
    assert f"32038 messages processed; 32038 positions and {len(expected)} cell results to the map; 0 late" \
        in done.stdout
    assert stored_cells(run_dir / "cells.db") == expected
    assert max(v for v, _ in expected.values()) > 10  # a fleet: cells with many vehicles at once
    assert not (run_dir / "left-by-an-earlier-run").exists()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["showcase"]


@pytest.mark.slow
def test_make_run_city_helsinki_replays_the_hfp_recordings(tmp_path: Path) -> None:
    run_dir = showcase_tree(tmp_path)
    done = subprocess.run([sys.executable, "examples/showcase.py", "--city", "helsinki", "--speed", "max",
                           "--no-stay", "--via", "http"], cwd=tmp_path, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "/ui/map" in done.stdout and "1990 messages processed" in done.stdout and "0 late" in done.stdout
    assert stored_cells(run_dir / "hsl.db") == hsl_oracle.cells(hsl_oracle.positions())
    assert not (run_dir / "left-by-an-earlier-run").exists()  # the run folder is replaced, not added to
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["showcase"]
