"""Placement (issue 38): one pipeline file split between an edge and a hub (``src/edgewise/placement.py``).

``edgewise run`` of the whole file is the reference; ``--part edge`` then ``--part hub`` must give what it gives.
Generated pipelines and split points are checked the same way by the split oracle (``tests/fuzz``); here the
commands, the link's contents, the errors and the heartbeats."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from edgewise.cli import main
from edgewise.clock import FakeClock
from edgewise.config import load, load_text_plan
from edgewise.engine.local import STDOUT, LocalEngine
from edgewise.errors import ConfigError
from edgewise.events import Batch
from edgewise.placement import edge_plan, hub_to_run, splits
from edgewise.testing import ListSink

SPLIT = """\
version: 1
sources:
  - {id: in, type: file, path: events.ndjson}
event_time: "timestamp_seconds(t)"
link: {type: spool, path: link}
pipelines:
  - id: cells
    hub_from: per-cell
    steps:
      - filter: {id: moving, where: "spd > 0"}
      - annotate: {id: locate, set: {cell: "concat('c', CAST(floor(x) AS STRING))"}}
      - window: {id: per-cell, key: [cell], tumbling: 10s, aggs: {n: count(), avg_spd: avg(spd)}}
    to: [cells-out]
  - id: raw
    steps:
      - filter: {id: big, where: "spd > 5"}
    to: [raw-out]
sinks:
  - {id: cells-out, type: file, path: out/cells, mode: replace}
  - {id: raw-out, type: file, path: out/raw, mode: replace}
"""

EVENTS = [{"t": 1000 + i, "spd": i % 7, "x": i % 3 + 0.5, "junk": "z" * 20, "n": i} for i in range(40)]


def written(tmp_path: Path, text: str = SPLIT) -> Path:
    (tmp_path / "events.ndjson").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in EVENTS))
    (tmp_path / "p.yaml").write_text(text)
    return tmp_path / "p.yaml"


def records(directory: Path) -> list[Any]:
    return sorted((json.loads(line) for f in sorted(directory.glob("*.ndjson")) for line in f.read_text().splitlines()),
                  key=lambda r: json.dumps(r, sort_keys=True))


def cells_by_hand() -> list[dict[str, Any]]:
    """The cells pipeline computed plainly from EVENTS (the oracle of the whole run)."""
    groups: dict[tuple[str, int], list[int]] = {}
    for e in EVENTS:
        if e["spd"] > 0:
            start = e["t"] // 10 * 10
            groups.setdefault((f"c{int(e['x'] // 1)}", start), []).append(e["spd"])
    from datetime import UTC, datetime

    def iso(s: int) -> str:
        return datetime.fromtimestamp(s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    out = [{"cell": cell, "window_start": iso(start), "window_end": iso(start + 10), "n": len(v),
            "avg_spd": sum(v) / len(v)} for (cell, start), v in groups.items()]
    return sorted(out, key=lambda r: json.dumps(r, sort_keys=True))


def test_the_whole_file_gives_the_cells_computed_by_hand(tmp_path: Path) -> None:
    pipeline = written(tmp_path)
    assert main(["run", str(pipeline), "--quiet"]) == 0
    assert records(tmp_path / "out" / "cells") == cells_by_hand()
    assert records(tmp_path / "out" / "raw") == sorted((e for e in EVENTS if e["spd"] > 5),
                                                        key=lambda r: json.dumps(r, sort_keys=True))


def test_the_edge_then_the_hub_give_what_the_whole_file_gives(tmp_path: Path) -> None:
    pipeline = written(tmp_path)
    assert main(["run", str(pipeline), "--quiet"]) == 0
    whole_cells, whole_raw = records(tmp_path / "out" / "cells"), records(tmp_path / "out" / "raw")
    for folder in ("cells", "raw"):
        for f in (tmp_path / "out" / folder).glob("*"):
            f.unlink()
    assert main(["run", str(pipeline), "--part", "edge", "--quiet"]) == 0
    assert records(tmp_path / "out" / "raw") == whole_raw  # an unsplit pipeline runs whole at the edge
    assert not list((tmp_path / "out" / "cells").glob("*.ndjson"))  # the hub's sink: not written by the edge
    assert main(["run", str(pipeline), "--part", "hub", "--quiet"]) == 0
    assert records(tmp_path / "out" / "cells") == whole_cells == cells_by_hand()


def test_the_link_carries_envelopes_with_only_the_fields_the_hub_reads(tmp_path: Path) -> None:
    pipeline = written(tmp_path)
    assert main(["run", str(pipeline), "--part", "edge", "--quiet"]) == 0
    lines = [json.loads(line) for f in sorted((tmp_path / "link" / "cells").glob("*.ndjson"))
             for line in f.read_text().splitlines()]
    moving = [(i, e) for i, e in enumerate(EVENTS, start=1) if e["spd"] > 0]
    assert len(lines) == len(moving)
    for line, (number, event) in zip(lines, moving, strict=True):
        assert list(line) == ["id", "event_time", "source", "payload"]
        assert line["id"] == f"in:events.ndjson:{number}"
        assert line["event_time"] == event["t"] * 1_000_000
        assert line["source"] == "in"
        assert line["payload"] == {"spd": event["spd"], "cell": f"c{int(event['x'] // 1)}"}


def test_a_hub_that_writes_the_whole_event_gets_every_field(tmp_path: Path) -> None:
    """After the split an annotate passes each event on to the sink, which writes all of it: nothing is cut."""
    text = SPLIT.replace("    hub_from: per-cell\n", "    hub_from: tag\n").replace(
        "      - window: {id: per-cell, key: [cell], tumbling: 10s, aggs: {n: count(), avg_spd: avg(spd)}}\n",
        "      - annotate: {id: tag, set: {fast: \"spd > 3\"}}\n")
    plan = load(str(written(tmp_path, text)))
    [split] = splits(plan)
    assert split.fields is None and split.at == 2
    assert main(["run", str(tmp_path / "p.yaml"), "--quiet"]) == 0
    whole = records(tmp_path / "out" / "cells")
    assert main(["run", str(tmp_path / "p.yaml"), "--part", "edge", "--quiet"]) == 0
    assert main(["run", str(tmp_path / "p.yaml"), "--part", "hub", "--quiet"]) == 0
    assert records(tmp_path / "out" / "cells") == whole and "junk" in whole[0]


def test_placement_auto_puts_the_first_stateful_step_and_the_rest_at_the_hub(tmp_path: Path) -> None:
    plan = load(str(written(tmp_path, SPLIT.replace("hub_from: per-cell", "placement: auto"))))
    [split] = splits(plan)
    assert (split.pipeline.id, split.at, split.fields) == ("cells", 2, frozenset({"cell", "spd"}))
    hub = hub_to_run(plan, spark=False)
    assert [s.id for s in hub.pipelines[0].steps] == ["per-cell"] and hub.pipelines[0].step_path(0) == (
        "pipelines", 0, "steps", 2)
    assert set(hub.sinks) == {"cells-out"}
    assert set(edge_plan(plan).sinks) == {"raw-out", "link.cells"}


def test_explain_shows_what_runs_where_and_through_which_link(tmp_path: Path, capsys: Any) -> None:
    assert main(["explain", str(written(tmp_path))]) == 0
    out = capsys.readouterr().out
    link = tmp_path / "link" / "cells"
    assert "  pipeline cells (hub_from: per-cell):\n    edge  1. filter moving\n    edge  2. annotate locate\n" \
           f"    link  -> spool {link} (envelopes: id, event time, source; fields cell, spd)\n" \
           "    hub   3. window per-cell\n    hub   -> cells-out\n  pipeline raw: all at the edge" in out


@pytest.mark.parametrize(("change", "where", "says"), [
    (("hub_from: per-cell", "hub_from: per-sell"), "p.yaml:8:15: pipelines[0].hub_from",
     "hub_from 'per-sell' is not a step of pipeline cells; its steps: moving, locate, per-cell"),
    (("hub_from: per-cell", "hub_from: per-cell\n    placement: auto"), "pipelines[0]",
     "give either `hub_from` (a step id) or `placement: auto`, not both"),
    (("{id: raw-out,", "{id: link.cells,"), "pipelines[0].id", "a sink is named 'link.cells'"),
    (("link: {type: spool, path: link}", "link: {type: nats, url: 'nats://127.0.0.1:4222'}"), "link",
     "stream"),
])
def test_a_wrong_placement_is_refused_at_its_line(tmp_path: Path, change: tuple[str, str], where: str,
                                                  says: str) -> None:
    text = SPLIT.replace(*change)
    if "link.cells" in change[1]:
        text = text.replace("to: [raw-out]", "to: [link.cells]")
    with pytest.raises(ConfigError) as caught:
        load(str(written(tmp_path, text)))
    message = caught.value.render()
    assert where in message and says in message, message


def test_the_local_engine_does_not_run_a_hub_over_nats(tmp_path: Path, capsys: Any) -> None:
    pipeline = written(tmp_path, SPLIT.replace("link: {type: spool, path: link}",
                                               "link: {type: nats, stream: s, subject: edge}"))
    assert main(["run", str(pipeline), "--part", "hub"]) == 2
    assert "p.yaml:5:14: link.type: the hub's part over a NATS link runs on Spark" in capsys.readouterr().err


def test_a_step_spark_does_not_run_is_refused_at_the_hub_but_runs_at_the_edge(tmp_path: Path, capsys: Any) -> None:
    entwine = ("      - entwine: {id: chain, timeline: tl, key: k.key}\n"
               "      - window: {id: per-cell")
    text = SPLIT.replace("      - window: {id: per-cell", entwine)
    pipeline = written(tmp_path, text.replace("hub_from: per-cell", "hub_from: chain"))
    assert main(["validate", str(pipeline)]) == 2
    err = capsys.readouterr().err
    assert "p.yaml:12:" in err and "step chain is placed at the hub (hub_from: chain), and entwine does not run " \
           "on Spark" in err
    assert main(["validate", str(written(tmp_path, text))]) == 0  # split after it: entwine runs at the edge


# ---------------------------------------------------------------- heartbeats

IDLE = """\
version: 1
sources: [{id: in, type: http, idle_timeout: 2s}]
event_time: "timestamp_seconds(t)"
link: {type: spool, path: link}
pipelines:
  - id: w
    placement: auto
    steps:
      - filter: {id: keyed, where: "k IS NOT NULL"}
      - window: {id: per2s, key: [k], tumbling: 2s, aggs: {n: count()}}
"""


def test_a_quiet_edges_heartbeats_close_the_hubs_windows_as_the_edges_idle_time_closes_its_own(
        tmp_path: Path) -> None:
    """The oracle: the whole pipeline on one engine, idle for the same time. The edge's part writes the link (and
    a heartbeat while quiet); the hub's part reads it without an end of input, so only the heartbeat can close the
    windows, and it must close exactly the ones the whole pipeline's idle time closed."""
    plan = load_text_plan(IDLE, file=str(tmp_path / "p.yaml"), base_dir=str(tmp_path))
    events = [{"k": "x", "t": 1000.0}, {"k": "y", "t": 1001.5}, {"k": "x", "t": 1003.0}, {"k": "z", "t": 1004.0}]

    def drive(p: Any) -> list[Any]:
        clock = FakeClock(5_000_000_000)
        out = ListSink(STDOUT)
        e = LocalEngine(p, clock=clock, stdout=io.BytesIO(), sinks={STDOUT: out}, idle_timeouts={"in": 2_000_000})
        e.open()
        e.process(Batch(events, source="in", ingest_time_us=clock.now_us(), event_times=[0] * 4,
                        ids=[f"in:{i}" for i in range(4)]))
        e.tick()
        for _ in range(6):  # 3 s of quiet: 2 s to be idle, then 1 s more: event time moves from 1004 to 1007
            clock.advance(0.5)
            e.tick()
        e.commit(force=True)
        e.flush_sinks()
        return out.records

    whole = drive(plan)
    # every window: the last, z's [1004, 1006), closed by the last second of quiet
    assert sorted((r["k"], r["n"], r["window_start"].timestamp()) for r in whole) == [
        ("x", 1, 1000), ("x", 1, 1002), ("y", 1, 1000), ("z", 1, 1004)]
    edge = drive(edge_plan(plan))
    assert edge == []
    link = [json.loads(line) for f in sorted((tmp_path / "link" / "w").glob("*.ndjson"))
            for line in f.read_text().splitlines()]
    beats = [r for r in link if r["source"] == "~heartbeat"]
    # one when the quiet began (2 s), one a second later (BEAT_EVERY_US); the tick between moved time on by 0.5 s
    # with no heartbeat of its own: the next one carries it
    assert [(b["event_time"], b["payload"]["advanced_us"]) for b in beats] == [(1_006_000_000, 2_000_000),
                                                                                 (1_007_000_000, 1_000_000)]

    hub = hub_to_run(plan, spark=False)
    out = ListSink(STDOUT)
    engine = LocalEngine(hub, clock=FakeClock(6_000_000_000), stdout=io.BytesIO(), sinks={STDOUT: out})
    engine.open()
    [source] = [hub.source(s) for s in hub.sources]
    engine._read(source, engine.source_context())  # read, no finish(): no end of input flushes the windows
    assert sorted(out.records, key=str) == sorted(whole, key=str)


def test_no_heartbeat_before_the_edge_forwarded_an_event(tmp_path: Path) -> None:
    """An edge that has forwarded nothing since it started knows no event time to say moved on."""
    plan = load_text_plan(IDLE, file=str(tmp_path / "p.yaml"), base_dir=str(tmp_path))
    clock = FakeClock(5_000_000_000)
    e = LocalEngine(edge_plan(plan), clock=clock, stdout=io.BytesIO(), idle_timeouts={"in": 1_000_000})
    e.open()
    for _ in range(10):
        clock.advance(1)
        e.tick()
    e.close()
    assert not list((tmp_path / "link").glob("**/*.ndjson"))


def test_the_docs_example_loads_and_explains_as_the_docs_say(tmp_path: Path, capsys: Any) -> None:
    """docs/placement.md's file and its `edgewise explain` block (the link's folder aside, which is the reader's)."""
    import re

    from tests.conftest import ROOT

    doc = (ROOT / "docs" / "placement.md").read_text(encoding="utf-8")
    example = re.search(r"```yaml\n(.*?)```", doc, re.S)
    shown = re.search(r"```\n(placement \(.*?)```", doc, re.S)
    assert example and shown
    (tmp_path / "examples" / "x").mkdir(parents=True)
    pipeline = tmp_path / "examples" / "x" / "p.yaml"
    pipeline.write_text(example.group(1))
    assert main(["explain", str(pipeline)]) == 0
    out = capsys.readouterr().out
    got = out[out.index("placement ("):].replace(str(tmp_path), "/srv/edgewise")
    assert got.strip() == shown.group(1).strip()


def test_a_part_is_not_split_again(tmp_path: Path) -> None:
    plan = load(str(written(tmp_path)))
    assert [s.pipeline.id for s in splits(plan)] == ["cells"]
    assert splits(edge_plan(plan)) == [] and splits(hub_to_run(plan, spark=False)) == []
    assert edge_plan(edge_plan(plan)).pipelines == edge_plan(plan).pipelines


TWO_SPLIT = SPLIT.replace("""  - id: raw
    steps:
      - filter: {id: big, where: "spd > 5"}
""", """  - id: raw
    placement: auto
    steps:
      - filter: {id: big, where: "spd > 5"}
      - window: {id: per-ten, tumbling: 10s, aggs: {n: count(), top: max(n)}}
""")


def test_each_hub_pipeline_reads_its_own_link(tmp_path: Path) -> None:
    """Two split pipelines, two links: on the hub each pipeline takes only its own link's events (were both links
    fed to both, each window would count the other's events too)."""
    pipeline = written(tmp_path, TWO_SPLIT)
    assert [s.pipeline.id for s in splits(load(str(pipeline)))] == ["cells", "raw"]
    assert main(["run", str(pipeline), "--quiet"]) == 0
    whole_cells, whole_raw = records(tmp_path / "out" / "cells"), records(tmp_path / "out" / "raw")
    assert whole_cells == cells_by_hand()
    assert sum(r["n"] for r in whole_raw) == len([e for e in EVENTS if e["spd"] > 5])
    assert main(["run", str(pipeline), "--part", "edge", "--quiet"]) == 0
    assert main(["run", str(pipeline), "--part", "hub", "--quiet"]) == 0
    assert records(tmp_path / "out" / "cells") == whole_cells
    assert records(tmp_path / "out" / "raw") == whole_raw
