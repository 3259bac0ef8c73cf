"""The broker sources and the sinks against the real services on 127.0.0.1: Mosquitto, NATS JetStream, Redis,
PostgreSQL; and a mesh of two daemons."""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest

from edgewise.daemon.queue import QueueReader, queue_path
from tests.conftest import need, port_open
from tests.daemon.helpers import wait_for
from tests.daemon.test_api import read_spool

pytestmark = pytest.mark.service


def publish_mqtt(topic: str, bodies: list[bytes]) -> None:
    import paho.mqtt.client as mqtt

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"pub-{secrets.token_hex(4)}")
    client.connect("127.0.0.1", 1883)
    client.loop_start()
    infos = [client.publish(topic, body, qos=1) for body in bodies]
    for info in infos:
        info.wait_for_publish(10)
    client.disconnect()
    client.loop_stop()


def test_mqtt_messages_published_while_the_daemon_is_down_are_processed(start_daemon, tmp_path):
    need(port_open(1883), "Mosquitto on 127.0.0.1:1883")
    run = secrets.token_hex(4)
    pipeline = f"""
version: 1
sources:
  - {{id: sensors, type: mqtt, url: "mqtt://127.0.0.1:1883", topics: ["ew-test/{run}/#"], client_id: ew-{run}}}
pipelines: [{{id: p, to: [out]}}]
sinks: [{{id: out, type: file, path: {tmp_path / 'out'}}}]
"""
    d = start_daemon(pipeline)
    wait_for(lambda: d.client.get("/v1/queue").json()["sources"]["sensors"]["connected"], what="mqtt connect")
    publish_mqtt(f"ew-test/{run}/live", [b'{"n": -1}'])
    d.wait_processed(1)
    d.stop()
    # the daemon is down: the broker keeps these for its persistent session (QoS 1)
    publish_mqtt(f"ew-test/{run}/a", [orjson.dumps({"n": i}) for i in range(50)] + [b"not json"])
    d2 = start_daemon(pipeline)
    d2.wait_processed(50)
    wait_for(lambda: d2.client.get("/v1/queue").json()["dead_letters"] == 1, what="the dead letter")
    d2.stop()
    got = sorted(r["n"] for r in read_spool(tmp_path / "out"))
    assert got == [-1, *range(50)]
    letters = QueueReader(queue_path(str(tmp_path / "data"))).dead_letters()
    assert letters[0].payload == {"topic": f"ew-test/{run}/a", "body": "not json"}


class Gate(ThreadingHTTPServer):
    """An HTTP sink's far end that holds every request until it is opened: a sink that is slow, so the daemon's
    queue fills and it pushes back on its sources."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.received: list[Any] = []
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                gate.opened.wait(30)
                gate.received.extend(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_a_burst_the_daemon_pushes_back_on_is_not_dropped_by_the_broker(start_daemon, tmp_path):
    """The daemon acknowledges a message only once it is queued on disk, and while its queue is above the high-water
    mark it takes none. A broker holds back only a window of unacknowledged messages per client (MQTT 3.1.1:
    mosquitto's 20) and queues the rest up to a limit (1000), then drops what comes after, although it acknowledged
    it to the publisher. Over MQTT 5 the source asks for a window of 65535, so the burst waits in flight instead."""
    need(port_open(1883), "Mosquitto on 127.0.0.1:1883")
    run = secrets.token_hex(4)
    gate = Gate()
    d = start_daemon(f"""
version: 1
sources:
  - {{id: m, type: mqtt, topics: ["ew-burst/{run}"], client_id: ew-burst-{run}, clean_start: true}}
pipelines: [{{id: p, to: [slow]}}]
sinks: [{{id: slow, type: http, url: "http://127.0.0.1:{gate.server_address[1]}/"}}]
""", high_water=100)
    wait_for(lambda: d.client.get("/v1/queue").json()["sources"]["m"]["connected"], what="mqtt connect")
    publish_mqtt(f"ew-burst/{run}", [orjson.dumps({"n": i}) for i in range(3000)])  # the broker has them all
    gate.opened.set()
    d.wait_processed(3000, timeout=60)
    gate.shutdown()
    assert sorted({r["n"] for r in gate.received}) == list(range(3000))


def test_mqtt_sink_publishes_with_topic_fields(start_daemon, tmp_path):
    need(port_open(1883), "Mosquitto on 127.0.0.1:1883")
    import paho.mqtt.client as mqtt

    run = secrets.token_hex(4)
    received: list[tuple[str, dict]] = []
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"sub-{run}")
    subscribed = threading.Event()
    sub.on_connect = lambda c, *a: c.subscribe(f"ew-out/{run}/#", qos=1)
    sub.on_subscribe = lambda *a: subscribed.set()
    sub.on_message = lambda c, u, m: received.append((m.topic, orjson.loads(m.payload)))
    sub.connect("127.0.0.1", 1883)
    sub.loop_start()
    assert subscribed.wait(10)
    d = start_daemon(f"""
version: 1
pipelines: [{{id: p, to: [bus]}}]
sinks: [{{id: bus, type: mqtt, topic: "ew-out/{run}/{{veh}}"}}]
""")
    d.post("/v1/events", json.dumps([{"veh": 7, "n": 1}, {"veh": 8, "n": 2}]))
    wait_for(lambda: len(received) == 2, what="mqtt messages")
    sub.loop_stop()
    assert sorted(received, key=lambda x: x[0]) == [(f"ew-out/{run}/7", {"veh": 7, "n": 1}),
                                                     (f"ew-out/{run}/8", {"veh": 8, "n": 2})]


async def _jetstream(stream: str, subjects: list[str], publish: list[tuple[str, bytes]] = ()) -> None:
    import nats

    nc = await nats.connect("nats://127.0.0.1:4222")
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=subjects)
    for subject, body in publish:
        await js.publish(subject, body)
    await nc.close()


async def _stream_messages(stream: str) -> list[tuple[str | None, dict]]:
    import nats

    nc = await nats.connect("nats://127.0.0.1:4222")
    js = nc.jetstream()
    info = await js.stream_info(stream)
    out = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await js.get_msg(stream, seq)
        out.append(((msg.headers or {}).get("Nats-Msg-Id"), orjson.loads(msg.data)))
    await js.delete_stream(stream)
    await nc.close()
    return out


PEER = "{id: peer, type: http, mesh: true, tokens: [peer-token]}"
"""A mesh peer's source: only it may send events with the ids they already have (a replay, another daemon)."""


def post_as_peer(d: Any, envelope: str) -> Any:
    return d.post("/v1/events?source=peer", envelope, "application/vnd.edgewise.events+json",
                  Authorization="Bearer peer-token")


def test_nats_source_and_a_deduplicating_nats_sink(start_daemon, tmp_path):
    need(port_open(4222), "NATS with JetStream on 127.0.0.1:4222")
    run = secrets.token_hex(4)
    source_stream, sink_stream = f"EWIN{run}", f"EWOUT{run}"
    asyncio.run(_jetstream(source_stream, [f"ewin.{run}.>"],
                           [(f"ewin.{run}.x", orjson.dumps({"n": i})) for i in range(30)]))
    asyncio.run(_jetstream(sink_stream, [f"ewout.{run}"]))
    d = start_daemon(f"""
version: 1
sources:
  - {{id: js, type: nats, stream: {source_stream}, subject: "ewin.{run}.>"}}
  - {PEER}
pipelines: [{{id: p, to: [out]}}]
sinks: [{{id: out, type: nats, subject: "ewout.{run}"}}]
""")
    d.wait_processed(30)
    # the same ids again (a replay): JetStream drops them by Nats-Msg-Id
    again = {"events": [{"id": f"js:{i}", "payload": {"n": 100 + i}} for i in range(1, 6)]}
    assert post_as_peer(d, json.dumps(again)).status_code == 202
    d.wait_processed(35)
    d.stop()
    messages = asyncio.run(_stream_messages(sink_stream))
    assert len(messages) == 30
    assert sorted(m[1]["n"] for m in messages) == list(range(30))
    assert len({m[0] for m in messages}) == 30
    asyncio.run(_delete_stream(source_stream))


async def _delete_stream(stream: str) -> None:
    import nats

    nc = await nats.connect("nats://127.0.0.1:4222")
    await nc.jetstream().delete_stream(stream)
    await nc.close()


def test_redis_stream_sink_skips_repeated_ids(start_daemon, tmp_path):
    need(port_open(6379), "Redis on 127.0.0.1:6379")
    import redis

    stream = f"ew-test:{secrets.token_hex(4)}"
    d = start_daemon(f"""
version: 1
sources: [{PEER.replace("}", ", redelivery_window: 0}")}]
pipelines: [{{id: p, to: [r]}}]
sinks: [{{id: r, type: redis, stream: "{stream}"}}]
""")  # the queue takes the repeated ids (its own check is off), so what is tested is the sink's
    body = json.dumps({"events": [{"id": f"e{i}", "payload": {"n": i}} for i in range(10)]})
    for _ in range(2):
        assert post_as_peer(d, body).status_code == 202
    d.wait_processed(20)
    client = redis.Redis()
    entries = client.xrange(stream)
    assert len(entries) == 10
    assert sorted(orjson.loads(fields[b"payload"])["n"] for _, fields in entries) == list(range(10))
    client.delete(stream, *client.keys(f"{stream}:seen:*"))
    client.close()


def test_postgres_and_sqlite_sinks_upsert_by_id(tmp_path):
    need(port_open(5432), "PostgreSQL on 127.0.0.1:5432")
    import sqlite3

    import psycopg

    from edgewise.config import load_text_plan
    from edgewise.engine.local import LocalEngine
    from edgewise.sources.file import FileSource, FileSourceConfig

    table = f"ew_{secrets.token_hex(4)}"
    events = tmp_path / "events.ndjson"
    events.write_text("".join(json.dumps({"n": i}) + "\n" for i in range(25)))
    plan = load_text_plan(f"""
version: 1
pipelines: [{{id: p, to: [pg, lite, first]}}]
sinks:
  - {{id: pg, type: postgres, dsn: "postgresql://postgres@127.0.0.1:5432/test", table: {table}}}
  - {{id: lite, type: sqlite, path: {tmp_path / 'out.db'}, table: events}}
  - {{id: first, type: sqlite, path: {tmp_path / 'out.db'}, table: firsts, mode: insert}}
""", base_dir=str(tmp_path))
    from edgewise.config import BuildContext

    for _ in range(2):  # the same file twice: the same ids, no new rows
        LocalEngine(plan).run([FileSource(FileSourceConfig(id="in", path=str(events)), BuildContext("."))])
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/test") as conn:
        rows = conn.execute(f"SELECT id, payload FROM {table} ORDER BY (payload->>'n')::int").fetchall()
        conn.execute(f"DROP TABLE {table}")
    assert [r[1]["n"] for r in rows] == list(range(25)) and rows[0][0] == "in:events.ndjson:1"
    db = sqlite3.connect(tmp_path / "out.db")
    assert db.execute("SELECT count(*), count(DISTINCT id) FROM events").fetchone() == (25, 25)
    assert db.execute("SELECT count(*) FROM firsts").fetchone() == (25,)
    db.close()


def test_a_mesh_of_two_daemons_keeps_event_ids(start_daemon, tmp_path, monkeypatch):
    monkeypatch.setenv("EW_MESH_TOKEN", "edge-to-hub")
    hub = start_daemon(f"""
version: 1
sources: [{{id: edges, type: http, mesh: true, token_env: EW_MESH_TOKEN}}]
pipelines: [{{id: p, to: [out]}}]
sinks: [{{id: out, type: file, path: {tmp_path / 'hub-out'}, envelope: true}}]
""", data_dir=tmp_path / "hub")
    edge = start_daemon(f"""
version: 1
pipelines:
  - id: p
    steps: [{{annotate: {{id: at, set: {{edge: "true"}}}}}}]
    to: [hub]
sinks: [{{id: hub, type: edgewise, url: "{hub.url}", source: edges, token_env: EW_MESH_TOKEN}}]
""", data_dir=tmp_path / "edge")
    # without the peer's token nothing gets in, and an envelope to a source that is not a peer neither
    envelope = json.dumps({"events": [{"id": "forged-1", "payload": {}}]})
    assert hub.post("/v1/events?source=edges", envelope, "application/vnd.edgewise.events+json").status_code == 401
    assert edge.post("/v1/events", envelope, "application/vnd.edgewise.events+json").status_code == 403
    ids = edge.post("/v1/events", json.dumps([{"n": i} for i in range(5)])).json()["ids"]
    edge.wait_processed(5)
    hub.wait_processed(5)
    hub.stop()
    records = read_spool(tmp_path / "hub-out")
    assert sorted(r["id"] for r in records) == sorted(ids)
    assert all(r["payload"]["edge"] is True for r in records)


def test_a_mesh_keeps_what_the_origin_knew_and_a_window_there_agrees(start_daemon, tmp_path, monkeypatch):
    """Events forwarded by an edge keep their event time (here the edge's ingest time: no event_time expression),
    ingest time and source at the hub, so the hub's window gives exactly the edge's results."""
    monkeypatch.setenv("EW_MESH_TOKEN", "edge-to-hub")
    window = "window: {id: per2s, key: [k], tumbling: 2s, aggs: {n: count()}}"
    hub = start_daemon(f"""
version: 1
sources: [{{id: edges, type: http, mesh: true, token_env: EW_MESH_TOKEN, idle_timeout: 1s}}]
pipelines:
  - {{id: copy, to: [copies]}}
  - {{id: w, steps: [{{{window}}}], to: [windows]}}
sinks:
  - {{id: copies, type: file, path: {tmp_path / 'hub-copies'}, envelope: true, max_age: 100ms}}
  - {{id: windows, type: file, path: {tmp_path / 'hub-windows'}, max_age: 100ms}}
""", data_dir=tmp_path / "hub")
    edge = start_daemon(f"""
version: 1
sources: [{{id: devices, type: http, anonymous: true, idle_timeout: 1s}}]
pipelines:
  - {{id: forward, to: [hub, copies]}}
  - {{id: w, steps: [{{{window}}}], to: [windows]}}
sinks:
  - {{id: hub, type: edgewise, url: "{hub.url}", source: edges, token_env: EW_MESH_TOKEN}}
  - {{id: copies, type: file, path: {tmp_path / 'edge-copies'}, envelope: true, max_age: 100ms}}
  - {{id: windows, type: file, path: {tmp_path / 'edge-windows'}, max_age: 100ms}}
""", data_dir=tmp_path / "edge")
    for n in range(3):  # three requests, each in a 2 s window of its own (by ingest time)
        posted = time.time()
        assert edge.post("/v1/events", json.dumps([{"k": "a", "n": n}, {"k": "b", "n": n}])).status_code == 202
        wait_for(lambda posted=posted: time.time() // 2 > posted // 2 and time.time() - posted >= 0.1,
                 what="the next window of ingest time")
    edge.wait_processed(6)
    hub.wait_processed(6)
    counted = lambda side: sum(r["n"] for r in read_spool(tmp_path / f"{side}-windows"))  # noqa: E731
    # the idle timeout closes the last windows on both
    wait_for(lambda: counted("edge") == counted("hub") == 6, what="every window on both")
    at_edge = {r["id"]: r for r in read_spool(tmp_path / "edge-copies")}
    at_hub = {r["id"]: r for r in read_spool(tmp_path / "hub-copies")}
    assert at_hub.keys() == at_edge.keys() and len(at_hub) == 6
    for i, r in at_hub.items():
        assert (r["event_time"], r["source"], r["payload"]) == (at_edge[i]["event_time"], "devices",
                                                                at_edge[i]["payload"])
    key = lambda r: (r["window_start"], r["k"])  # noqa: E731
    edge_windows = sorted(read_spool(tmp_path / "edge-windows"), key=key)
    assert edge_windows and sorted(read_spool(tmp_path / "hub-windows"), key=key) == edge_windows
    assert sum(r["n"] for r in edge_windows) == 6


def test_a_nats_message_redelivered_with_its_msg_id_is_queued_once(start_daemon, tmp_path):
    """JetStream's own duplicate window only guards publishing; a message delivered twice to the daemon (its ack
    was lost, or it was published again later) keeps its Nats-Msg-Id and is recognised by the source."""
    need(port_open(4222), "NATS with JetStream on 127.0.0.1:4222")
    import nats
    from nats.js.api import StreamConfig

    run = secrets.token_hex(4)
    stream = f"EWID{run}"

    async def publish() -> None:
        nc = await nats.connect("nats://127.0.0.1:4222")
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name=stream, subjects=[f"ewid.{run}"], duplicate_window=0.1))
        await js.publish(f"ewid.{run}", b'{"n": 1}', headers={"Nats-Msg-Id": "order-1"})
        await asyncio.sleep(0.5)  # past the stream's duplicate window: JetStream stores it again
        await js.publish(f"ewid.{run}", b'{"n": 2}', headers={"Nats-Msg-Id": "order-1"})
        await js.publish(f"ewid.{run}", b'{"n": 3}')  # no id: an event of its own
        await nc.close()

    asyncio.run(publish())
    d = start_daemon(f"""
version: 1
sources: [{{id: js, type: nats, stream: {stream}, subject: "ewid.{run}"}}]
pipelines: [{{id: p, to: [out]}}]
sinks: [{{id: out, type: file, path: {tmp_path / 'out'}, envelope: true, max_age: 100ms}}]
""")
    d.wait_processed(2)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and d.client.get("/v1/queue").json()["sources"]["js"]["received"] < 3:
        time.sleep(0.1)
    time.sleep(0.5)
    d.stop()
    records = read_spool(tmp_path / "out")
    assert sorted((r["id"].startswith("js:order-1"), r["payload"]["n"]) for r in records) == [(False, 3), (True, 1)]
    asyncio.run(_delete_stream(stream))
