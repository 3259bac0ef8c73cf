"""Idempotent ingest: an event id a source chose (a GitHub delivery id, a mesh peer's ids) that it accepted within
its redelivery window is acknowledged with its original id and not queued again, also across kill -9."""

from __future__ import annotations

import time
from pathlib import Path

import orjson

from edgewise.daemon.queue import Append, QueueReader
from edgewise.daemon.writer import QueueWriter
from tests.daemon.helpers import DaemonProcess, wait_for, wait_processed
from tests.daemon.test_api import read_spool
from tests.daemon.test_webhooks_and_signals import PAYLOADS, SECRET, sign

PIPELINE = f"""
version: 1
sources:
  - {{{{id: github, type: http, signature: github, secret: "{SECRET}"{{window}}}}}}
  - {{{{id: peer, type: http, mesh: true, tokens: [peer-token]}}}}
pipelines:
  - id: p
    steps: []
    to: [out]
sinks: [{{{{id: out, type: file, path: {{out}}, envelope: true, max_age: 100ms}}}}]
"""


def pipeline(out: Path, window: str = "") -> str:
    return PIPELINE.format(out=out, window=f", redelivery_window: {window}" if window else "")


def deliver(d, body: bytes, delivery: str, event: str = "push"):  # type: ignore[no-untyped-def]
    return d.post("/v1/webhooks/github", body, "application/json", **{
        "X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": sign(body)})


def wait_records(directory: Path, n: int, timeout: float = 30) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        records = read_spool(directory)
        if len(records) >= n:
            return records
        time.sleep(0.1)
    return read_spool(directory)


def test_a_github_delivery_posted_three_times_is_written_once(start_daemon, tmp_path: Path) -> None:
    d = start_daemon(pipeline(tmp_path / "out"))
    bodies = [Path(p).read_bytes() for p in PAYLOADS[:3]]
    replies = [deliver(d, bodies[0], "d-1") for _ in range(3)]
    assert [r.status_code for r in replies] == [202, 202, 202]
    assert replies[0].json() == {"accepted": 1, "ids": ["github:d-1"]}
    assert [r.json() for r in replies[1:]] == [{"accepted": 0, "ids": ["github:d-1"],
                                                "duplicates": ["github:d-1"]}] * 2
    assert deliver(d, bodies[1], "d-2").json()["accepted"] == 1  # another delivery id is another event
    assert deliver(d, bodies[0], "d-3").json()["accepted"] == 1  # even with the same body
    d.wait_processed(3)
    queue = d.client.get("/v1/queue").json()
    assert queue["queued_events"] == 0
    records = wait_records(tmp_path / "out", 3)
    assert sorted(r["id"] for r in records) == ["github:d-1", "github:d-2", "github:d-3"]


def test_the_window_is_configurable_and_0_turns_it_off(start_daemon, tmp_path: Path) -> None:
    d = start_daemon(pipeline(tmp_path / "out", window="0"))
    body = Path(PAYLOADS[0]).read_bytes()
    assert [deliver(d, body, "d-1").json()["accepted"] for _ in range(2)] == [1, 1]
    d.wait_processed(2)


def test_a_mesh_peer_resending_some_events_queues_only_the_new_ones(start_daemon, tmp_path: Path) -> None:
    d = start_daemon(pipeline(tmp_path / "out"))

    def send(*ids: str):  # type: ignore[no-untyped-def]
        body = orjson.dumps({"events": [{"id": i, "payload": {"n": i}} for i in ids]})
        return d.post("/v1/events?source=peer", body, "application/vnd.edgewise.events+json",
                      Authorization="Bearer peer-token")

    assert send("o:1", "o:2").json() == {"accepted": 2, "ids": ["o:1", "o:2"]}
    again = send("o:2", "o:3")
    assert again.json() == {"accepted": 1, "ids": ["o:2", "o:3"], "duplicates": ["o:2"]}
    assert send("o:1", "o:3").json()["accepted"] == 0
    d.wait_processed(3)
    records = wait_records(tmp_path / "out", 3)
    assert sorted((r["id"], r["payload"]["n"]) for r in records) == [("o:1", "o:1"), ("o:2", "o:2"), ("o:3", "o:3")]


def test_redeliveries_are_recognised_across_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(pipeline(tmp_path / "out"))
    body = Path(PAYLOADS[0]).read_bytes()
    first = DaemonProcess(path, tmp_path / "data")
    try:
        import httpx

        with httpx.Client(base_url=first.url) as client:
            r = client.post("/v1/webhooks/github", content=body, headers={
                "Content-Type": "application/json", "X-GitHub-Event": "push", "X-GitHub-Delivery": "d-1",
                "X-Hub-Signature-256": sign(body)})
            assert r.json()["accepted"] == 1
            wait_processed(client, 1)
        assert len(wait_records(tmp_path / "out", 1)) == 1
    finally:
        first.kill()  # SIGKILL: no shutdown, no flush
    second = DaemonProcess(path, tmp_path / "data")
    try:
        with httpx.Client(base_url=second.url) as client:
            for _ in range(2):
                r = client.post("/v1/webhooks/github", content=body, headers={
                    "Content-Type": "application/json", "X-GitHub-Event": "push", "X-GitHub-Delivery": "d-1",
                    "X-Hub-Signature-256": sign(body)})
                assert r.json() == {"accepted": 0, "ids": ["github:d-1"], "duplicates": ["github:d-1"]}
            assert client.get("/v1/queue").json()["queued_events"] == 0
            # nothing queued and nothing in flight: no worker can write a second copy
            wait_for(lambda: client.get("/v1/queue").json()["in_flight_entries"] == 0, what="no entry in flight")
        assert [r["id"] for r in read_spool(tmp_path / "out")] == ["github:d-1"]
    finally:
        second.kill()


def test_the_writer_checks_ids_in_one_commit_and_forgets_them_after_the_window(tmp_path: Path) -> None:
    path = str(tmp_path / "queue.db")
    writer = QueueWriter(path)
    try:
        hook = lambda window: Append("gh", "webhook", b"{}", 1, ids=["gh:x"], redelivery_us=window)  # noqa: E731
        futures = [writer.submit(hook(60_000_000)) for _ in range(5)]  # likely one group commit
        outcomes = [f.result(10) for f in futures]
        assert [o.duplicates for o in outcomes] == [(), ("gh:x",), ("gh:x",), ("gh:x",), ("gh:x",)]
        assert QueueReader(path).queued_events() == 1
        short = writer.submit(Append("gh", "webhook", b"{}", 1, ids=["gh:y"], redelivery_us=1)).result(10)
        time.sleep(0.01)  # its window (1 µs) has passed
        assert short.duplicates == () and writer.submit(hook(1)).result(10).duplicates == ("gh:x",)
        assert writer.submit(Append("gh", "webhook", b"{}", 1, ids=["gh:y"], redelivery_us=1)).result(10) \
            .duplicates == ()
    finally:
        writer.close()


def test_a_partly_resent_envelope_keeps_each_events_own_time(tmp_path: Path) -> None:
    from edgewise.daemon.bodies import ENVELOPE_TYPE, parse_events
    from edgewise.daemon.worker import entry_batch

    def envelope(*ids: str) -> Append:
        body = orjson.dumps({"events": [{"id": i, "event_time": int(i[2:]) * 1000, "payload": {"n": i}} for i in ids],
                             "source": "devices", "ingest_time": 77})
        parsed = parse_events(body, ENVELOPE_TYPE, max_events=100)
        return Append("peer", parsed.kind, parsed.body, parsed.count, meta=parsed.meta, ids=parsed.ids,
                      redelivery_us=60_000_000)

    writer = QueueWriter(str(tmp_path / "queue.db"))
    try:
        writer.submit(envelope("o:1", "o:2")).result(10)
        assert writer.submit(envelope("o:1", "o:3", "o:2", "o:4")).result(10).duplicates == ("o:1", "o:2")
    finally:
        writer.close()
    reader = QueueReader(str(tmp_path / "queue.db"))
    batches = [entry_batch(e) for e in reader.lease(0, 100)]
    assert [(b.ids(), b.event_times, [p["n"] for p in b.payloads], b.source, b.ingest_time_us) for b in batches] == [
        (["o:1", "o:2"], [1000, 2000], ["o:1", "o:2"], "devices", 77),
        (["o:3", "o:4"], [3000, 4000], ["o:3", "o:4"], "devices", 77)]


def test_an_envelope_with_a_bad_time_is_refused_whole() -> None:
    import pytest

    from edgewise.daemon.bodies import ENVELOPE_TYPE, BodyError, parse_events

    body = orjson.dumps({"events": [{"id": "a", "event_time": 1, "payload": {}},
                                    {"id": "b", "event_time": "yesterday", "payload": {}}], "ingest_time": -5})
    with pytest.raises(BodyError) as refused:
        parse_events(body, ENVELOPE_TYPE, max_events=100)
    assert refused.value.status == 400
    assert refused.value.problems == ["events[1].event_time: expected an integer of microseconds since the epoch",
                                      "ingest_time: expected an integer of microseconds since the epoch"]
