"""The daemon's HTTP API against a real daemon (workers are real processes): statuses, all-or-nothing ingest,
auth, backpressure, a full queue, queryable state, metrics."""

from __future__ import annotations

import glob
import json
import time
from pathlib import Path

import orjson

from edgewise.daemon.queue import QueueReader, queue_path
from tests.daemon.helpers import wait_for

FILE_PIPELINE = """
version: 1
pipelines:
  - id: all
    steps:
      - annotate: {{id: mark, set: {{doubled: "n * 2"}}}}
    to: [out]
sinks:
  - {{id: out, type: file, path: {out}, envelope: true}}
"""


def read_spool(directory: Path) -> list[dict]:
    records = []
    for name in sorted(glob.glob(str(directory / "*.ndjson"))):
        with open(name, "rb") as fh:
            records += [orjson.loads(line) for line in fh if line.strip()]
    return records


def test_events_are_queued_processed_and_acknowledged(start_daemon, tmp_path):
    # an open source for posts that name none, and a mesh peer (its own token) that may send events with their ids
    sources = ("version: 1\nsources: [{id: http, type: http, anonymous: true}, "
               "{id: peer, type: http, mesh: true, tokens: [peer-token]}]\n")
    d = start_daemon(sources + FILE_PIPELINE.format(out=tmp_path / "out").replace("version: 1\n", ""))
    one = d.post("/v1/events", '{"n": 1}')
    assert one.status_code == 202, one.text
    assert one.json() == {"accepted": 1, "ids": ["http:1"]}
    many = d.post("/v1/events", json.dumps([{"n": 2}, {"n": 3}]))
    nd = d.post("/v1/events", '{"n": 4}\n\n{"n": 5}\n', "application/x-ndjson")
    env = d.post("/v1/events?source=peer", json.dumps({"events": [{"id": "mine-1", "payload": {"n": 6}}]}),
                 "application/vnd.edgewise.events+json", Authorization="Bearer peer-token")
    assert many.json()["ids"] == ["http:2", "http:3"]
    assert nd.json()["ids"] == ["http:4", "http:5"]
    assert env.json()["ids"] == ["mine-1"]
    d.wait_processed(6)
    d.stop()
    records = read_spool(tmp_path / "out")
    assert sorted((r["id"], r["payload"]["doubled"]) for r in records) == sorted(
        [("http:1", 2), ("http:2", 4), ("http:3", 6), ("http:4", 8), ("http:5", 10), ("mine-1", 12)])
    stats = QueueReader(queue_path(str(tmp_path / "data"))).stats()
    assert stats.queued_events == 0 and stats.entries == 0


def test_bad_bodies_get_a_clear_4xx_and_queue_nothing(start_daemon, tmp_path):
    d = start_daemon(FILE_PIPELINE.format(out=tmp_path / "out"))
    cases = [
        ('{"n": 1}\n{"n": \n[1]\n', "application/x-ndjson", 400, ["line 2", "line 3"]),
        ("{bad", "application/json", 400, ["malformed JSON"]),
        (b'{"a": "\xff"}', "application/json", 400, ["invalid UTF-8"]),
        ('{"a": ' + "[" * 2000 + "]" * 2000 + "}", "application/json", 400, ["nesting deeper"]),
        ('{"a": 1e999}', "application/json", 400, ["infinity"]),
        ("[1, {}]", "application/json", 400, ["[0]"]),
        ("[]", "application/json", 400, ["no events"]),
        ("a,b", "text/csv", 415, ["unsupported content type"]),
        ('{"events": [{"payload": {}}]}', "application/vnd.edgewise.events+json", 400, ["events[0]"]),
    ]
    for body, content_type, status, words in cases:
        r = d.post("/v1/events", body, content_type)
        assert r.status_code == status, (body[:30], r.text)
        text = r.text
        for w in words:
            assert w in text, (w, text)
    big = d.post("/v1/events", b'{"x": "' + b"a" * (17 * 1024 * 1024) + b'"}')
    assert big.status_code == 413
    assert d.client.get("/v1/queue").json()["next_event"] == 1  # nothing was ever queued


def test_no_content_type_is_sniffed(start_daemon, tmp_path):
    d = start_daemon(FILE_PIPELINE.format(out=tmp_path / "out"))
    assert d.post("/v1/events", '{"n": 1}\n{"n": 2}\n', None).json()["accepted"] == 2
    assert d.post("/v1/events", '{"n": 1}', None).json()["accepted"] == 1


def test_bearer_tokens_per_source(start_daemon, tmp_path, monkeypatch):
    monkeypatch.setenv("EW_TEST_TOKEN", "s3cret,other")
    d = start_daemon(f"""
version: 1
sources:
  - {{id: open, type: http}}
  - {{id: private, type: http, token_env: EW_TEST_TOKEN}}
pipelines: [{{id: p, to: [out]}}]
sinks: [{{id: out, type: file, path: {tmp_path / 'out'}}}]
""")
    # another source requires a token, so a post that names none goes nowhere unless a source says anonymous: true
    assert d.post("/v1/events", "{}").status_code == 403
    assert d.post("/v1/events?source=open", "{}").status_code == 202
    assert d.post("/v1/events?source=private", "{}").status_code == 401
    assert d.post("/v1/events?source=private", "{}", Authorization="Bearer nope").status_code == 403
    assert d.post("/v1/events?source=private", "{}", Authorization="Basic czNjcmV0").status_code == 401
    ok = d.post("/v1/events?source=private", "{}", Authorization="Bearer other")
    assert ok.status_code == 202 and ok.json()["ids"][0].startswith("private:")
    assert d.post("/v1/events?source=nope", "{}").status_code == 404


def test_backpressure_429_until_the_queue_drains(start_daemon, tmp_path):
    # a sink that waits 0.3 s per batch keeps events queued long enough to cross the high-water mark
    slow = tmp_path / "slow.py"
    slow.write_text("import sys, time\ntime.sleep(0.3)\nsys.stdout.write(sys.stdin.read())\n")
    d = start_daemon(f"""
version: 1
pipelines:
  - id: p
    steps:
      - spawn: {{id: slow, argv: ["{__import__('sys').executable}", "{slow}"], wait: true, into: r}}
    to: [out]
sinks: [{{id: out, type: file, path: {tmp_path / 'out'}}}]
""", high_water=20, low_water=5, max_batch=5)
    replies = [d.post("/v1/events", json.dumps([{"n": i}] * 10)) for i in range(6)]
    statuses = [r.status_code for r in replies]
    assert 429 in statuses, statuses
    refused = next(r for r in replies if r.status_code == 429)
    assert refused.headers["Retry-After"] == "1" and "slow down" in refused.json()["error"]
    d.wait_processed(10 * statuses.count(202), timeout=60)
    deadline = time.monotonic() + 5
    while d.client.get("/v1/queue").json()["backpressure"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert d.post("/v1/events", "{}").status_code == 202  # released below the low-water mark


def test_a_full_queue_answers_507_and_keeps_working(start_daemon, tmp_path):
    d = start_daemon(FILE_PIPELINE.format(out=tmp_path / "out"), max_queue_bytes=200_000)
    filler = json.dumps([{"n": 1, "pad": "x" * 2000}] * 40)  # ~80 kB per request
    statuses = [d.post("/v1/events", filler).status_code for _ in range(8)]
    assert 507 in statuses or all(s == 202 for s in statuses)
    full = [s for s in statuses if s not in (202, 507)]
    assert not full, statuses
    # the queue is still consistent: everything acknowledged gets processed, and small requests pass again
    d.wait_processed(40 * statuses.count(202), timeout=60)
    assert d.post("/v1/events", '{"n": 2}').status_code == 202
    assert QueueReader(queue_path(str(tmp_path / "data"))).conn.execute("PRAGMA integrity_check").fetchone() == (
        "ok",)


def test_a_nearly_full_disk_answers_507(start_daemon, tmp_path):
    d = start_daemon(FILE_PIPELINE.format(out=tmp_path / "out"), min_free=1 << 62)
    wait_for(lambda: d.client.get("/v1/queue").json()["disk_full"], 10, "the free-space check")  # every 50 ms
    r = d.post("/v1/events", "{}")
    assert r.status_code == 507 and "full" in r.json()["error"] and r.headers["Retry-After"]


def test_health_ready_metrics_openapi(start_daemon, tmp_path):
    d = start_daemon(FILE_PIPELINE.format(out=tmp_path / "out"))
    assert d.client.get("/healthz").json()["status"] == "ok"
    assert d.client.get("/readyz").status_code == 200
    d.post("/v1/events", '[{"n": 1}, {"n": 2}]')
    d.post("/v1/events", "nope")
    d.wait_processed(2)
    wait_for(lambda: "edgewise_processed_events_total 2.0" in d.client.get("/metrics").text, 10,
             "the worker's statistics")  # sent every 0.5 s
    text = d.client.get("/metrics").text
    assert 'edgewise_ingest_events_total{source="http"} 2.0' in text
    assert 'edgewise_ingest_requests_total{source="http",status="400"} 1.0' in text
    assert "edgewise_processed_events_total 2.0" in text
    assert 'edgewise_step_seconds_count{pipeline="all",step="mark"}' in text
    assert 'edgewise_step_events_total{direction="in",pipeline="all",step="mark"} 2.0' in text
    assert "edgewise_queue_events 0.0" in text
    spec = d.client.get("/openapi.json").json()
    assert spec["openapi"].startswith("3.") and "/v1/events" in spec["paths"]
    assert d.client.get("/nope").status_code == 404
    assert d.client.get("/v1/events").status_code == 405


def test_step_failures_and_sink_failures_become_dead_letters(start_daemon, tmp_path):
    d = start_daemon(f"""
version: 1
pipelines:
  - id: p
    steps:
      - annotate: {{id: divide, set: {{q: "10 div n"}}}}
    to: [out]
sinks:
  - {{id: out, type: file, path: {tmp_path / 'out'}}}
""")
    r = d.post("/v1/events", '[{"n": 2}, {"n": 0}, {"n": 5}]')
    assert r.status_code == 202
    d.wait_processed(3)
    d.stop()
    queue = QueueReader(queue_path(str(tmp_path / "data")))
    letters = queue.dead_letters()
    assert [(x.event_id, x.payload, x.location) for x in letters] == [("http:2", {"n": 0}, "step:p/divide")]
    assert "DIVIDE_BY_ZERO" in letters[0].error
    assert sorted(x["q"] for x in read_spool(tmp_path / "out")) == [2, 5]
    assert queue.replay_dead_letters() == 1
    assert queue.stats().queued_events == 1 and queue.stats().dead_letters == 0
    assert queue.peek()[0].event_ids() == ["http:2"]  # replayed with its id


def test_a_sink_that_stays_down_dead_letters_the_batch(start_daemon, tmp_path):
    d = start_daemon("""
version: 1
pipelines: [{id: p, to: [hook]}]
sinks:
  - {id: hook, type: http, url: "http://127.0.0.1:9/nothing", retry: {attempts: 2, backoff: 10ms}}
""")
    d.post("/v1/events", '[{"n": 1}, {"n": 2}]')
    deadline = time.monotonic() + 30
    while d.client.get("/v1/queue").json()["dead_letters"] < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    q = d.client.get("/v1/queue").json()
    assert q["dead_letters"] == 2 and q["queued_events"] == 0
    d.stop()
    letters = QueueReader(queue_path(str(tmp_path / "data"))).dead_letters()
    assert {x.location for x in letters} == {"sink"} and "could not deliver" in letters[0].error


def test_an_event_a_step_failed_on_is_dead_lettered_once_when_its_batch_mates_sink_fails(start_daemon, tmp_path):
    """Issue 39: the event that failed at the step was dead-lettered twice, also as a failure of the sink it never
    reached (its batch-mates failed there), and replay-dead-letters then ran it twice."""
    d = start_daemon("""
version: 1
pipelines:
  - id: p
    steps:
      - annotate: {id: divide, set: {q: "10 div n"}}
    to: [hook]
sinks:
  - {id: hook, type: http, url: "http://127.0.0.1:9/nothing", retry: {attempts: 2, backoff: 10ms}}
""")
    d.post("/v1/events", '[{"n": 2}, {"n": 0}, {"n": 5}]')
    wait_for(lambda: d.client.get("/v1/queue").json()["queued_events"] == 0
             and d.client.get("/v1/queue").json()["dead_letters"] >= 3, what="the batch dead-lettered")
    d.stop()
    queue = QueueReader(queue_path(str(tmp_path / "data")))
    letters = sorted((x.event_id, x.location) for x in queue.dead_letters())
    assert letters == [("http:1", "sink"), ("http:2", "step:p/divide"), ("http:3", "sink")]
    assert queue.replay_dead_letters() == 3
    assert sorted(i for e in queue.peek() for i in e.event_ids()) == ["http:1", "http:2", "http:3"]


def test_queryable_state(start_daemon, tmp_path):
    d = start_daemon("""
version: 1
pipelines:
  - id: p
    steps:
      - aggregate: {id: totals, key: [dev], aggs: {n: "count()", s: "sum(v)"}, into: agg}
""")
    d.post("/v1/events", '[{"dev": "a", "v": 1}, {"dev": "a", "v": 2}, {"dev": "b", "v": 5}]')
    d.wait_processed(3)
    r = d.client.get('/v1/state/totals/["a"]')
    assert r.status_code == 200, r.text
    assert r.json()["value"] == {"n": 2, "s": 3}
    assert d.client.get("/v1/state/totals/a").json()["value"] == {"n": 2, "s": 3}  # a single key's plain value
    assert d.client.get('/v1/state/totals/["zzz"]').status_code == 404
    assert d.client.get("/v1/state/nope/x").status_code == 404


def test_stateless_mode_replies_with_results(start_daemon, tmp_path):
    d = start_daemon("""
version: 1
pipelines:
  - id: p
    steps:
      - filter: {id: big, where: "n > 1"}
      - annotate: {id: inv, set: {inv: "10 div n"}}
""", stateless=True)
    r = d.post("/v1/events", '[{"n": 1}, {"n": 2}, {"n": 5}]')
    assert r.status_code == 200, r.text
    assert [x["payload"]["inv"] for x in r.json()["results"]["p"]] == [5, 2]
    bad = d.post("/v1/events", '{"n": 0}\n', "application/x-ndjson")
    assert bad.status_code == 200  # filtered out before it could fail
    r = d.post("/v1/events", '[{"n": 1.5}, {"n": 1e308}]')
    assert r.status_code in (200, 422)
    assert d.post("/v1/events", "nope").status_code == 400
