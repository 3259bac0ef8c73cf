"""``mqtt``: messages from an MQTT broker into the edge daemon's queue (paho-mqtt; ``pip install 'edgewise[mqtt]'``).

QoS 1 by default, with a persistent session (``clean_start: false`` and a stable ``client_id``): messages
published while the daemon is down wait at the broker and arrive when it is back. Each message is acknowledged
(PUBACK) only after it is durably queued, so a crash between receiving and queueing makes the broker send it
again (at-least-once). While the queue is above its high-water mark the receiving thread waits, so TCP and the
broker's in-flight window push back on publishers. Reconnects on its own with backoff.

MQTT 5 by default, to let the broker send up to ``receive_maximum`` (65535) messages ahead of their
acknowledgements. Each message is acknowledged only once it is on disk; under MQTT 3.1.1 the broker's own window
applies (mosquitto's ``max_inflight_messages``: 20), so a publisher that outpaces 20 messages per disk sync fills
the broker's queue for the daemon, and a broker drops what goes past that queue's limit (mosquitto's
``max_queued_messages``: 1000) although it acknowledged it to the publisher. ``protocol: "3.1.1"`` for a broker
without MQTT 5.

``format: json`` takes each message body as one JSON object; ``format: hfp`` decodes Helsinki HFP v2 messages
(the topic's levels become fields under ``topic``). A message that cannot be decoded is dead-lettered with the
reason, and acknowledged.
"""

from __future__ import annotations

import importlib
import os
import threading
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from edgewise.config import BuildContext
from edgewise.config.models import SourceConfig
from edgewise.daemon.bodies import MESSAGE_FORMATS
from edgewise.daemon.queue import Append
from edgewise.declare import Field
from edgewise.errors import PluginError
from edgewise.sources.base import DaemonSource, Ingest


def _paho() -> Any:
    try:
        return importlib.import_module("paho.mqtt.client")
    except ImportError:
        raise PluginError("the mqtt source needs paho-mqtt: pip install 'edgewise[mqtt]'") from None


class MqttSourceConfig(SourceConfig):
    type: Literal["mqtt"] = "mqtt"
    url: str = Field(default="mqtt://127.0.0.1:1883", description="mqtt://host:port (user:password@ allowed)")
    topics: list[str] = Field(min_length=1, description="topic filters to subscribe to (+ and # wildcards)")
    qos: Literal[0, 1, 2] = Field(default=1, description="subscription QoS; 1 or 2 for at-least-once")
    client_id: str | None = Field(default=None, description="stable client id of the persistent session; default "
                                  "edgewise-<source id>")
    clean_start: bool = Field(default=False, description="start without the broker's stored session (loses messages "
                              "published while the daemon was down)")
    format: Literal["json", "hfp"] = Field(default="json", description="message body format")
    keepalive: int = Field(default=30, ge=5, le=3600, description="seconds between keep-alive pings")
    protocol: Literal["5", "3.1.1"] = Field(default="5", description="MQTT version; 3.1.1 for a broker without MQTT 5 "
                                            "(the broker's own in-flight limit then applies)")
    receive_maximum: int = Field(default=65535, ge=1, le=65535, description="MQTT 5: how many messages the broker may "
                                 "send ahead of their acknowledgements (each waits for its disk sync)")
    password_env: str | None = Field(default=None, description="environment variable holding the password")


class MqttSource(DaemonSource):
    kind: ClassVar[str] = "mqtt"
    Config = MqttSourceConfig
    config: MqttSourceConfig

    def __init__(self, config: MqttSourceConfig, ctx: BuildContext) -> None:
        super().__init__(config, ctx)
        self.mqtt = _paho()
        self.decode = MESSAGE_FORMATS[config.format]
        self.client: Any = None
        self.connected = threading.Event()
        self.received = 0
        self.malformed = 0

    def start(self, ingest: Ingest) -> None:
        c = self.config
        mqtt = self.mqtt
        url = urlsplit(c.url)
        v5 = c.protocol == "5"
        # MQTT 3.1.1 asks for a clean session when the client is made, MQTT 5 at each connect (a reconnect
        # resumes the session unless clean_start: true, as a 3.1.1 clean session started afresh every time)
        session: dict[str, Any] = {} if v5 else {"clean_session": c.clean_start}
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=c.client_id or f"edgewise-{self.id}",
                             protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311, manual_ack=True, **session)
        if url.username:
            password = os.environ.get(c.password_env) if c.password_env else url.password
            client.username_pw_set(url.username, password)
        client.reconnect_delay_set(min_delay=1, max_delay=30)
        topics = [(t, c.qos) for t in c.topics]

        def on_connect(client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
            if not reason.is_failure:
                client.subscribe(topics)
                self.connected.set()

        def on_disconnect(client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
            self.connected.clear()

        def on_message(client: Any, userdata: Any, msg: Any) -> None:
            self.received += 1
            ingest.wait_for_room()
            body = bytes(msg.payload)
            meta = {"topic": msg.topic, "format": c.format}
            try:
                self.decode(msg.topic, body)
            except Exception as exc:  # noqa: BLE001  # any decoding problem: dead-letter the message, go on
                self.malformed += 1
                append = Append(self.id, "dead", body, 1, meta={**meta, "error": f"undecodable message: {exc}"})
            else:
                append = Append(self.id, "message", body, 1, meta=meta)
            mid, qos = msg.mid, msg.qos
            future = ingest.submit(append)
            # acknowledge to the broker only once the message is on disk; on failure it is redelivered
            future.add_done_callback(lambda f: client.ack(mid, qos) if f.exception() is None else None)

        client.on_connect = on_connect
        client.on_disconnect = on_disconnect
        client.on_message = on_message
        connect = {"clean_start": c.clean_start, "properties": self._connect_properties()} if v5 else {}
        client.connect_async(url.hostname or "127.0.0.1", url.port or 1883, keepalive=c.keepalive, **connect)
        client.loop_start()
        self.client = client

    def _connect_properties(self) -> Any:
        """MQTT 5's CONNECT: the window of unacknowledged messages, and a session that outlives the connection
        unless ``clean_start`` (MQTT 3.1.1's persistent session: the broker keeps it until the client returns)."""
        c = self.config
        properties = importlib.import_module("paho.mqtt.properties")
        packettypes = importlib.import_module("paho.mqtt.packettypes")
        connect = properties.Properties(packettypes.PacketTypes.CONNECT)
        connect.ReceiveMaximum = c.receive_maximum
        if not c.clean_start:
            connect.SessionExpiryInterval = 0xFFFFFFFF  # never expires, as a 3.1.1 persistent session
        return connect

    def stop(self) -> None:
        if self.client is not None:
            self.client.disconnect()
            self.client.loop_stop()
            self.client = None

    def status(self) -> dict[str, object]:
        return {"connected": self.connected.is_set(), "received": self.received, "malformed": self.malformed}
