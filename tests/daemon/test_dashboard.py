"""The live dashboard (/ui) in a real browser: Debian's headless Chromium loads the page, runs its script against
the daemon and the rendered DOM shows the daemon's real numbers."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from tests.conftest import need
from tests.daemon.helpers import partitioned_workers_caught_up

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def rendered(url: str, profile: str) -> str:
    chromium = shutil.which("chromium")
    need(chromium is not None, "Debian's chromium package (apt-get install chromium)")
    result = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=5000",
                             "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def text_of(dom: str, element_id: str) -> str:
    m = re.search(rf'id="{element_id}"[^>]*>([^<]*)<', dom)
    assert m, f"no #{element_id} in the page"
    return m.group(1)


@pytest.mark.slow
def test_dashboard_shows_live_numbers(start_daemon, tmp_path):
    d = start_daemon(f"""
version: 1
pipelines:
  - id: p
    steps: [{{filter: {{id: f, where: "n < 100"}}}}]
    to: [out]
sinks: [{{id: out, type: file, path: {tmp_path / 'out'}}}]
""")
    assert d.post("/v1/events", json.dumps([{"n": i} for i in [0, 1, 2, 150, 3, 4, 5, 6]])).status_code == 202
    d.wait_processed(8)
    dom = rendered(f"{d.url}/ui", str(tmp_path / "chromium"))
    assert text_of(dom, "state") == "ready"
    assert text_of(dom, "processed") == "8"
    assert text_of(dom, "queued") == "0"
    assert text_of(dom, "dead") == "0"
    assert re.search(r'<tbody id="workers"><tr><td>0</td><td>\d+</td><td>true</td><td>true</td><td>-</td><td>-</td>'
                     r'<td>-</td></tr>', dom)
    # per pipeline and step: events in and out, and what the step did with the rest
    assert '<tbody id="steps"><tr><td>p</td><td>f</td><td>8</td><td>7</td><td>filtered 1</td></tr></tbody>' in dom


@pytest.mark.slow
def test_dashboard_shows_each_workers_partitions_position_and_lag(start_daemon, tmp_path):
    """Stateful pipelines over two workers: each worker's share of the 128 partitions, where it is in the queue
    and what waits after it (issue 41)."""
    d = start_daemon(f"""
version: 1
pipelines:
  - id: p
    steps: [{{aggregate: {{id: a, key: [k], aggs: {{n: count()}}, into: st}}}}]
    to: [out]
sinks: [{{id: out, type: file, path: {tmp_path / 'out'}}}]
""", workers=2)
    assert d.post("/v1/events", json.dumps([{"k": i % 5} for i in range(10)])).status_code == 202
    d.wait_processed(10)
    position = partitioned_workers_caught_up(d.client)[0]["position"]
    dom = rendered(f"{d.url}/ui", str(tmp_path / "chromium"))
    for index in (0, 1):
        assert re.search(rf'<tr><td>{index}</td><td>\d+</td><td>true</td><td>true</td><td>64 of 128</td>'
                         rf'<td>{position}</td><td>0 / 0</td></tr>', dom), dom[-3000:]

