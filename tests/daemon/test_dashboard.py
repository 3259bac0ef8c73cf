"""The live dashboard (/ui) in a real browser: Debian's headless Chromium loads the page, runs its script against
the daemon and the rendered DOM shows the daemon's real numbers."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from tests.conftest import need

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
    assert re.search(r'<tbody id="workers"><tr><td>0</td><td>\d+</td><td>true</td><td>true</td></tr>', dom)
    # per pipeline and step: events in and out, and what the step did with the rest
    assert '<tbody id="steps"><tr><td>p</td><td>f</td><td>8</td><td>7</td><td>filtered 1</td></tr></tbody>' in dom
