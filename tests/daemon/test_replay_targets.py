"""``edgewise replay --to``: a recording into a real daemon over HTTP and into a real MQTT broker."""

from __future__ import annotations

import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from edgewise.sources.replay import ReplaySourceConfig
from tests.conftest import need, port_open
from tests.daemon.helpers import wait_for
from tests.daemon.test_api import read_spool
from tests.test_replay import HSL, edgewise

pytestmark = pytest.mark.service


def test_replay_into_a_running_daemon_over_http(start_daemon, tmp_path: Path) -> None:
    """Every replayed message is queued and processed by a real daemon; the results equal the same pipeline run
    over the recording as a file (a batch computation)."""
    from edgewise.replay import replay

    pipeline = ("version: 1\nsources: [{id: http, type: http, anonymous: true}]\n"
                "pipelines:\n  - id: vp\n    steps:\n      - filter: {id: positions, where: \"event_type = 'VP'\"}\n"
                "      - transform: {id: k, ops: [{keep: [veh, tst, spd]}]}\n    to: [out]\n"
                f"sinks: [{{id: out, type: file, path: {tmp_path / 'out'}}}]\n")
    d = start_daemon(pipeline)
    recording = HSL / "wrong*" / "hfp.dump"
    report = replay(ReplaySourceConfig(id="r", path=str(recording), speed="max", dedupe_lines=True,
                                       progress="off"), d.url)
    d.wait_processed(report.sent)
    d.stop()
    got = sorted(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) for r in read_spool(tmp_path / "out"))
    distinct = {line for p in sorted(HSL.glob("wrong*/hfp.dump")) for line in p.read_bytes().splitlines()}
    assert report.sent == len(distinct) and report.malformed == 0
    expected = []
    for line in distinct:
        inner = next(iter(orjson.loads(line[line.index(b" {") + 1:]).items()))
        if inner[0] == "VP":
            expected.append(orjson.dumps({k: inner[1][k] for k in ("veh", "tst", "spd")},
                                         option=orjson.OPT_SORT_KEYS))
    assert got == sorted(expected) and len(got) > 100


def test_an_hfp_recording_is_published_to_mqtt_as_recorded() -> None:
    """Without a topic in the URL, each message goes out on its recorded topic with its recorded payload."""
    need(port_open(1883), "Mosquitto on 127.0.0.1:1883")
    import paho.mqtt.client as mqtt

    recording = HSL / "stopChange" / "hfp.dump"
    expected = []
    for line in recording.read_bytes().splitlines():
        _, rest = line.split(b" ", 1)
        at = rest.index(b" {")
        expected.append((rest[:at].decode(), rest[at + 1:]))
    received: list[tuple[str, bytes]] = []
    subscribed = threading.Event()
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"sub-{secrets.token_hex(4)}")
    sub.on_connect = lambda c, *a: c.subscribe("/hfp/v2/#", qos=1)
    sub.on_subscribe = lambda *a: subscribed.set()
    sub.on_message = lambda c, u, msg: received.append((msg.topic, msg.payload))
    sub.connect("127.0.0.1", 1883)
    sub.loop_start()
    try:
        assert subscribed.wait(10)
        out = edgewise("replay", str(recording), "--speed", "max", "--to", "mqtt://127.0.0.1:1883", "--quiet")
        assert out.returncode == 0, out.stderr
        deadline = time.monotonic() + 10
        while len(received) < len(expected) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        sub.loop_stop()
        sub.disconnect()
    assert received == expected


def test_two_replays_to_one_broker_at_once_each_deliver_every_message_once(tmp_path: Path) -> None:
    """Each publisher connects with an id of its own: with one shared id (an `mqtt` sink's was its sink id) a broker
    closes one connection whenever the other connects, and each reconnect sends again what was in flight."""
    need(port_open(1883), "Mosquitto on 127.0.0.1:1883")
    import paho.mqtt.client as mqtt
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    topic = f"ew-two-replays/{secrets.token_hex(4)}"
    files = []
    for side in ("a", "b"):
        path = tmp_path / f"{side}.ndjson"
        path.write_bytes(b"".join(orjson.dumps({"side": side, "n": i, "t": i}) + b"\n" for i in range(8000)))
        files.append(path)
    received: list[tuple[str, int]] = []
    subscribed = threading.Event()
    # MQTT 5 with the widest window, so a loaded machine's slow subscriber is not what the broker drops from
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"sub-{secrets.token_hex(4)}",
                      protocol=mqtt.MQTTv5)
    window = Properties(PacketTypes.CONNECT)
    window.ReceiveMaximum = 65535
    sub.on_connect = lambda c, *a: c.subscribe(topic, qos=1)
    sub.on_subscribe = lambda *a: subscribed.set()
    sub.on_message = lambda c, u, msg: received.append((orjson.loads(msg.payload)["side"],
                                                        orjson.loads(msg.payload)["n"]))
    sub.connect("127.0.0.1", 1883, properties=window)
    sub.loop_start()
    try:
        assert subscribed.wait(10)
        command = [sys.executable, "-m", "edgewise", "replay", "--format", "ndjson", "--time-field", "t",
                   "--speed", "max", "--to", f"mqtt://127.0.0.1:1883/{topic}", "--quiet", "--progress", "off"]
        replays = [subprocess.Popen([*command, str(path)], stderr=subprocess.PIPE, text=True) for path in files]
        for replay in replays:
            _, err = replay.communicate(timeout=120)
            assert replay.returncode == 0, err
        wait_for(lambda: len(received) >= 16000, what="both replays' messages", timeout=30)
    finally:
        sub.loop_stop()
        sub.disconnect()
    assert sorted(received) == [(side, n) for side in ("a", "b") for n in range(8000)]
