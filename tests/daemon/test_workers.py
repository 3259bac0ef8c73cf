"""Workers: several processes sharing the queue, a worker that dies, stateful steps across restarts (never
counting an entry twice), OpenTelemetry spans, and the inspect / replay commands."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import orjson
import pytest

from edgewise.cli import main
from edgewise.config import load_text_plan
from edgewise.daemon.queue import Append, QueueReader, queue_path
from edgewise.daemon.server import load_spec
from edgewise.daemon.worker import QUEUE_POSITION, Worker
from edgewise.daemon.writer import QueueWriter
from edgewise.errors import ConfigError
from tests.daemon.helpers import worker_in, worker_pauses
from tests.daemon.test_api import read_spool

STATELESS = """
version: 1
pipelines:
  - id: p
    steps: [{{annotate: {{id: a, set: {{m: "n % 7"}}}}}}]
    to: [out]
sinks: [{{id: out, type: file, path: {out}, envelope: true}}]
"""


def test_several_worker_processes_share_the_queue(start_daemon, tmp_path):
    # a step that takes a while (a program per event), so that one worker cannot take everything alone
    d = start_daemon(f"""
version: 1
pipelines:
  - id: p
    steps: [{{spawn: {{id: slow, argv: ["{sys.executable}", "-c", "import sys; print(sys.stdin.read())"],
              into: echoed}}}}]
    to: [out]
sinks: [{{id: out, type: file, path: {tmp_path / 'out'}, envelope: true}}]
""", workers=2, max_batch=2)
    deadline = time.monotonic() + 30
    while not all(w["ready"] for w in d.client.get("/v1/queue").json()["workers"]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    ids = []
    for k in range(12):
        ids += d.post("/v1/events", json.dumps([{"n": 2 * k}, {"n": 2 * k + 1}])).json()["ids"]
    d.wait_processed(24, timeout=60)
    d.stop()
    records = read_spool(tmp_path / "out")
    assert sorted(r["id"] for r in records) == sorted(ids)
    runs = {Path(p).name.split("-")[2] for p in (tmp_path / "out").glob("*.ndjson")}
    assert len(runs) == 2  # both workers wrote segments (each seals files of its own)


def test_a_timeline_needs_one_worker_and_a_stateful_step_does_not(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("version: 1\npipelines: [{id: p, steps: [{aggregate: {id: t, key: [k], aggs: {n: count()}, "
                    "into: a}}]}]\n")
    load_spec(str(path), workers=2)  # partitioned by k (test_partitioned.py)
    path.write_text(f"version: 1\npipelines: [{{id: p, steps: [{{entwine: {{id: e, timeline: {tmp_path / 't'}, "
                    "key: k}}]}]\n")
    with pytest.raises(ConfigError, match="--workers 1"):
        load_spec(str(path), workers=2)
    path.write_text("version: 1\nsources: [{id: f, type: file, path: x}]\npipelines: [{id: p}]\n")
    with pytest.raises(ConfigError, match="edgewise run"):
        load_spec(str(path))


def test_a_dead_worker_is_replaced_and_its_leases_processed(start_daemon, tmp_path):
    d = start_daemon(STATELESS.format(out=tmp_path / "out"))
    d.post("/v1/events", '{"n": 1}')
    d.wait_processed(1)
    pid = d.client.get("/v1/queue").json()["workers"][0]["pid"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        workers = d.client.get("/v1/queue").json()["workers"]
        if workers and workers[0]["pid"] != pid and workers[0]["ready"]:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the worker was not replaced")
    ids = d.post("/v1/events", json.dumps([{"n": i} for i in range(10)])).json()["ids"]
    d.wait_processed(1)
    deadline = time.monotonic() + 30
    while d.client.get("/v1/queue").json()["queued_events"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "edgewise_worker_restarts_total 1.0" in d.client.get("/metrics").text
    assert "worker-died" in d.log.getvalue()
    d.stop()
    assert set(ids) <= {r["id"] for r in read_spool(tmp_path / "out")}


COUNTING = """
version: 1
pipelines:
  - id: p
    steps:
      - aggregate: {id: totals, key: [dev], aggs: {n: "count()", s: "sum(v)"}, into: agg}
    to: [out]
sinks: [{id: out, type: file, path: ./out}]
"""


def _worker(tmp_path: Path) -> Worker:
    return worker_in(tmp_path, COUNTING)


def test_state_committed_before_a_crash_is_not_counted_again(tmp_path):
    writer = QueueWriter(queue_path(str(tmp_path)), "none")
    for v in range(1, 4):
        writer.submit(Append("http", "json", orjson.dumps({"dev": "a", "v": v}), 1)).result(10)
    worker = _worker(tmp_path)
    worker.step()
    # the crash: the state (with the queue position) is committed, the entries are not yet acknowledged
    worker.engine.commit(force=True)
    assert worker.engine.positions[QUEUE_POSITION] == 3
    worker.engine.state.close()
    reader = QueueReader(queue_path(str(tmp_path)))
    assert reader.recover(max_attempts=5) == (3, 0)  # the next daemon gives them to a worker again
    writer.submit(Append("http", "json", orjson.dumps({"dev": "a", "v": 10}), 1)).result(10)
    again = _worker(tmp_path)
    while again.step():
        pass
    again.commit()
    assert again.lookup("totals", '["a"]') == {"value": {"n": 4, "s": 16}}  # 1+2+3 once, then 10
    assert reader.stats().queued_events == 0
    again.close()
    writer.close()


def test_a_worker_pauses_only_when_the_queue_is_drained_or_requests_arrive(tmp_path, monkeypatch):
    """A worker pauses (``idle_wait``) after a lease when the queue had nothing more, or when requests arrived
    since its last lease (ingest comes first); a backlog with nothing arriving it leases again at once. It once
    paused after every lease under ``max_batch`` events, four 1,000-event requests included, and took a backlog
    at half the speed it could (BENCHMARKS.md, issue 41)."""
    writer = QueueWriter(queue_path(str(tmp_path)), "none")

    def append(n: int) -> None:
        body = b"".join(orjson.dumps({"dev": f"d{n}", "v": v}) + b"\n" for v in range(1000))
        writer.submit(Append("http", "ndjson", body, 1000)).result(10)

    for n in range(13):
        append(n)
    worker = _worker(tmp_path)  # what waits when it starts is a backlog, not arrivals
    paused: list[int] = []
    worker_pauses(monkeypatch, lambda seconds: paused.append(len(worker.pending)))
    leased = []
    while worker.step():
        leased.append(len(worker.pending))
        if len(leased) == 1:
            append(13)  # a request arrives while the backlog is worked through
    worker.commit()
    assert leased == [4, 8, 12, 14]  # max_batch 4,096: four entries a lease
    assert paused == [8, 14]  # after the lease that followed the arrival, and after the one that drained the queue
    assert worker.lookup("totals", '["d13"]') == {"value": {"n": 1000, "s": 499500}}
    worker.close()
    writer.close()


def test_daemon_state_survives_a_restart(start_daemon, tmp_path):
    pipeline = COUNTING.replace("./out", str(tmp_path / "out"))
    d = start_daemon(pipeline)
    d.post("/v1/events", '[{"dev": "a", "v": 1}, {"dev": "a", "v": 2}]')
    d.wait_processed(2)
    d.stop()
    d2 = start_daemon(pipeline)
    d2.post("/v1/events", '{"dev": "a", "v": 5}')
    d2.wait_processed(1)
    assert d2.client.get('/v1/state/totals/["a"]').json()["value"] == {"n": 3, "s": 8}
    d2.stop()
    assert main(["inspect", "state", str(tmp_path / "pipeline1.yaml"), "--data-dir", str(tmp_path / "data"),
                 "--json"]) == 0


def test_inspect_and_replay_commands(start_daemon, tmp_path, capsys):
    d = start_daemon("""
version: 1
pipelines:
  - id: p
    steps: [{annotate: {id: div, set: {q: "1 div n"}}}]
""")
    d.post("/v1/events", '[{"n": 1}, {"n": 0}]')
    d.wait_processed(2)
    d.stop()
    data = str(tmp_path / "data")
    capsys.readouterr()
    assert main(["inspect", "dead-letters", "--data-dir", data, "--json"]) == 0
    letters = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(x["event_id"], x["location"]) for x in letters] == [("http:2", "step:p/div")]
    assert main(["inspect", "queue", "--data-dir", data]) == 0
    assert "queued events: 0" in capsys.readouterr().out
    assert main(["replay-dead-letters", "--data-dir", data]) == 0
    assert main(["inspect", "queue", "--data-dir", data, "--json"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert json.loads(out[-2])["queued_events"] == 1 and json.loads(out[-1])["first_id"] == "http:2"
    assert main(["inspect", "queue", "--data-dir", str(tmp_path / "nowhere")]) == 1


def test_spans_per_pipeline_and_step(tmp_path):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from edgewise.daemon.telemetry import StepMeter
    from edgewise.engine.local import LocalEngine

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter = StepMeter(provider.get_tracer("test"))
    plan = load_text_plan("""
version: 1
pipelines:
  - id: p
    steps:
      - filter: {id: keep, where: "n > 1"}
      - annotate: {id: mark, set: {m: "true"}}
""")
    engine = LocalEngine(plan, instrument=meter, stdout=open(os.devnull, "wb"))  # noqa: SIM115
    from edgewise.events import Batch

    engine.open()
    engine.process(Batch([{"n": 1}, {"n": 2}, {"n": 3}], source="s", ingest_time_us=0, event_times=[0, 0, 0],
                         ids=["a", "b", "c"]))
    engine.close()
    engine.stdout.close()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"pipeline p", "step keep", "step mark"}
    assert spans["step keep"].attributes["edgewise.events_in"] == 3
    assert spans["step keep"].attributes["edgewise.events_out"] == 2
    assert spans["step mark"].parent.span_id == spans["pipeline p"].context.span_id
    assert meter.snapshot()["events"] == [["p", "keep", "in", 3], ["p", "keep", "out", 2], ["p", "mark", "in", 2],
                                          ["p", "mark", "out", 2]]


@pytest.mark.parametrize("nice", [0, 3])
def test_workers_run_below_the_servers_cpu_priority(start_daemon, tmp_path, nice):
    """--worker-nice: under contention for the cores, accepting events comes before processing the backlog."""
    d = start_daemon(STATELESS.format(out=tmp_path / "out"), workers=2, worker_nice=nice)
    deadline = time.monotonic() + 30
    while not all(w["ready"] for w in d.client.get("/v1/queue").json()["workers"]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    pids = [w["pid"] for w in d.client.get("/v1/queue").json()["workers"]]
    assert [os.getpriority(os.PRIO_PROCESS, pid) for pid in pids] == [min(19, ours + nice)] * 2


def test_serve_refuses_a_worker_nice_outside_what_nice_takes(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["serve", "p.yaml", "--worker-nice", "20"])
    assert exited.value.code == 2
    assert "--worker-nice" in capsys.readouterr().err
