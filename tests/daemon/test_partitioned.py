"""``edgewise serve --workers N`` with a stateful pipeline (issue 41): key partitions over the workers, the
watermark across them, a worker killed mid-stream, restarts with another ``--workers``, state lookups and what
``/v1/queue`` shows. The expected results are computed here, plainly, from docs/state.md's rules (a window's
events, the watermark, late events), not by the engine."""

from __future__ import annotations

import json
import os
import random
import signal
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from edgewise.cli import main
from edgewise.daemon.server import load_spec
from edgewise.errors import ConfigError
from tests.daemon.helpers import DaemonProcess, InProcessDaemon, partitioned_workers_caught_up, wait_for
from tests.daemon.test_api import read_spool

SIZE, DELAY = 10, 2
"""The pipeline's tumbling window and watermark, in seconds."""

PIPELINE = """
version: 1
event_time: timestamp_seconds(t)
pipelines:
  - id: p
    steps:
      - filter: {{id: keep, where: "v IS NULL OR v >= 0"}}
      - window: {{id: w, key: [k], tumbling: 10s, watermark: 2s, aggs: {{n: count(), total: sum(v)}}, late: late}}
    to: [out]
sinks:
  - {{id: out, type: file, path: {out}, envelope: true}}
  - {{id: late, type: file, path: {late}, envelope: true}}
"""


def stream(seed: int, n: int = 900) -> list[dict[str, Any]]:
    """Events of 14 keys, in time order but for some moved back by up to 20 s (late, or not), some filtered out;
    the last one, far ahead, closes every window."""
    rng = random.Random(seed)
    events = []
    for i in range(n):
        t = i // 6
        if rng.random() < 0.08:
            t = max(0, t - rng.randint(1, 20))
        events.append({"k": f"k{rng.randint(0, 13)}", "t": t, "v": rng.choice([1, 2, 5, -1, None])})
    events.append({"k": "end", "t": n, "v": 0})
    return events


def expected(events: list[dict[str, Any]]) -> tuple[dict[tuple[str, int], dict[str, Any]], list[dict[str, Any]]]:
    """docs/state.md: the watermark is the largest event time seen before an event minus the delay; an event whose
    window ends at or before it is late. Every window closes by the end (the last event is far ahead), once."""
    windows: dict[tuple[str, int], dict[str, Any]] = {}
    late: list[dict[str, Any]] = []
    largest = None
    for e in events:
        if e["v"] is not None and e["v"] < 0:
            continue  # the filter
        start = e["t"] - e["t"] % SIZE
        if largest is not None and start + SIZE <= largest - DELAY:
            late.append(e)
        else:
            w = windows.setdefault((e["k"], start), {"n": 0, "total": None})
            w["n"] += 1
            if e["v"] is not None:
                w["total"] = (w["total"] or 0) + e["v"]
        largest = e["t"] if largest is None else max(largest, e["t"])
    # the last event's own window is still open
    last = events[-1]
    windows.pop((last["k"], last["t"] - last["t"] % SIZE), None)
    return windows, late


def results(out: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """The windows the sink holds, each id once with one content (a replay after a crash sends it again, alike)."""
    by_id: dict[str, dict[str, Any]] = {}
    for r in read_spool(out):
        p = r["payload"]
        assert by_id.setdefault(r["id"], p) == p, f"{r['id']} delivered twice, differently"
    found = {}
    for p in by_id.values():
        start = int(datetime.fromisoformat(p["window_start"].replace("Z", "+00:00")).timestamp())
        found[(p["k"], start)] = {"n": p["n"], "total": p["total"]}
    return found


def late_events(late: Path) -> list[dict[str, Any]]:
    by_id = {r["id"]: r["payload"] for r in read_spool(late)}
    return sorted(by_id.values(), key=lambda e: json.dumps(e, sort_keys=True))


def post_all(post: Any, events: list[dict[str, Any]], seed: int) -> None:
    """In requests of 1 to 60 events (queue entries of all sizes)."""
    rng = random.Random(seed)
    i = 0
    while i < len(events):
        n = rng.randint(1, 60)
        response = post("/v1/events", json.dumps(events[i:i + n]))
        assert response.status_code == 202, response.text
        i += n


def check(tmp_path: Path, events: list[dict[str, Any]]) -> None:
    windows, late = expected(events)
    assert results(tmp_path / "out") == windows
    assert late_events(tmp_path / "late") == sorted(late, key=lambda e: json.dumps(e, sort_keys=True))
    assert late, "the stream has late events"


def pipeline(tmp_path: Path) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE.format(out=tmp_path / "out", late=tmp_path / "late"))
    return path


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_several_workers_give_what_one_gives(tmp_path, workers):
    """The windows, their counts and the late events are those of the plain computation with any number of
    workers: each worker keeps its partitions' windows and moves its watermark with every other worker's events."""
    events = stream(seed=workers)
    d = InProcessDaemon(pipeline(tmp_path), tmp_path / "data", workers=workers)
    try:
        post_all(d.post, events, seed=workers)
        d.wait_processed(len(events), timeout=120)
        queue = d.client.get("/v1/queue").json()
        reported = partitioned_workers_caught_up(d.client) if workers > 1 else []
    finally:
        d.stop()
    check(tmp_path, events)
    assert queue["partitioned"] is (workers > 1)
    if workers > 1:
        shares = [w["partitions"] for w in reported]
        assert sorted(p for share in shares for p in share) == list(range(128))


def test_the_queue_view_shows_a_workers_partitions_before_its_first_snapshot(tmp_path):
    """CI found it: a worker slow to start had sent no snapshot yet while the others had emptied the queue, and
    /v1/queue showed it without partitions. They are the daemon's assignment, not something a worker reports."""
    d = InProcessDaemon(pipeline(tmp_path), tmp_path / "data", workers=3)
    try:
        totals = d.daemon.metrics.workers
        with totals._lock:  # as if no worker had reported yet, and none will during this test
            totals.update = lambda key, snapshot: None  # type: ignore[method-assign]
            totals.live.clear()
        queue = d.client.get("/v1/queue").json()
    finally:
        d.stop()
    assert queue["partitioned"] is True
    shares = [w["partitions"] for w in queue["workers"]]
    assert sorted(p for share in shares for p in share) == list(range(128))
    assert all("position" not in w for w in queue["workers"]), "no position is made up for a worker that sent none"


def test_state_lookups_reach_the_worker_that_holds_the_key(tmp_path, capsys):
    d = InProcessDaemon(pipeline(tmp_path), tmp_path / "data", workers=2)
    try:
        d.post("/v1/events", json.dumps([{"k": f"k{i}", "t": 1, "v": i} for i in range(20)]))
        d.wait_processed(20)
        for i in range(20):
            reply = d.client.get(f"/v1/state/w/k{i}")
            assert reply.status_code == 200, reply.text
            (_, _, key, accumulators, _), = reply.json()["value"]
            assert (key, accumulators[0]) == (f'["k{i}"]', 1), reply.json()
        assert d.client.get("/v1/state/w/nobody").status_code == 404
    finally:
        d.stop()
    # `edgewise inspect state` reads the state the partitions keep: each open window once, and the step's meta
    capsys.readouterr()
    assert main(["inspect", "state", str(tmp_path / "pipeline.yaml"), "--data-dir", str(tmp_path / "data"),
                 "--json", "--limit", "100"]) == 0
    keys = [json.loads(line)["key"] for line in capsys.readouterr().out.splitlines()]
    assert sorted(keys) == sorted(["meta", *(f'w/0/["k{i}"]' for i in range(20))])


def test_a_restart_with_other_workers_moves_the_partitions_with_their_state(tmp_path):
    """One worker (state kept as one), then two, then three, then one again over one stream: the state moves with
    its partitions each time, and the results are the plain computation's."""
    events = stream(seed=7)
    path = pipeline(tmp_path)
    thirds = [events[:300], events[300:450], events[450:700], events[700:]]
    for n, (workers, part) in enumerate(zip([1, 2, 3, 1], thirds, strict=True)):
        d = InProcessDaemon(path, tmp_path / "data", workers=workers)
        try:
            before = d.client.get("/v1/queue").json()["processed_events"]
            post_all(d.post, part, seed=n)
            d.wait_processed(before + len(part), timeout=120)
        finally:
            d.stop()
    check(tmp_path, events)


def test_the_partitioned_daemon_refuses_a_second_stateful_step(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("version: 1\npipelines: [{id: p, steps: [{aggregate: {id: t, key: [k], aggs: {n: count()}, "
                    "into: a}}, {dedupe: {id: d, key: k, within: 5s}}]}]\n")
    with pytest.raises(ConfigError, match=r"pipeline p has several stateful steps \(t, d\)"):
        load_spec(str(path), workers=2)
    load_spec(str(path), workers=1)
    path.write_text("version: 1\npipelines: [{id: p, steps: [{spawn: {id: s, argv: [cat], into: o}}, "
                    "{dedupe: {id: d, key: k, within: 5s}}]}]\n")
    with pytest.raises(ConfigError, match="step s runs a program before the stateful step d"):
        load_spec(str(path), workers=2)


def test_a_worker_killed_mid_stream_loses_nothing_and_counts_nothing_twice(tmp_path):
    """kill -9 of one worker while the queue holds what it has not delivered: the daemon starts it again, it reads
    from its partitions' committed positions, and every window is counted once."""
    import httpx

    events = stream(seed=11, n=6000)
    d = DaemonProcess(pipeline(tmp_path), tmp_path / "data", "--workers", "2", "--commit-interval", "0.05")
    try:
        client = httpx.Client(base_url=d.url, timeout=30)

        def post(path: str, body: str) -> httpx.Response:
            return client.post(path, content=body, headers={"content-type": "application/json"})

        wait_for(lambda: all(w["ready"] for w in client.get("/v1/queue").json()["workers"]), 60, "two workers")
        paused, victim = (w["pid"] for w in client.get("/v1/queue").json()["workers"])
        # the other worker paused: the victim delivers its share of what is posted, and the queue keeps it all (the
        # paused worker's partitions are behind); killed then, it must not take any of it again
        os.kill(paused, signal.SIGSTOP)
        post_all(post, events[:4000], seed=11)

        def victim_delivered() -> bool:
            workers = client.get("/v1/queue").json()["workers"]
            return any(w["pid"] == victim and w.get("position", 0) > 0 and w["lag_entries"] == 0 for w in workers)

        wait_for(victim_delivered, 60, "the victim's share delivered")
        os.kill(victim, signal.SIGKILL)

        def replaced() -> bool:
            workers = client.get("/v1/queue").json()["workers"]
            return len(workers) == 2 and all(w["ready"] for w in workers) and victim not in {w["pid"] for w in workers}

        wait_for(replaced, 60, "the killed worker replaced")  # while the queue still holds everything
        os.kill(paused, signal.SIGCONT)
        post_all(post, events[4000:], seed=12)
        wait_for(lambda: client.get("/v1/queue").json()["queued_events"] == 0, 120, "every event delivered")
        client.close()
    finally:
        d.signal(signal.SIGTERM)
        d.wait(60)
    assert "worker-died" in d.log()
    check(tmp_path, events)


def test_windows_of_each_key_hold_that_keys_events_only(tmp_path):
    """A guard on the expectation itself: the plain computation over a stream with one key per window."""
    events = [{"k": "a", "t": 1, "v": 1}, {"k": "b", "t": 2, "v": 2}, {"k": "a", "t": 30, "v": 3},
              {"k": "b", "t": 3, "v": 4}, {"k": "end", "t": 100, "v": 0}]
    windows, late = expected(events)
    assert windows == {("a", 0): {"n": 1, "total": 1}, ("b", 0): {"n": 1, "total": 2},
                       ("a", 30): {"n": 1, "total": 3}}
    assert late == [{"k": "b", "t": 3, "v": 4}]


def test_kill_minus_nine_of_the_daemon_mid_stream_with_other_workers_each_time(tmp_path):
    """The whole daemon killed right after each share of the stream is accepted (most of it not delivered yet),
    restarted with 2, 3, 2 and then 1 worker: every acknowledged event is counted once, by the plain computation."""
    import httpx

    events = stream(seed=21, n=4000)
    path = pipeline(tmp_path)
    shares = [events[:1000], events[1000:2000], events[2000:3000], events[3000:]]
    for n, (workers, share) in enumerate(zip([2, 3, 2, 1], shares, strict=True)):
        d = DaemonProcess(path, tmp_path / "data", "--workers", str(workers), "--commit-interval", "0.05")
        with httpx.Client(base_url=d.url, timeout=30) as client:
            post_all(lambda p, body, c=client: c.post(p, content=body, headers={"content-type": "application/json"}),
                     share, seed=n)
            if n == len(shares) - 1:  # the last daemon delivers everything and stops cleanly
                wait_for(lambda c=client: c.get("/v1/queue").json()["queued_events"] == 0, 120, "all delivered")
        if n == len(shares) - 1:
            d.signal(signal.SIGTERM)
            d.wait(60)
        else:
            d.kill()
    check(tmp_path, events)


def test_an_event_that_does_not_fit_the_declared_schema_is_reported_once_by_two_workers(tmp_path):
    """Every worker reads every entry; only the entry's owner reports what is wrong in it (a malformed event, a
    failing event time), so the daemon's log says it once."""
    import httpx

    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE.format(out=tmp_path / "out", late=tmp_path / "late").replace(
        "version: 1\n", 'version: 1\nsources: [{id: http, type: http, schema: "k STRING, t BIGINT, v BIGINT"}]\n'))
    events = [{"k": f"k{i % 5}", "t": i, "v": 1} for i in range(200)]
    events[77] = {"k": "k2", "t": 77, "v": "seven"}
    events.append({"k": "end", "t": 1000, "v": 0})
    d = DaemonProcess(path, tmp_path / "data", "--workers", "2", "--commit-interval", "0.05")
    try:
        client = httpx.Client(base_url=d.url, timeout=30)
        for start in range(0, len(events), 20):
            response = client.post("/v1/events", content=json.dumps(events[start:start + 20]),
                                   headers={"content-type": "application/json"})
            assert response.status_code == 202, response.text
        wait_for(lambda: client.get("/v1/queue").json()["queued_events"] == 0, 120, "every event delivered")
        wait_for(lambda: "field v is declared BIGINT" in d.log(), 30, "the malformed event reported")
        client.close()
    finally:
        d.signal(signal.SIGTERM)
        d.wait(60)
    assert d.log().count('field v is declared BIGINT but holds "seven"') == 1, d.log()
    kept = [e for i, e in enumerate(events) if i != 77]
    assert results(tmp_path / "out") == expected(kept)[0]
