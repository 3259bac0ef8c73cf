"""Real GitHub webhook deliveries (Octokit's recorded payloads) with signatures; SIGTERM drains; SIGHUP reloads."""

from __future__ import annotations

import glob
import hashlib
import hmac
import signal
import time
import uuid
from pathlib import Path

import httpx
import orjson

from edgewise.daemon.queue import QueueReader, queue_path
from tests.conftest import ROOT
from tests.daemon.helpers import DaemonProcess, wait_processed
from tests.daemon.test_api import read_spool

SECRET = "It's a Secret to Everybody"
PAYLOADS = sorted(glob.glob(str(ROOT / "data" / "github-webhooks-octokit" / "*" / "*.json")))


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def test_github_deliveries_are_verified_and_queued(start_daemon, tmp_path, monkeypatch):
    monkeypatch.setenv("EW_GITHUB_SECRET", SECRET)
    d = start_daemon(f"""
version: 1
sources:
  - {{id: github, type: http, signature: github, secret_env: EW_GITHUB_SECRET}}
pipelines:
  - id: p
    steps:
      - annotate: {{id: repo, set: {{repo: "body.repository.full_name"}}}}
    to: [out]
sinks: [{{id: out, type: file, path: {tmp_path / 'out'}, envelope: true}}]
""")
    assert len(PAYLOADS) > 20
    deliveries = {}
    for path in PAYLOADS:
        body = Path(path).read_bytes()
        event = Path(path).parent.name
        delivery = str(uuid.uuid4())
        r = d.post("/v1/webhooks/github", body, "application/json", **{
            "X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": sign(body)})
        assert r.status_code == 202, (path, r.text)
        assert r.json()["ids"] == [f"github:{delivery}"]  # the delivery id: a redelivery keeps it
        deliveries[f"github:{delivery}"] = (event, orjson.loads(body))
    # a wrong signature, a missing one, and a body changed after signing: 401, nothing queued
    body = Path(PAYLOADS[0]).read_bytes()
    before = d.client.get("/v1/queue").json()["next_event"]
    wrong = [
        d.post("/v1/webhooks/github", body, **{"X-GitHub-Event": "push", "X-Hub-Signature-256": sign(body, "x")}),
        d.post("/v1/webhooks/github", body, **{"X-GitHub-Event": "push"}),
        d.post("/v1/webhooks/github", body + b" ", **{"X-Hub-Signature-256": sign(body)}),
    ]
    assert [r.status_code for r in wrong] == [401, 401, 401]
    assert "signature" in wrong[0].json()["error"]
    d.wait_processed(len(deliveries))
    assert d.client.get("/v1/queue").json()["next_event"] == before
    d.stop()
    records = {r["id"]: r["payload"] for r in read_spool(tmp_path / "out")}
    assert records.keys() == deliveries.keys()  # the rejected ones went nowhere
    for event_id, (event, body) in deliveries.items():
        got = records[event_id]
        assert got["event"] == event and got["body"] == body
        assert got["repo"] == (body.get("repository") or {}).get("full_name")


def test_generic_hmac_and_form_encoded_deliveries(start_daemon, tmp_path):
    d = start_daemon(f"""
version: 1
sources:
  - {{id: hook, type: http, signature: hmac-sha256, secret: k, signature_header: X-Sig, event_header: X-Kind}}
pipelines: [{{id: p, to: [out]}}]
sinks: [{{id: out, type: file, path: {tmp_path / 'out'}}}]
""")
    body = b"payload=%7B%22a%22%3A1%7D"
    digest = hmac.new(b"k", body, hashlib.sha256).hexdigest()
    r = d.post("/v1/webhooks/hook", body, "application/x-www-form-urlencoded", **{"X-Sig": digest, "X-Kind": "k1"})
    assert r.status_code == 202, r.text
    bad = d.post("/v1/webhooks/hook", b"{bad", "application/json",
                 **{"X-Sig": hmac.new(b"k", b"{bad", hashlib.sha256).hexdigest()})
    assert bad.status_code == 400
    assert d.post("/v1/webhooks/nope", b"{}").status_code == 404
    d.wait_processed(1)
    d.stop()
    assert read_spool(tmp_path / "out") == [{"event": "k1", "delivery": None, "body": {"a": 1}}]


PIPELINE = """
version: 1
pipelines:
  - id: p
    steps:
      - annotate: {{id: tag, set: {{version: "'{version}'"}}}}
    to: [out]
sinks: [{{id: out, type: file, path: {out}, envelope: true}}]
"""


def test_sigterm_drains_and_sighup_reloads_without_losing_events(tmp_path):
    pipeline = tmp_path / "pipeline.yaml"
    out = tmp_path / "out"
    pipeline.write_text(PIPELINE.format(version="one", out=out))
    daemon = DaemonProcess(pipeline, tmp_path / "data", "--commit-interval", "0.05")
    client = httpx.Client(base_url=daemon.url or "", timeout=10)
    acked: list[str] = []

    def post(n: int) -> None:
        r = client.post("/v1/events", content=b"".join(b'{"n": %d}\n' % i for i in range(n)),
                        headers={"content-type": "application/x-ndjson"})
        assert r.status_code == 202, r.text
        acked.extend(r.json()["ids"])

    post(50)
    # a reload lets the old workers finish the batches they hold; what still waits in the queue goes to the new
    # ones (docs/daemon.md). Wait until the first 50 are processed, so the versions below are determined
    wait_processed(client, 50)
    # an invalid file is rejected and the old pipeline keeps running
    pipeline.write_text("version: 1\npipelines: [{id: p, steps: [{filter: {id: f, where: 'a >'}}]}]\n")
    daemon.signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while "reload-rejected" not in daemon.log() and time.monotonic() < deadline:
        post(5)
        time.sleep(0.05)
    assert "reload-rejected" in daemon.log() and "where" in daemon.log()
    # a valid one is applied; events keep being accepted during the switch
    pipeline.write_text(PIPELINE.format(version="two", out=out))
    daemon.signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while "reloaded" not in daemon.log() and time.monotonic() < deadline:
        post(5)
        time.sleep(0.02)
    assert "reloaded" in daemon.log(), daemon.log()
    post(50)
    client.close()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(60) == 0, daemon.log()
    assert "stopped" in daemon.log()
    records = {r["id"]: r["payload"] for r in read_spool(out)}
    assert set(acked) <= records.keys(), len(set(acked) - records.keys())
    versions = [records[i]["version"] for i in acked]
    assert versions[:50] == ["one"] * 50 and versions[-50:] == ["two"] * 50
    # drained: nothing left waiting, nothing in flight
    stats = QueueReader(queue_path(str(tmp_path / "data"))).stats()
    assert stats.in_flight_entries == 0


def test_a_second_daemon_on_the_same_data_dir_is_refused(tmp_path):
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(PIPELINE.format(version="x", out=tmp_path / "out"))
    first = DaemonProcess(pipeline, tmp_path / "data")
    try:
        import subprocess
        import sys

        second = subprocess.run([sys.executable, "-m", "edgewise", "serve", str(pipeline), "--port", "0",
                                 "--data-dir", str(tmp_path / "data")], capture_output=True, text=True, timeout=60)
        assert second.returncode == 1 and "another edgewise daemon" in second.stderr
    finally:
        first.signal(signal.SIGTERM)
        assert first.wait(60) == 0


def test_a_port_in_use_is_a_clear_error(tmp_path):
    import socket
    import subprocess
    import sys

    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(PIPELINE.format(version="x", out=tmp_path / "out"))
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        result = subprocess.run([sys.executable, "-m", "edgewise", "serve", str(pipeline), "--port",
                                 str(busy.getsockname()[1]), "--data-dir", str(tmp_path / "data")],
                                capture_output=True, text=True, timeout=60)
    finally:
        busy.close()
    assert result.returncode == 1
    assert "cannot listen on 127.0.0.1" in result.stderr and "Traceback" not in result.stderr


def test_the_github_example_served_keeps_pending_completions_queryable(start_daemon, monkeypatch):
    """examples/github/pipeline.yaml as a daemon: the Octokit deliveries, signed and posted in order; afterwards the
    queryable state holds exactly the commits a direct walk over the deliveries leaves waiting for CI."""
    from tests.test_github_completion import commit_of, deliveries, expected_outcomes

    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", SECRET)
    d = start_daemon((ROOT / "examples" / "github" / "pipeline.yaml").read_text())
    items = deliveries()
    for n, item in enumerate(items):
        body = orjson.dumps(item["body"])
        r = d.post("/v1/webhooks/github", body, "application/json", **{
            "X-GitHub-Event": item["event"], "X-GitHub-Delivery": f"d-{n}", "X-Hub-Signature-256": sign(body)})
        assert r.status_code == 202, r.text
    d.wait_processed(len(items))
    waiting = {sha: seen for sha, status, seen in expected_outcomes(
        items, {"pushed": {"push"}, "checked": {"status", "check_run", "check_suite"}}) if status == "timed_out"}
    assert waiting  # the data leaves some commits waiting, or this test would prove nothing
    for sha, seen in waiting.items():
        r = d.client.get(f"/v1/state/ci-reported/{sha}")
        assert r.status_code == 200, r.text
        assert r.json()["value"]["status"] == "triggered" and ",".join(sorted(r.json()["value"]["seen"])) == seen
    others = {commit_of(i) for i in items} - set(waiting) - {None}
    for sha in others:
        assert d.client.get(f'/v1/state/ci-reported/"{sha}"').status_code == 404  # also in its JSON form
