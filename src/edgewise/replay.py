"""``edgewise replay RECORDING --to TARGET``: a recording, at its recorded pace, into a daemon, a broker or stdout.

The recording is read and paced exactly as the ``replay`` source reads it (``sources/replay.py``); what is due
together is sent together:

* ``--to http://HOST:PORT`` (``/v1/events`` unless the URL names a path): NDJSON posts of the decoded events to an
  edge daemon, with a bearer token if given. A daemon that pushes back (429, 503, 507) or cannot be reached is
  retried with backoff, so the replay slows down instead of losing events; a post that is refused (400, 401, 403,
  413) stops the replay. A post retried after a lost reply may be queued twice (at-least-once, as any HTTP
  client): ids are the daemon's.
* ``--to mqtt://HOST:PORT/TOPIC``: each decoded event as JSON on ``TOPIC`` (QoS 1). Without a topic an ``hfp``
  recording is published as it was recorded: each message's own payload on its own topic, the way HSL's broker
  sent it, so an ``mqtt`` source with ``format: hfp`` reads what it would have read live.
* ``--to -`` (the default): the decoded events as NDJSON on stdout, paced (``| edgewise run pipeline.yaml``).
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from edgewise.clock import SystemClock
from edgewise.config import BuildContext
from edgewise.config.models import RetryPolicy
from edgewise.errors import ConfigError, PluginError, SinkError
from edgewise.events import Batch
from edgewise.sinks.base import Sink, SinkContext, SinkRunner
from edgewise.sources.base import SourceContext
from edgewise.sources.formats import split_hfp_line
from edgewise.sources.recording import Run
from edgewise.sources.replay import ReplaySource, ReplaySourceConfig

PUSHBACK_RETRY = RetryPolicy.model_construct(attempts=20, backoff=100_000, max_backoff=2_000_000)  # 100 ms, 2 s
"""A target that pushes back or is not up yet (a daemon starting) is waited for, about 30 s, before giving up."""


@dataclass
class ReplayReport:
    sent: int = 0
    malformed: int = 0
    duplicates: int = 0
    seconds: float = 0.0


class Target:
    """Where replayed records go."""

    def send(self, run: Run, batch: Batch) -> None:
        raise NotImplementedError

    def close(self) -> None:  # optional hook
        pass


class SinkTarget(Target):
    """A sink (stdout, http, mqtt with a topic), retried by the sink runner."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.runner = SinkRunner(sink, time.sleep)
        sink.open(SinkContext(SystemClock(), sys.stdout.buffer))

    def send(self, run: Run, batch: Batch) -> None:
        self.runner.write(batch)
        self.sink.flush()

    def close(self) -> None:
        self.sink.close()


class RecordedMqtt(Target):
    """HFP messages published as recorded: the recorded payload on the recorded topic."""

    def __init__(self, host: str, port: int, timeout_s: float = 10.0) -> None:
        try:
            mqtt: Any = importlib.import_module("paho.mqtt.client")
        except ImportError:
            raise PluginError("replaying to MQTT needs paho-mqtt: pip install 'edgewise[mqtt]'") from None
        self.where = f"mqtt://{host}:{port}"
        self.timeout_s = timeout_s
        self.connected = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="", protocol=mqtt.MQTTv311)
        self.client.on_connect = lambda *a: self.connected.set()
        self.client.on_disconnect = lambda *a: self.connected.clear()
        self.client.connect_async(host, port)
        self.client.loop_start()

    def send(self, run: Run, batch: Batch) -> None:
        if not self.connected.wait(self.timeout_s):
            raise SinkError(f"{self.where}: not connected after {self.timeout_s:g} s")
        infos = []
        for raw in run.raws:
            _, topic, body = split_hfp_line(raw.rstrip(b"\r\n"))
            infos.append(self.client.publish(topic, body, qos=1))
        for info in infos:
            info.wait_for_publish(self.timeout_s)
            if not info.is_published():
                raise SinkError(f"{self.where}: the broker did not acknowledge a message in {self.timeout_s:g} s")

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def target_for(to: str, config: ReplaySourceConfig, token: str | None) -> Target:
    build = BuildContext(".")
    if to == "-":
        from edgewise.sinks.stdout import StdoutConfig, StdoutSink

        return SinkTarget(StdoutSink(StdoutConfig(id="stdout"), build))
    url = urlsplit(to)
    if url.scheme in ("http", "https"):
        from edgewise.sinks.http import HttpSink, HttpSinkConfig

        path = url.path if url.path not in ("", "/") else "/v1/events"
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return SinkTarget(HttpSink(HttpSinkConfig(
            id="to", url=urlunsplit((url.scheme, url.netloc, path, url.query, "")), format="ndjson",
            headers=headers, retry=PUSHBACK_RETRY), build))
    if url.scheme == "mqtt":
        topic = url.path.lstrip("/")
        if topic:
            from edgewise.sinks.mqtt import MqttSink, MqttSinkConfig

            return SinkTarget(MqttSink(MqttSinkConfig(id="to", url=f"mqtt://{url.netloc}", topic=topic,
                                                      retry=PUSHBACK_RETRY), build))
        if config.format != "hfp":
            raise ConfigError(f"--to {to}: name the topic to publish on (mqtt://host:port/topic); only an hfp "
                              "recording carries topics of its own")
        return RecordedMqtt(url.hostname or "127.0.0.1", url.port or 1883)
    raise ConfigError(f"--to {to}: expected http://HOST:PORT[/path], mqtt://HOST:PORT[/topic] or - (stdout)")


def replay(config: ReplaySourceConfig, to: str, *, token: str | None = None) -> ReplayReport:
    """Replay the recording ``config`` names into ``to``. Malformed lines are reported on stderr and skipped."""
    report = ReplayReport()

    def malformed(problem: str) -> None:
        report.malformed += 1
        print(f"edgewise: malformed: {problem}", file=sys.stderr)

    source = ReplaySource(config, BuildContext("."))
    ctx = SourceContext(SystemClock(), malformed, batch_size=500)
    target = target_for(to, config, token)
    started = time.monotonic()
    try:
        for _, run in source.groups(ctx):
            now = ctx.clock.now_us()
            batch = Batch(run.payloads, source=source.id, ingest_time_us=now, event_times=[now] * len(run),
                          offsets=run.lines)
            target.send(run, batch)
            report.sent += len(run)
    finally:
        target.close()
        report.seconds = time.monotonic() - started
    report.duplicates = source.duplicates
    return report
