"""The hub's part of a split file on Spark (issue 38, docs/placement.md): it reads the link the edge wrote and gives
what the whole file gives on the local engine; a heartbeat in the link moves Spark's watermark as the edge's idle
time moved the edge's. (Continuous, with a daemon and SIGTERM: tests/spark/test_showcase_hub.py; generated
pipelines and split points: the split oracle in tests/spark/test_pipeline_fuzz.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import io
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from edgewise.cli import main
from edgewise.config import load, load_text_plan
from edgewise.engine.local import STDOUT, LocalEngine
from edgewise.engine.spark.job import SparkJob, SparkOptions
from edgewise.placement import hub_to_run
from edgewise.testing import FakeClock, ListSink
from tests.conftest import need, port_open
from tests.fuzz.oracles import canonical
from tests.test_placement import IDLE, SPLIT, cells_by_hand, records, written


def _spark_hub(spark: Any, plan: Any, checkpoint: Path, *, flush: bool = True) -> list[Any]:
    got: list[Any] = []

    def collect(route: str, batch_id: int, rows: list[tuple[str, str]]) -> None:
        got.extend(orjson.loads(r) for _, r in rows)

    SparkJob(spark, hub_to_run(plan), SparkOptions(checkpoint=str(checkpoint), once=True, flush=flush),
             collect=collect, report=lambda text: None).run()
    return got


def _local_hub(plan: Any) -> list[Any]:
    """The hub's part on the local engine, its link read with no end of input (nothing flushes open windows)."""
    hub = hub_to_run(plan, spark=False)
    out = ListSink(STDOUT)
    engine = LocalEngine(hub, clock=FakeClock(0), stdout=io.BytesIO(), sinks={STDOUT: out})
    engine.open()
    for config in hub.sources:
        engine._read(hub.source(config), engine.source_context())
    return out.records


def test_a_spark_hub_gives_what_the_whole_file_gives(spark: Any, tmp_path: Path) -> None:
    pipeline = written(tmp_path, SPLIT.replace("    to: [cells-out]\n", ""))  # the hub's results: collected
    assert main(["run", str(pipeline), "--part", "edge", "--quiet"]) == 0
    got = _spark_hub(spark, load(str(pipeline)), tmp_path / "ck")
    assert sorted(canonical(r) for r in got) == sorted(canonical(r) for r in cells_by_hand())
    assert records(tmp_path / "out" / "raw")  # the edge's own pipeline ran at the edge


HUB = IDLE.replace("placement: auto", "hub_from: HUB_FROM")
"""The heartbeat test's file of tests/test_placement.py, split at a step of the test's choice."""


def _link(tmp_path: Path, lines: list[dict[str, Any]]) -> None:
    folder = tmp_path / "link" / "w"
    folder.mkdir(parents=True)
    (folder / "part-1.ndjson").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))


def _event(n: int, t: float, k: str | None) -> dict[str, Any]:
    return {"id": f"in:{n}", "event_time": int(t * 1_000_000), "source": "in", "payload": {"k": k}}


def _beat(t: float, advanced_s: float, n: int = 1) -> dict[str, Any]:
    return {"id": f"~heartbeat:r:{n}", "event_time": int(t * 1_000_000), "source": "~heartbeat",
            "payload": {"advanced_us": int(advanced_s * 1_000_000)}}


def _windows(records: list[Any]) -> list[tuple[str, Any]]:
    return sorted((r["k"], str(r["window_start"])[-9:-1] if isinstance(r["window_start"], str)
                   else r["window_start"].strftime("%H:%M:%S")) for r in records)


def test_a_heartbeat_closes_the_windows_on_spark_as_on_the_local_engine(spark: Any, tmp_path: Path) -> None:
    """The link as an idle edge writes it: events to t=1004, then 3 s of quiet (a heartbeat at 1007) and 3 s more
    (1010). With no end of input (`--keep-open`), both engines close every window up to 1010, z's [1004, 1006)
    too, and make none of the quiet (a heartbeat taken for an event would be counted in [1006, 1008)); without the
    heartbeats z's window stays open on both."""
    text = HUB.replace("HUB_FROM", "per2s")
    plan = load_text_plan(text, file=str(tmp_path / "p.yaml"), base_dir=str(tmp_path))
    events = [_event(1, 1000, "x"), _event(2, 1001.5, "y"), _event(3, 1003, "x"), _event(4, 1004, "z")]
    _link(tmp_path, [*events, _beat(1007, 3), _beat(1010, 3, n=2)])
    expected = [("x", "00:16:40"), ("x", "00:16:42"), ("y", "00:16:40"), ("z", "00:16:44")]
    assert _windows(_local_hub(plan)) == expected
    assert _windows(_spark_hub(spark, plan, tmp_path / "ck", flush=False)) == expected
    (tmp_path / "link" / "w" / "part-1.ndjson").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in events))
    without = [("x", "00:16:40"), ("x", "00:16:42"), ("y", "00:16:40")]  # z's window: waiting for time to pass
    assert _windows(_local_hub(plan)) == without
    assert _windows(_spark_hub(spark, plan, tmp_path / "ck2", flush=False)) == without


def test_pinned_difference_heartbeats_over_a_filter_at_the_hub(spark: Any, tmp_path: Path) -> None:
    """docs/spark.md: the hub begins with a filter that drops the newest forwarded event (t=1005, no key). A 1 s
    heartbeat: the local engine's window has seen 1000 at most, and moves to 1001 (its window [1000, 1002) stays
    open); Spark's watermark takes the heartbeat's 1006 and closes it."""
    text = HUB.replace("HUB_FROM", "keyed")
    plan = load_text_plan(text, file=str(tmp_path / "p.yaml"), base_dir=str(tmp_path))
    _link(tmp_path, [_event(1, 1000, "x"), _event(2, 1005, None), _beat(1006, 1)])
    assert _windows(_local_hub(plan)) == []
    assert _windows(_spark_hub(spark, plan, tmp_path / "ck", flush=False)) == [("x", "00:16:40")]


@pytest.mark.service
def test_a_nats_link_carries_the_edges_envelopes_and_heartbeats_to_a_spark_hub(spark: Any, tmp_path: Path) -> None:
    """`link: {type: nats}`: the edge (`--part edge`) publishes each event that reaches the split on
    `<subject>.<pipeline>` of a JetStream stream; the hub on Spark reads them there and gives the whole file's
    results. A heartbeat published there closes the window it covers (`--keep-open`), as through a spool."""
    need(port_open(4222), "NATS with JetStream on 127.0.0.1:4222")
    import nats

    tag = uuid.uuid4().hex[:8]
    stream, subject = f"EWLINK{tag}", f"ewlink.{tag}"

    async def create_and_publish(messages: list[tuple[str, dict[str, Any]]]) -> None:
        nc = await nats.connect("nats://127.0.0.1:4222")
        js = nc.jetstream()
        with contextlib.suppress(Exception):
            await js.add_stream(name=stream, subjects=[f"{subject}.>"])
        for where, message in messages:
            await js.publish(where, orjson.dumps(message))
        await nc.close()

    asyncio.run(create_and_publish([]))
    link = f"link: {{type: nats, stream: {stream}, subject: {subject}}}"
    pipeline = written(tmp_path, SPLIT.replace("    to: [cells-out]\n", "").replace(
        "link: {type: spool, path: link}", link))
    assert main(["run", str(pipeline), "--part", "edge", "--quiet"]) == 0
    got = _spark_hub(spark, load(str(pipeline)), tmp_path / "ck")
    assert sorted(canonical(r) for r in got) == sorted(canonical(r) for r in cells_by_hand())

    beats = HUB.replace("HUB_FROM", "per2s").replace("link: {type: spool, path: link}", link)
    plan = load_text_plan(beats, file=str(tmp_path / "beats.yaml"), base_dir=str(tmp_path))
    on = f"{subject}.w"
    asyncio.run(create_and_publish([(on, _event(1, 1000, "x")), (on, _event(2, 1004, "z")), (on, _beat(1007, 3))]))
    # a continuous hub, as `edgewise spark` runs one (a --once run over NATS ends with its data's micro-batch, before
    # the one the moved watermark would give)
    got: list[Any] = []
    stop = threading.Event()

    def collect(route: str, batch_id: int, rows: list[tuple[str, str]]) -> None:
        got.extend(orjson.loads(r) for _, r in rows)

    job = SparkJob(spark, hub_to_run(plan), SparkOptions(checkpoint=str(tmp_path / "ck2"), trigger_seconds=0.5),
                   collect=collect, report=lambda text: None)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            job.run(stop)
        except BaseException as exc:  # said below
            failed.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 180
        while len(got) < 2 and time.monotonic() < deadline and runner.is_alive():
            time.sleep(0.2)
    finally:
        stop.set()
        runner.join(120)
    assert not failed, failed
    assert _windows(got) == [("x", "00:16:40"), ("z", "00:16:44")]
