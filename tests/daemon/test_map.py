"""The live map (/ui/map) in a real browser (Debian's headless Chromium over the DevTools protocol): what the page
shows follows the daemon's results as they stream, by the thesis's display rules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.browser import Browser, Page
from tests.conftest import ROOT
from tests.daemon.test_live import PIPELINE, position, tile
from tests.hsl_oracle import cells, positions


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    b = Browser(tmp_path / "chromium")
    yield b
    b.close()


def shown(page: Page) -> dict[str, str]:
    return {k: page.text(k) for k in ("vehicles", "cells", "late", "event-time", "status")}


@pytest.mark.slow
def test_the_map_follows_the_stream_by_the_display_rules(start_daemon, browser: Browser, tmp_path: Path) -> None:
    d = start_daemon(PIPELINE.format(idle="1s"))
    post = lambda events: d.post("/v1/events", json.dumps(events))  # noqa: E731
    assert post([position("a", 1000.0), position("b", 1001.0)]).status_code == 202
    d.wait_processed(2)
    page = browser.open(f"{d.url}/ui/map")
    page.wait_for("document.getElementById('status').textContent === 'live'")
    page.wait_for("document.getElementById('vehicles').textContent === '2'")
    assert page.text("event-time") == "1970-01-01 00:16:41 UTC"  # t = 1001 s

    # a newer position moves a vehicle; an older one (a result out of order) does not
    post([position("a", 1005.0, lat=60.2)])
    page.wait_for("vehicles.get('a') && vehicles.get('a').t === 1005e6")
    post([position("a", 1002.0, lat=60.0)])
    d.wait_processed(4)
    page.wait_for("document.getElementById('event-time').textContent.includes('00:16:45')")
    assert page.evaluate("vehicles.get('a').p.lat") == 60.2

    # quiet for the idle timeout: the 10 s window closes and its cells appear, coloured by `vehicles` (the
    # out-of-order position of `a` is not late for the window: it counts in its own cell)
    page.wait_for("document.getElementById('cells').textContent === '3'", timeout=30)
    assert page.evaluate("[...cells.keys()].sort()") == sorted(tile(lat, 24.94, 14) for lat in (60.17, 60.2, 60.0))
    assert page.evaluate("cells.get(" + json.dumps(tile(60.17, 24.94, 14)) + ").p.vehicles") == 2
    assert page.text("legend-label") == "cells: vehicles (window result)"
    assert (page.text("legend-min"), page.text("legend-max")) == ("0", "2")  # counts are coloured from 0
    # the colour scale's range: from 0 (or a negative minimum); a lone value is not the top colour (issue 40)
    assert page.evaluate("[range([0]), range([7.5]), range([-3, 2]), range([])]") == [[0, 1], [0, 7.5], [-3, 2],
                                                                                      [0, 1]]

    # a window result stays for its window's length + 5 s of event time after it (t = 1009.999999 s), no longer
    post([position("z", 1024.5)])
    page.wait_for("document.getElementById('event-time').textContent.includes('00:17:04')")
    assert page.text("cells") == "3"
    post([position("z", 1025.5)])
    page.wait_for("document.getElementById('cells').textContent === '0'")
    # a vehicle stays for 2 min of event time after its last position: b (1001 s) goes at 1121.5, a (1005 s) stays
    post([position("y", 1121.5)])
    page.wait_for("document.getElementById('event-time').textContent.includes('00:18:41')")
    assert sorted(page.evaluate("[...vehicles.keys()]")) == ["a", "y", "z"]
    post([position("y", 1125.5)])
    page.wait_for("document.getElementById('vehicles').textContent === '2'")
    assert sorted(page.evaluate("[...vehicles.keys()]")) == ["y", "z"]

    # a late event (its window closed long ago) is counted on the page
    post([position("late", 1001.0)])
    page.wait_for("document.getElementById('late').textContent === '1'", timeout=10)
    page.screenshot(tmp_path / "map.png")  # for a human looking at a failure; nothing is compared to it
    assert shown(page)["status"] == "live"


@pytest.mark.slow
def test_the_map_during_a_replay_of_the_hsl_recordings_matches_a_batch_computation(
        start_daemon, browser: Browser, tmp_path: Path) -> None:
    """The showcase's pipeline file, the page opened before the replay starts: when the replay is done, the page
    draws exactly the vehicles and cell results that a plain computation over the same lines says it should (by
    the display rules: a vehicle heard from in the last 2 min of event time, a window result not older than its
    length + 5 s)."""
    text = (ROOT / "examples" / "hsl" / "live.yaml").read_text()
    text = text.replace("../../out/showcase/hsl.db", str(tmp_path / "hsl.db"))
    text = text.replace("../../out/showcase/hub.db", str(tmp_path / "hub.db"))
    text = text.replace("../../out/showcase/link", str(tmp_path / "link"))
    assert "../../out" not in text  # a test never writes into the repository's out/
    text = text.replace("idle_timeout: 5s", "idle_timeout: 0")  # event time stays at the last message's
    d = start_daemon(text)
    page = browser.open(f"{d.url}/ui/map")
    page.wait_for("document.getElementById('status').textContent === 'live'")
    assert page.text("vehicles") == "0"
    replay = subprocess.run([sys.executable, "-m", "edgewise", "replay", "data/hsl-hfp-apc-dumps/*/hfp.dump",
                             "--speed", "max", "--dedupe-lines", "--to", f"{d.url}/v1/events"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert replay.returncode == 0, replay.stderr
    d.wait_processed(1990)

    found = positions()
    now = max(p.t for p in found)
    page.wait_for(f"document.getElementById('event-time').textContent === {json.dumps(shown_time(now))}")
    last_heard: dict[str, float] = {}
    for p in found:
        last_heard[p.vehicle] = max(p.t, last_heard.get(p.vehicle, p.t))
    expected_vehicles = sorted(v for v, t in last_heard.items() if now <= t + 120)
    closed = {k: v for k, v in cells(found).items() if window_end(k[1]) + 10 <= now}  # the watermark passed it
    expected_cells = {k: v for k, v in closed.items() if now <= window_end(k[1]) + 30 + 5}
    page.wait_for(f"document.getElementById('cells').textContent === '{len(expected_cells)}'")
    assert sorted(page.evaluate("[...vehicles.keys()]")) == expected_vehicles
    assert page.text("vehicles") == str(len(expected_vehicles))
    drawn = page.evaluate("[...cells.values()].map(c => [c.p.cell, c.p.window_start, c.p.vehicles, c.p.positions])")
    assert {(c, s): (v, n) for c, s, v, n in drawn} == expected_cells
    # every closed window reached the page (the latest per cell is what it keeps)
    assert page.evaluate("cells.size") == len(expected_cells) and len(closed) >= len(expected_cells) > 0
    page.wait_for("document.getElementById('processed').textContent === '1990'", timeout=10)
    artefact = Path(os.environ.get("EDGEWISE_TEST_ARTIFACTS", tmp_path))
    artefact.mkdir(parents=True, exist_ok=True)
    page.screenshot(artefact / "map-after-replay.png")


def shown_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def window_end(start: str) -> float:
    return datetime.fromisoformat(start.replace("Z", "+00:00")).timestamp() + 30


@pytest.mark.slow
def test_the_austin_showcase_draws_a_moving_fleet_over_its_own_backdrop(browser: Browser, tmp_path: Path) -> None:
    """`make run` as a user watches it: the page opened as soon as the showcase prints its address shows vehicles
    within 10 s, then many at once, cells coloured from 0 (legend), the backdrop of every position (as many tiles
    as a plain count of the recording gives) and a scale bar. A screenshot is kept (EDGEWISE_TEST_ARTIFACTS)."""
    import math
    import shutil

    from tests.austin_oracle import RECORDING

    for city in ("austin", "hsl"):
        (tmp_path / "examples" / city).mkdir(parents=True)
        shutil.copy(ROOT / "examples" / city / "live.yaml", tmp_path / "examples" / city / "live.yaml")
    shutil.copy(ROOT / "examples" / "showcase.py", tmp_path / "examples" / "showcase.py")
    (tmp_path / "data").symlink_to(ROOT / "data")
    # at 2400x the day takes about 30 s
    show = subprocess.Popen([sys.executable, "examples/showcase.py", "--speed", "2400", "--no-stay"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert show.stdout is not None
        url = None
        for line in show.stdout:
            if "showcase: the map:" in line:
                url = line.split()[-1]
                break
        assert url and url.endswith("/ui/map?vehicle_ttl=600"), url
        page = browser.open(url)
        page.wait_for("vehicles.size > 0", timeout=10)  # the first vehicles within 10 s of the address
        page.wait_for("vehicles.size >= 40 && cells.size >= 20", timeout=60)
        tiles = set()
        with open(RECORDING) as f:
            header = f.readline().rstrip("\n").split(",")
            lat_at, lon_at = header.index("latitude"), header.index("longitude")
            for line in f:
                row = line.rstrip("\n").split(",")
                lat, lon = float(row[lat_at]), float(row[lon_at])
                n = 2 ** 17
                tiles.add((int((lon + 180) / 360 * n),
                           int((1 - math.asinh(math.tan(math.radians(lat))) / math.pi) / 2 * n)))
        assert page.wait_for("density && density.tiles.length") == len(tiles)
        assert page.evaluate("density.tiles.reduce((s, t) => s + t[2], 0)") == 32038
        # the legend is written when the page draws (a timer, which a loaded browser runs late): wait for it
        page.wait_for("document.getElementById('legend-min').textContent === '0'")  # coloured from 0
        assert page.wait_for("Number(document.getElementById('legend-max').textContent) > 0")
        assert page.evaluate("$('metric').value") == "avg_speed_kmh"
        artefact = Path(os.environ.get("EDGEWISE_TEST_ARTIFACTS", tmp_path))
        artefact.mkdir(parents=True, exist_ok=True)
        page.screenshot(artefact / "austin-map.png")
        rest = show.communicate(timeout=240)[0]
        assert show.returncode == 0, rest
        assert "0 late" in rest
    finally:
        if show.poll() is None:
            show.kill()
            show.wait()
        if show.stdout is not None:  # a failure above leaves the pipe open (a ResourceWarning in a later test)
            show.stdout.close()
