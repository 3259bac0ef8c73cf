"""``mqtt``: events published to an MQTT broker (paho-mqtt; ``pip install 'edgewise[mqtt]'``).

QoS 1 by default: a write returns only when the broker acknowledged every message (PUBACK). ``topic`` may name
payload fields in braces, ``vehicles/{veh}/position``; an event without such a field fails the write (not
retried). MQTT has no message ids, so a batch sent again after a failure may arrive twice (at-least-once).
"""

from __future__ import annotations

import importlib
import re
import secrets
import threading
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

import orjson

from edgewise.config import BuildContext
from edgewise.config.models import SinkConfig
from edgewise.declare import Field
from edgewise.durations import Duration
from edgewise.errors import PluginError, SinkError
from edgewise.events import Batch
from edgewise.sinks.base import RetryableSinkError, Sink, SinkContext

FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class MqttSinkConfig(SinkConfig):
    type: Literal["mqtt"] = "mqtt"
    url: str = Field(default="mqtt://127.0.0.1:1883", description="mqtt://host:port")
    topic: str = Field(min_length=1, description="topic; {field} is replaced by the payload's field")
    qos: Literal[0, 1, 2] = 1
    retain: bool = False
    client_id: str | None = Field(default=None, description="default edgewise-sink-<sink id>-<8 random hex digits>: "
                                  "a broker closes a client's connection when another connects with its id")
    timeout: Duration = Field(default=10_000_000, description="how long to wait for the broker's acknowledgements")


class MqttSink(Sink):
    kind: ClassVar[str] = "mqtt"
    Config = MqttSinkConfig
    config: MqttSinkConfig

    def __init__(self, config: MqttSinkConfig, ctx: BuildContext) -> None:
        super().__init__(config, ctx)
        try:
            self.mqtt: Any = importlib.import_module("paho.mqtt.client")
        except ImportError:
            raise PluginError("the mqtt sink needs paho-mqtt: pip install 'edgewise[mqtt]'") from None
        self._client: Any = None
        self._connected = threading.Event()

    def open(self, ctx: SinkContext) -> None:
        c = self.config
        url = urlsplit(c.url)
        # a publisher keeps no session at the broker (clean session), so its id need not be stable; it must be
        # unique: a broker closes a client's connection when another connects with the same id, and two gateways
        # running one pipeline file (or two replays) would throw each other off and resend what was in flight
        client_id = c.client_id or f"edgewise-sink-{self.id}-{secrets.token_hex(4)}"
        client = self.mqtt.Client(self.mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                                  protocol=self.mqtt.MQTTv311)
        client.on_connect = lambda *a: self._connected.set()
        client.on_disconnect = lambda *a: self._connected.clear()
        client.connect_async(url.hostname or "127.0.0.1", url.port or 1883)
        client.loop_start()
        self._client = client

    def _topic(self, payload: dict[str, Any]) -> str:
        def field(m: re.Match[str]) -> str:
            value = payload.get(m.group(1))
            if value is None:
                raise SinkError(f"sink {self.id}: the topic needs field {m.group(1)!r}, which the event lacks")
            return str(value)

        return FIELD.sub(field, self.config.topic)

    def write(self, batch: Batch) -> None:
        c = self.config
        timeout = c.timeout / 1_000_000
        if not self._connected.wait(timeout):
            raise RetryableSinkError(f"mqtt {c.url}: not connected")
        infos = [self._client.publish(self._topic(p), orjson.dumps(p, default=str), qos=c.qos, retain=c.retain)
                 for p in batch.payloads]
        for info in infos:
            try:
                info.wait_for_publish(timeout)
            except (RuntimeError, ValueError) as exc:
                raise RetryableSinkError(f"mqtt {c.url}: {exc}") from None
            if not info.is_published():
                raise RetryableSinkError(f"mqtt {c.url}: the broker did not acknowledge within {timeout}s")

    def close(self) -> None:
        if self._client is not None:
            self._client.disconnect()
            self._client.loop_stop()
