"""examples/github runs as its header says, on what it ships: `edgewise run` over examples/github/deliveries.ndjson
(the Octokit payloads as deliveries; tools/github_deliveries.py keeps it in step with data/), and a daemon with the
example's test secret taking them from examples/github/send.py, signed as GitHub signs. Outcomes are checked
against tests/test_github_completion.py's walk over the same deliveries."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT
from tests.daemon.helpers import DaemonProcess, wait_processed
from tests.test_github_completion import CHECKS, expected_outcomes

EXAMPLE = ROOT / "examples" / "github"
SECRET = "edgewise-example-secret"


def shipped() -> list[dict]:
    return [json.loads(line) for line in (EXAMPLE / "deliveries.ndjson").read_text().splitlines()]


def test_the_shipped_deliveries_are_the_bundled_payloads() -> None:
    done = subprocess.run([sys.executable, "tools/github_deliveries.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    deliveries = shipped()
    assert len(deliveries) == 31 and len({d["delivery"] for d in deliveries}) == 31
    by_file = (ROOT / "data" / "github-webhooks-octokit" / "push" / "payload.json").read_text()
    assert {"event": "push", "delivery": "octokit-push-payload", "body": json.loads(by_file)} in deliveries


def test_the_example_runs_on_its_deliveries_without_a_secret() -> None:
    done = subprocess.run([sys.executable, "-m", "edgewise", "run", "examples/github/pipeline.yaml",
                           "examples/github/deliveries.ndjson"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    got = Counter((r["ci"]["key"], r["ci"]["status"], ",".join(sorted(r["ci"]["seen"]))) for r in records if "ci" in r)
    items = [{"event": d["event"], "body": d["body"]} for d in shipped()]
    # the input's end times out what is still open, as an idle hour would
    assert got == expected_outcomes(items, {"pushed": {"push"}, "checked": CHECKS})
    assert "edgewise: 31 events in" in done.stderr


@pytest.mark.slow
def test_a_daemon_with_the_test_secret_takes_the_deliveries_signed_as_github_signs(tmp_path: Path) -> None:
    daemon = DaemonProcess(EXAMPLE / "pipeline.yaml", tmp_path / "data", env={"GITHUB_WEBHOOK_SECRET": SECRET})
    try:
        assert daemon.url is not None
        send = [sys.executable, str(EXAMPLE / "send.py"), daemon.url, str(EXAMPLE / "deliveries.ndjson")]
        wrong = subprocess.run(send, capture_output=True, text=True, timeout=120,
                               env={"PATH": "", "GITHUB_WEBHOOK_SECRET": "not-the-secret"})
        assert wrong.returncode == 1 and "0 of 31 deliveries accepted" in wrong.stdout
        assert "401" in wrong.stderr
        done = subprocess.run(send, capture_output=True, text=True, timeout=120,
                              env={"PATH": "", "GITHUB_WEBHOOK_SECRET": SECRET})
        assert done.returncode == 0, done.stderr
        assert "31 of 31 deliveries accepted" in done.stdout
        with httpx.Client(base_url=daemon.url, timeout=10) as client:
            wait_processed(client, 31)
            assert client.get("/v1/queue").json()["processed_events"] == 31
    finally:
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(60) == 0, daemon.log()
