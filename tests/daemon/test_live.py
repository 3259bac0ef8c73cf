"""Live results: the ``live`` sink, the daemon's channels (Server-Sent Events), and publishing from another engine."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from edgewise.daemon.live import LiveHub
from edgewise.daemon.live_api import live_routes
from edgewise.sinks.base import RetryableSinkError, SinkContext
from tests.daemon.helpers import wait_for

PIPELINE = """
version: 1
sources: [{{id: in, type: http, anonymous: true, idle_timeout: {idle}}}]
event_time: "timestamp_seconds(t)"
pipelines:
  - id: positions
    steps:
      - filter: {{id: located, where: "lat IS NOT NULL"}}
    to: [map-positions]
  - id: cells
    steps:
      - annotate: {{id: locate, set: {{cell: "geo_cell(lat, long, 14)"}}}}
      - window: {{id: per-cell, key: [cell], tumbling: 10s, aggs: {{vehicles: "count_distinct(vehicle)"}}}}
    to: [map-cells]
sinks:
  - {{id: map-positions, type: live, channel: positions}}
  - {{id: map-cells, type: live, channel: cells}}
"""


def position(vehicle: str, t: float, lat: float = 60.17, long: float = 24.94) -> dict[str, Any]:
    return {"vehicle": vehicle, "t": t, "lat": lat, "long": long}


def tile(lat: float, lon: float, zoom: int) -> str:
    """The slippy-map tile of a point (the OpenStreetMap formula), computed here independently of geo_cell."""
    n = 2 ** zoom
    x = int((lon + 180) / 360 * n)
    y = int((1 - math.asinh(math.tan(math.radians(lat))) / math.pi) / 2 * n)
    return f"{zoom}/{x}/{y}"


def read_stream(url: str, records: list[dict[str, Any]], events: list[str], stop: threading.Event) -> None:
    """Collect a channel's SSE records (and event names) until ``stop``."""
    with httpx.Client(timeout=httpx.Timeout(5, read=None)) as client, client.stream("GET", url) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        name = "message"
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                events.append(name)
                if name in ("message", "snapshot"):
                    records.extend(json.loads(line[6:]))
                name = "message"
            if stop.is_set():
                return


# -- the hub ----------------------------------------------------------------------------------------------------

def test_a_subscriber_gets_the_recent_records_then_each_batch() -> None:
    async def scenario() -> list[bytes]:
        hub = LiveHub(recent=2)
        hub.publish("c", [b'{"n":1}', b'{"n":2}', b'{"n":3}'])  # only the last 2 are kept for newcomers
        stream = hub.stream("c")
        first = await anext(stream)
        hub.publish("c", [b'{"n":4}'])
        hub.publish("other", [b'{"n":5}'])
        second = await anext(stream)
        hub.close()
        rest = [chunk async for chunk in stream]
        return [first, second, *rest]

    chunks = asyncio.run(scenario())
    assert chunks[0] == b'retry: 2000\nevent: snapshot\ndata: [{"n":2},{"n":3}]\n\n'
    assert chunks[1] == b'data: [{"n":4}]\n\n'
    assert chunks[2:] == []  # closing the hub ends the stream (the daemon's shutdown does not wait for browsers)


def test_a_slow_subscriber_loses_its_oldest_messages_and_is_told() -> None:
    async def scenario() -> tuple[list[bytes], dict[str, Any]]:
        hub = LiveHub(backlog=3)
        stream = hub.stream("c")
        await anext(stream)  # subscribed
        for n in range(10):
            hub.publish("c", [b'{"n":%d}' % n])
        stats = hub.stats()["c"]
        got = [await anext(stream), await anext(stream), await anext(stream), await anext(stream)]
        await stream.aclose()
        return got, stats

    got, stats = asyncio.run(scenario())
    assert stats == {"published": 10, "subscribers": 1, "dropped": 7}
    assert got == [b'event: dropped\ndata: {"dropped": 7}\n\n', b'data: [{"n":7}]\n\n', b'data: [{"n":8}]\n\n',
                   b'data: [{"n":9}]\n\n']


def test_publishing_is_only_for_the_daemons_own_machine_and_checked() -> None:
    class Daemonish:
        live = LiveHub()

    app = Starlette(routes=live_routes(Daemonish()))  # type: ignore[arg-type]

    async def scenario() -> None:
        remote = httpx.AsyncClient(transport=httpx.ASGITransport(app, client=("192.0.2.7", 50000)),
                                   base_url="http://daemon")
        local = httpx.AsyncClient(transport=httpx.ASGITransport(app, client=("127.0.0.1", 50000)),
                                  base_url="http://daemon")
        async with remote, local:
            assert (await remote.post("/v1/live/cells", json=[{"id": "x"}])).status_code == 403
            assert (await local.post("/v1/live/cells", json=[{"id": "x"}])).json() == {"published": 1}
            assert (await local.post("/v1/live/cells", content=b"[{")).status_code == 400
            assert (await local.post("/v1/live/cells", json={"id": "x"})).status_code == 400  # not an array
            assert (await local.post("/v1/live/cells", json=[1, 2])).status_code == 400  # not records
            assert (await local.post("/v1/live/no%20spaces", json=[])).status_code == 400
            assert (await local.get("/v1/live/cells/recent")).json() == [{"id": "x"}]  # nothing refused got in

    asyncio.run(scenario())
    assert Daemonish.live.stats()["cells"]["published"] == 1


# -- in the daemon ------------------------------------------------------------------------------------------------

def test_the_daemon_streams_its_live_sinks_results(start_daemon, tmp_path: Path) -> None:
    d = start_daemon(PIPELINE.format(idle="1s"))
    received: list[dict[str, Any]] = []
    events: list[str] = []
    stop = threading.Event()
    reader = threading.Thread(target=read_stream, args=(f"{d.url}/v1/live/cells/events", received, events, stop),
                              daemon=True)
    reader.start()
    wait_for(lambda: "snapshot" in events, what="the stream to open (its snapshot comes first)")
    body = [position("a", 1000.0), position("b", 1001.0), position("a", 1003.0, lat=61.0), {"vehicle": "c", "t": 1004}]
    assert d.post("/v1/events", json.dumps(body)).status_code == 202
    d.wait_processed(4)
    # the windows close on idleness (1 s, then 6 s of credit)
    wait_for(lambda: len(received) >= 3, what="the three windows")
    queue = lambda: d.client.get("/v1/queue").json()  # noqa: E731
    # a window emitted twice would come from a later tick: let the daemon move event time on by another second
    # (its own progress, not a sleep), then wait until the stream holds all that was published
    advanced = queue()["idle_advanced_s"]
    wait_for(lambda: queue()["idle_advanced_s"] >= advanced + 1, what="event time to move on")
    published = queue()["live"]["cells"]["published"]
    wait_for(lambda: len(received) >= published, what="the stream to catch up")
    assert published == 3
    stop.set()  # the reader ends with the daemon's shutdown (the hub ends every stream)
    got = list(received)
    cells = sorted(((r["payload"]["cell"], r["payload"]["vehicles"]) for r in got), key=str)
    assert cells == sorted([(tile(60.17, 24.94, 14), 2), (tile(61.0, 24.94, 14), 1), (None, 1)], key=str)
    assert all(r["id"].startswith("per-cell:") and r["event_time"] == 1_009_999_999 for r in got)
    assert "snapshot" in events
    positions = httpx.get(f"{d.url}/v1/live/positions/recent").json()
    assert [(p["payload"]["vehicle"], p["event_time"]) for p in positions[:3]] == [
        ("a", 1_000_000_000), ("b", 1_001_000_000), ("a", 1_003_000_000)]
    assert "c" not in {p["payload"]["vehicle"] for p in positions}  # filtered: no lat
    queue = httpx.get(f"{d.url}/v1/queue").json()
    assert queue["live"]["positions"]["published"] >= 3

    def located_counted() -> bool:  # the step counts come in the worker's report, every 0.5 s after its work
        steps = {(s["pipeline"], s["step"]): s for s in httpx.get(f"{d.url}/v1/queue").json()["steps"]}
        located = steps.get(("positions", "located"), {})
        return located.get("in", 0) >= 4 and located.get("out", 0) >= 3

    wait_for(located_counted, what="the worker's report of the step's counts")


def test_another_engine_publishes_to_the_daemon_with_url(start_daemon, tmp_path: Path) -> None:
    d = start_daemon(PIPELINE.format(idle="0"))
    pipeline = tmp_path / "hub.yaml"
    pipeline.write_text(f"""
version: 1
pipelines:
  - id: p
    steps: [{{annotate: {{id: a, set: {{double: "n * 2"}}}}}}]
    to: [to-map]
sinks: [{{id: to-map, type: live, channel: hub, url: "{d.url}"}}]
""")
    done = subprocess.run([sys.executable, "-m", "edgewise", "run", str(pipeline)], input=b'{"n": 1}\n{"n": 2}\n',
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    recent = httpx.get(f"{d.url}/v1/live/hub/recent").json()
    assert [r["payload"]["double"] for r in recent] == [2, 4]


def test_a_live_sink_outside_a_daemon_without_url_is_one_clear_error(tmp_path: Path) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("version: 1\npipelines: [{id: p, steps: [], to: [m]}]\nsinks: [{id: m, type: live}]\n")
    done = subprocess.run([sys.executable, "-m", "edgewise", "run", str(pipeline)], input=b'{"n": 1}\n',
                          capture_output=True, timeout=120)
    assert done.returncode != 0
    assert b"Traceback" not in done.stderr
    assert b"run this pipeline file with `edgewise serve`, or give the sink `url:`" in done.stderr


def test_the_docs_sinks_are_valid() -> None:
    """docs/live.md's example sinks load as written (a pipeline around them)."""
    import re

    from edgewise.config import load_text_plan
    from tests.conftest import ROOT

    block = re.search(r"```yaml\n(.*?)```", (ROOT / "docs" / "live.md").read_text(encoding="utf-8"), re.S)
    assert block is not None
    plan = load_text_plan("version: 1\npipelines: [{id: p, steps: [], to: [map-cells, hub-cells]}]\n" + block.group(1))
    assert {s.id: (s.type, getattr(s, "channel", None)) for s in plan.sinks.values()} == {
        "map-cells": ("live", "cells"), "hub-cells": ("live", "cells")}


def test_idle_advanced_counts_only_what_the_sinks_have(start_daemon, tmp_path: Path) -> None:
    """A script waits on `idle_advanced_s` for its last windows (the showcase does): once it says event time has
    moved past them, their results must be in the sinks, though the worker commits (and so flushes a table sink)
    only every few seconds: a file sink seals its segment there."""
    spool = tmp_path / "cells"
    pipeline = PIPELINE.format(idle="1s").replace("to: [map-cells]", "to: [map-cells, cells-spool]")
    pipeline += f"  - {{id: cells-spool, type: file, path: {spool}}}\n"
    d = start_daemon(pipeline, commit_interval=12.0)
    queue = lambda: d.client.get("/v1/queue").json()  # noqa: E731
    body = [position("a", 1000.0), position("b", 1001.0), position("a", 1003.0, lat=61.0), {"vehicle": "c", "t": 1004}]
    assert d.post("/v1/events", json.dumps(body)).status_code == 202
    # the window [1000, 1010) closes once idleness moves event time from 1004 past 1010
    wait_for(lambda: queue()["idle_advanced_s"] >= 6.5, what="event time to move past the window")
    assert queue()["live"].get("cells", {}).get("published", 0) == 3
    sealed = [line for f in spool.glob("*.ndjson") for line in f.read_text().splitlines()]
    assert len(sealed) == 3


def test_a_live_sink_with_url_file_finds_the_daemon_when_it_has_something_to_send(start_daemon,
                                                                                  tmp_path: Path) -> None:
    """A hub's live sink reads the edge daemon's address (``url_file``) when it sends, not when it opens: a hub
    that starts before the edge gets a retryable failure (its micro-batch is retried, no error at start), and a
    send that fails reads the file again, for a daemon that came back elsewhere."""
    import io

    from edgewise.clock import SystemClock
    from edgewise.config import BuildContext
    from edgewise.events import Batch, Event
    from edgewise.sinks.live import LiveSink, LiveSinkConfig

    d = start_daemon(PIPELINE.format(idle="0"))
    address = tmp_path / "link" / "edge.json"
    sink = LiveSink(LiveSinkConfig(id="to-map", type="live", channel="hub", url_file="link/edge.json"),
                    BuildContext(str(tmp_path)))
    sink.open(SinkContext(SystemClock(), io.BytesIO()))

    def batch(n: int) -> Batch:
        return Batch.of_events([Event({"n": n}, f"e{n}", n * 1_000_000, 0, "link")])

    with pytest.raises(RetryableSinkError, match="no daemon address"):
        sink.write(batch(1))
    address.parent.mkdir()
    with socket.socket() as closed:  # a port nothing listens on: the daemon that was there is gone
        closed.bind(("127.0.0.1", 0))
        address.write_text(json.dumps({"url": f"http://127.0.0.1:{closed.getsockname()[1]}"}))
    with pytest.raises(RetryableSinkError):
        sink.write(batch(2))
    address.write_text(json.dumps({"url": d.url}))  # the daemon, serving again
    sink.write(batch(3))
    sink.close()
    recent = httpx.get(f"{d.url}/v1/live/hub/recent").json()
    assert [r["payload"]["n"] for r in recent] == [3]
