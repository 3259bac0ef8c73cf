"""``edgewise serve`` of a file that splits a pipeline runs the edge's part (issue 38): the steps before the split,
then the link, and no more; it says its address in the link's folder (where the hub's live sinks find it); once
its sources are quiet it writes heartbeats into the link."""

from __future__ import annotations

import json
from pathlib import Path

from tests.daemon.helpers import wait_for
from tests.daemon.test_api import read_spool

PIPELINE = """
version: 1
sources: [{{id: http, type: http, anonymous: true, idle_timeout: 1s}}]
event_time: "timestamp_seconds(t)"
link: {{type: spool, path: {link}}}
pipelines:
  - id: cells
    hub_from: per-cell
    steps:
      - filter: {{id: moving, where: "spd > 0"}}
      - window: {{id: per-cell, key: [cell], tumbling: 10s, aggs: {{n: count()}}}}
    to: [hub-db]
  - id: local
    steps: []
    to: [edge-out]
sinks:
  - {{id: hub-db, type: sqlite, path: {out}/hub.db, table: cells}}
  - {{id: edge-out, type: file, path: {out}/edge, max_age: 100ms}}
  - {{id: map, type: live}}
"""


def test_the_edge_runs_its_part_into_the_link_and_beats_while_quiet(start_daemon, tmp_path: Path) -> None:
    link, out = tmp_path / "link", tmp_path / "out"
    d = start_daemon(PIPELINE.format(link=link, out=out))
    body = "\n".join(json.dumps({"t": 1000 + i, "spd": i % 3, "cell": f"c{i % 2}", "junk": "x" * 50})
                     for i in range(12))
    posted = d.post("/v1/events", body, "application/x-ndjson")
    assert posted.status_code == 202, posted.text
    ids = posted.json()["ids"]
    d.wait_processed(12)
    assert json.loads((link / "edge.json").read_text()) == {"url": d.url}

    def link_lines() -> list[dict]:
        return read_spool(link / "cells")

    wait_for(lambda: len([r for r in link_lines() if r["source"] != "~heartbeat"]) == 8, what="the link's events")
    events = [r for r in link_lines() if r["source"] != "~heartbeat"]
    moving = [i for i in range(12) if i % 3]
    assert [r["id"] for r in events] == [ids[i] for i in moving]
    assert [r["event_time"] for r in events] == [(1000 + i) * 1_000_000 for i in moving]
    assert {r["source"] for r in events} == {"http"}
    assert [r["payload"] for r in events] == [{"cell": f"c{i % 2}"} for i in moving]  # what the hub reads
    wait_for(lambda: len(read_spool(out / "edge")) == 12, what="the unsplit pipeline's output")
    assert not (out / "hub.db").exists()  # the hub's sink: the edge never opens it
    # quiet for 1 s: event time moves on, and the link says so (the newest time forwarded plus the quiet)
    wait_for(lambda: any(r["source"] == "~heartbeat" for r in link_lines()), timeout=30, what="a heartbeat")
    beat = next(r for r in link_lines() if r["source"] == "~heartbeat")
    assert beat["id"].startswith("~heartbeat:") and beat["payload"]["advanced_us"] >= 1_000_000
    assert beat["event_time"] == 1011 * 1_000_000 + beat["payload"]["advanced_us"]
