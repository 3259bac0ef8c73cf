"""Spark sources and sinks against real parts: NATS JetStream read by sequence (replayable), PostgreSQL upserts,
the file spool (idempotent by batch), Parquet tables, late events to their sink, malformed lines reported."""

from __future__ import annotations

import asyncio
import json
import os
import random
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from edgewise.config import load_text_plan
from edgewise.engine.spark.job import SparkJob, SparkOptions
from tests.conftest import need, port_open


def _collecting(spark: Any, plan_text: str, base: Path, checkpoint: Path, **options: Any) -> dict[str, list[Any]]:
    plan = load_text_plan(plan_text, file=str(base / "pipeline.yaml"), base_dir=str(base))
    got: dict[str, list[Any]] = {}

    def collect(route: str, batch_id: int, rows: list[tuple[str, str]]) -> None:
        got.setdefault(route, []).extend((i, orjson.loads(r)) for i, r in rows)

    SparkJob(spark, plan, SparkOptions(checkpoint=str(checkpoint), once=True, **options), collect=collect,
             report=lambda text: got.setdefault("_reports", []).append(text)).run()
    return got


ROOMS_PIPELINE = """
version: 1
event_time: "timestamp_seconds(t)"
sources: [{id: spool, type: file, path: in}]
pipelines:
  - id: w
    steps:
"""
"""A pipeline over a spool of `{"room", "t"}` events; its steps follow."""

SPOOL_PIPELINE = """
version: 1
sources: [{id: spool, type: file, path: in}]
pipelines:
  - id: p
    steps:
"""
"""Pipeline ``p`` over the spool ``in``; its steps follow."""


def _segment(spool: Path, n: int, lines: list[str]) -> None:
    """Spool segment ``n`` with ``lines``; segments are read in the order of their (fixed) modification times."""
    path = spool / f"part-{n}.ndjson"
    path.write_text("\n".join(lines) + "\n")
    os.utime(path, (1_000_000 + n, 1_000_000 + n))


@pytest.mark.service
def test_nats_stream_is_read_by_sequence_and_resumes_from_the_checkpoint(spark: Any, tmp_path: Path) -> None:
    need(port_open(4222), "NATS with JetStream on 127.0.0.1:4222")
    import nats

    tag = uuid.uuid4().hex[:8]
    stream, subject = f"EWSPARK{tag}", f"ewspark.{tag}.pos"

    async def publish(values: list[bytes], create: bool = False) -> None:
        nc = await nats.connect("nats://127.0.0.1:4222")
        js = nc.jetstream()
        if create:
            await js.add_stream(name=stream, subjects=[f"ewspark.{tag}.>"])
        for v in values:
            await js.publish(subject, v)
        await js.publish(f"ewspark.{tag}.other", b'{"other": true}')  # another subject of the stream: not read
        await nc.close()

    asyncio.run(publish([json.dumps({"n": n}).encode() for n in range(30)] + [b"not json"], create=True))
    text = f"""
version: 1
sources: [{{id: bus, type: nats, stream: {stream}, subject: {subject}}}]
pipelines:
  - id: p
    steps: [{{annotate: {{id: a, set: {{twice: "n * 2"}}}}}}]
"""
    first = _collecting(spark, text, tmp_path, tmp_path / "ck")
    assert sorted(r["n"] for _, r in first[""]) == list(range(30))
    assert all(r["twice"] == r["n"] * 2 for _, r in first[""])
    assert {i for i, _ in first[""]} == {f"bus:{stream}:{seq}" for seq in range(1, 31)}
    assert any("not JSON" in line or "not json" in line for line in first["_reports"])

    asyncio.run(publish([json.dumps({"n": n}).encode() for n in range(30, 40)]))
    second = _collecting(spark, text, tmp_path, tmp_path / "ck")
    assert sorted(r["n"] for _, r in second[""]) == list(range(30, 40)), "the restarted job read only new messages"


@pytest.mark.service
def test_postgres_upserts_make_a_replayed_batch_harmless(spark: Any, tmp_path: Path) -> None:
    need(port_open(5432), "PostgreSQL on 127.0.0.1:5432")
    import psycopg

    table = f"spark_out_{uuid.uuid4().hex[:8]}"
    spool = tmp_path / "in"
    spool.mkdir()
    (spool / "part-1.ndjson").write_text("".join(json.dumps({"k": i, "v": i * i}) + "\n" for i in range(25)))
    text = f"""
version: 1
sources: [{{id: spool, type: file, path: in}}]
pipelines:
  - id: p
    steps: [{{filter: {{id: f, where: "v >= 4"}}}}]
    to: [pg]
sinks:
  - {{id: pg, type: postgres, dsn: "postgresql://postgres@127.0.0.1:5432/test", table: {table}}}
"""
    plan = load_text_plan(text, file=str(tmp_path / "pipeline.yaml"), base_dir=str(tmp_path))
    job = SparkJob(spark, plan, SparkOptions(checkpoint=str(tmp_path / "ck"), once=True))
    job.run()
    # replay the same micro-batch (as after a crash between the write and Spark's commit)
    rows_df = spark.createDataFrame(
        [(f"spool:part-1.ndjson:{i + 1}", None, "spool", "", json.dumps({"k": i, "v": i * i}), None)
         for i in range(2, 25)], "id STRING, event_time TIMESTAMP, source STRING, _to STRING, _record STRING, "
        "_late_at BIGINT")
    job.compiled[0].writer(rows_df, 0)
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/test") as conn:
        count = conn.execute(f"SELECT count(*), count(DISTINCT id) FROM {table}").fetchone()
        conn.execute(f"DROP TABLE {table}")
    assert count == (23, 23)


def test_file_spool_and_parquet_are_idempotent_by_batch(spark: Any, tmp_path: Path) -> None:
    spool = tmp_path / "in"
    spool.mkdir()
    (spool / "part-1.ndjson").write_text("".join(json.dumps({"k": i % 3, "v": i}) + "\n" for i in range(12))
                                         + "{broken\n")
    text = """
version: 1
sources: [{id: spool, type: file, path: in}]
pipelines:
  - id: p
    steps: [{annotate: {id: a, set: {big: "v > 5"}}}]
    to: [out, table]
sinks:
  - {id: out, type: file, path: out, envelope: true}
  - {id: table, type: parquet, path: table}
"""
    plan = load_text_plan(text, file=str(tmp_path / "pipeline.yaml"), base_dir=str(tmp_path))
    job = SparkJob(spark, plan, SparkOptions(checkpoint=str(tmp_path / "ck"), once=True),
                   report=lambda text: None)
    job.run()
    assert job.compiled[0].writer.stats.malformed == 1
    files = sorted(os.listdir(tmp_path / "out"))
    assert files == ["part-b000000000000-p.ndjson"]
    lines = [orjson.loads(x) for x in (tmp_path / "out" / files[0]).read_bytes().splitlines()]
    assert [line["payload"]["v"] for line in lines] == list(range(12))
    assert all(set(line) == {"id", "event_time", "source", "payload"} for line in lines)
    # the spool the Spark sink wrote reads back as a source, ids kept (envelope lines)
    again = _collecting(spark, text.replace("path: in}", "path: out}").replace("to: [out, table]", ""), tmp_path,
                        tmp_path / "ck2")
    assert sorted(i for i, _ in again[""]) == sorted(line["id"] for line in lines)
    # results to one place: written in one pass over the micro-batch, the malformed line still counted and shown
    alone = _collecting(spark, text.replace("to: [out, table]", ""), tmp_path, tmp_path / "ck3")
    assert len(alone[""]) == 12
    assert alone["_reports"] == ["pipeline p: 1 malformed input records skipped "
                                 "(spool:part-1.ndjson:13: '{broken')"]
    table = spark.read.parquet(str(tmp_path / "table"))
    assert table.count() == 12 and set(table.columns) >= {"k", "v", "big", "batch"}
    # a replay of batch 0 rewrites the same file and the same table partition: nothing twice
    writer = job.compiled[0].writer
    replay = spark.createDataFrame([("spool:part-1.ndjson:1", None, "spool", "", '{"k":0,"v":0,"big":false}', None)],
                                   "id STRING, event_time TIMESTAMP, source STRING, _to STRING, _record STRING, "
                                   "_late_at BIGINT")
    writer(replay, 0)
    assert sorted(os.listdir(tmp_path / "out")) == files
    assert spark.read.parquet(str(tmp_path / "table")).count() == 1


def test_late_events_go_to_their_sink(spark: Any, tmp_path: Path) -> None:
    """Spark drops an event as late by the previous micro-batch's watermark; the copy that rides to the writer
    goes to the `late` sink by that same watermark, so the window and the late sink never both get an event."""
    spool = tmp_path / "in"
    spool.mkdir()

    text = ROOMS_PIPELINE + """\
      - window: {id: per-room, key: [room], tumbling: 1m, watermark: 10s, late: late, aggs: {n: count()}}
sinks:
  - {id: late, type: stdout}
"""
    for n, t in enumerate([5, 61, 130]):
        _segment(spool, n, [json.dumps({"room": "a", "t": t})])
    first = _collecting(spark, text, tmp_path, tmp_path / "ck", max_files_per_trigger=1, flush=False)
    # the watermark (130 - 10) passed [0, 60) in the previous run
    _segment(spool, 3, [json.dumps({"room": "a", "t": 20})])
    second = _collecting(spark, text, tmp_path, tmp_path / "ck", max_files_per_trigger=1)
    assert [r for _, r in second["late"]] == [{"room": "a", "t": 20}]
    results = first.get("", []) + second.get("", [])
    assert sorted((r["window_start"], r["n"]) for _, r in results) == [
        ("1970-01-01T00:00:00Z", 1), ("1970-01-01T00:01:00Z", 1), ("1970-01-01T00:02:00Z", 1)]


LATE_WINDOW = ROOMS_PIPELINE + """\
      - window: {id: per10, key: [room], tumbling: 10s, watermark: 5s, late: late, aggs: {n: count(), s: sum(t)}}
sinks:
  - {id: late, type: stdout}
"""


def _windows_and_late(times: list[int]) -> tuple[list[tuple[int, int, int]], list[int]]:
    """A plain reading of docs/state.md for LATE_WINDOW, one event at a time: the watermark is the largest time
    seen minus 5 s, and an event whose window ends at or before it is late. ``([(start s, n, s)], [late times])``."""
    windows: dict[int, list[int]] = {}
    late: list[int] = []
    largest: int | None = None
    for t in times:
        start = t - t % 10
        if largest is not None and start + 10 <= largest - 5:
            late.append(t)
            continue
        windows.setdefault(start, []).append(t)
        largest = t if largest is None else max(largest, t)
    return sorted((start, len(ts), sum(ts)) for start, ts in windows.items()), late


def _spark_windows(got: dict[str, list[Any]]) -> list[tuple[int, int, int]]:
    starts = {f"1970-01-01T00:00:{s:02d}Z": s for s in range(0, 60, 10)} | {"1970-01-01T00:01:00Z": 60}
    return sorted((starts[r["window_start"]], r["n"], r["s"]) for _, r in got.get("", []))


def test_an_event_late_by_its_micro_batchs_watermark_goes_to_the_late_sink(spark: Any, tmp_path: Path) -> None:
    """Issue 39: t=1, 2, 25 in one micro-batch, then t=4 in the next, which runs with a watermark of 20 s. Spark 4
    drops late rows by the previous micro-batch's watermark unless told otherwise, and counted t=4 in [0, 10)
    (n=3) with nothing for the late sink; locally t=4 is late."""
    spool = tmp_path / "in"
    spool.mkdir()
    _segment(spool, 1, [json.dumps({"room": "a", "t": t}) for t in (1, 2, 25)])
    _segment(spool, 2, [json.dumps({"room": "a", "t": 4})])
    got = _collecting(spark, LATE_WINDOW, tmp_path, tmp_path / "ck", max_files_per_trigger=1)
    assert _spark_windows(got) == [(0, 2, 3), (20, 1, 25)]
    assert [r for _, r in got["late"]] == [{"room": "a", "t": 4}]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_one_event_per_micro_batch_is_late_exactly_when_it_is_late_locally(spark: Any, tmp_path: Path,
                                                                            seed: int) -> None:
    """With one event per micro-batch, the micro-batch's watermark is the one every earlier event moved: Spark's
    windows and late events are then those of the plain per-event reading (generated times, out of order)."""
    rng = random.Random(seed)
    times = [rng.randrange(0, 60) for _ in range(7)]
    spool = tmp_path / "in"
    spool.mkdir()
    for n, t in enumerate(times):
        _segment(spool, n, [json.dumps({"room": "a", "t": t})])
    got = _collecting(spark, LATE_WINDOW, tmp_path, tmp_path / "ck", max_files_per_trigger=1)
    windows, late = _windows_and_late(times)
    assert (_spark_windows(got), sorted(r["t"] for _, r in got.get("late", []))) == (windows, sorted(late)), times


def test_a_spool_the_file_sink_wrote_fast_is_read_in_name_order(spark: Any, tmp_path: Path) -> None:
    """Issue 39: Spark reads a spool in modification-time order, and segments sealed within one millisecond were
    read out of name order (windows came out short). The file sink now seals them a millisecond apart at least:
    a spool it wrote one event per segment, read one segment per micro-batch, gives the per-event reading."""
    times = [8, 36, 54, 51, 48, 4, 16, 55, 3, 23]
    from edgewise.engine.local import LocalEngine
    from edgewise.sources.base import SourceContext
    from edgewise.testing import FakeClock, ListSource

    plan = load_text_plan("""
version: 1
pipelines: [{id: copy, steps: [], to: [spool]}]
sinks: [{id: spool, type: file, path: in, max_events: 1, fsync: false}]
""", file=str(tmp_path / "write.yaml"), base_dir=str(tmp_path))
    engine = LocalEngine(plan, clock=FakeClock(0))
    engine.open()
    for batch in ListSource([{"room": "a", "t": t} for t in times]).read(SourceContext(engine.clock, print, 1)):
        engine.process(batch)
    engine.close()
    assert len(list((tmp_path / "in").glob("*.ndjson"))) == len(times)
    got = _collecting(spark, LATE_WINDOW, tmp_path, tmp_path / "ck", max_files_per_trigger=1)
    reports = [r for r in got.get("_reports", []) if "modification" in r]
    windows, late = _windows_and_late(times)
    assert (_spark_windows(got), sorted(r["t"] for _, r in got.get("late", []))) == (windows, sorted(late))
    assert reports == []


def test_pinned_difference_spark_reads_a_spool_by_modification_time(spark: Any, tmp_path: Path) -> None:
    """docs/spark.md, Spool order: segments that share a modification time (or whose times do not rise with their
    names) are read by Spark in its order, not by name; with --max-files-per-trigger the job says so at the start,
    naming them."""
    spool = tmp_path / "in"
    spool.mkdir()
    for n in (1, 2, 3):
        _segment(spool, n, [json.dumps({"room": "a", "t": n})])
    got = _collecting(spark, LATE_WINDOW, tmp_path, tmp_path / "ck", max_files_per_trigger=1)
    assert not [r for r in got.get("_reports", []) if "modification" in r]
    for n in (1, 2, 3):
        os.utime(spool / f"part-{n}.ndjson", (1_000_000, 1_000_000))
    got = _collecting(spark, LATE_WINDOW, tmp_path, tmp_path / "ck2", max_files_per_trigger=1)
    [warning] = [r for r in got["_reports"] if "modification" in r]
    assert warning.startswith("source spool: part-1.ndjson and part-2.ndjson share a modification time. Spark "
                              "reads a spool's segments in modification-time order"), warning


def test_a_spool_is_read_line_by_line_where_no_one_reads_the_event_ids(spark: Any, tmp_path: Path) -> None:
    """Results that go to a payload-only file sink need no line numbers: Spark's line reader reads the spool (not
    whole segments split into numbered lines), with the same lines (blank ones skipped, a CR kept for the parser)
    and the malformed ones reported by file."""
    spool = tmp_path / "in"
    spool.mkdir()
    (spool / "part-1.ndjson").write_bytes(b'{"v": 1}\n\n{"v": 2}\r\n{broken\n  \n{"v": 3}')
    text = """
version: 1
sources: [{id: spool, type: file, path: in}]
pipelines:
  - id: p
    steps: [{filter: {id: positive, where: "v > 0"}}]
    to: [out]
sinks:
  - {id: out, type: file, path: out}
"""
    reports: list[str] = []
    plan = load_text_plan(text, file=str(tmp_path / "pipeline.yaml"), base_dir=str(tmp_path))
    job = SparkJob(spark, plan, SparkOptions(checkpoint=str(tmp_path / "ck"), once=True), report=reports.append)
    explained = job.explain()
    assert "posexplode" not in explained
    # the envelope test is made once per line: the filter Spark pushes down reads the event, not a copy of the test
    assert explained.count("map_keys(") == 1, explained
    job.run()
    [segment] = sorted((tmp_path / "out").glob("*.ndjson"))
    assert sorted(orjson.loads(line)["v"] for line in segment.read_bytes().splitlines()) == [1, 2, 3]
    assert reports == ["pipeline p: 1 malformed input records skipped (spool:part-1.ndjson: '{broken')"]
    # with an envelope the ids are written: the lines are numbered
    enveloped = load_text_plan(text.replace("path: out}", "path: out2, envelope: true}"),
                               file=str(tmp_path / "pipeline.yaml"), base_dir=str(tmp_path))
    assert "posexplode" in SparkJob(spark, enveloped, SparkOptions(checkpoint=str(tmp_path / "ck2"))).explain()


def test_a_window_reads_its_input_once_and_still_reports_malformed_lines(spark: Any, tmp_path: Path) -> None:
    """Where no step before a window routes, its routed branch reads only the end-of-input marker's spool: the
    malformed lines are counted on the window's input (an observed metric) and reported per micro-batch."""
    spool = tmp_path / "in"
    spool.mkdir()
    for n, lines in enumerate([['{"room": "a", "t": 5}', "[1, 2]", '{"room": "a", "t": 6}'],
                               ['{"room": "b", "t": 7}', "{broken", "{also broken"]]):
        _segment(spool, n, lines)
    text = ROOMS_PIPELINE + """\
      - filter: {id: any, where: "t > 0"}
      - window: {id: per-room, key: [room], tumbling: 1m, aggs: {n: count()}}
"""
    plan = load_text_plan(text, file=str(tmp_path / "pipeline.yaml"), base_dir=str(tmp_path))
    explained = SparkJob(spark, plan, SparkOptions(checkpoint=str(tmp_path / "ck0"), once=True)).explain()
    assert explained.count(f"FileSource[{spool}]") == 1, explained
    assert explained.count("parseJson(_line") == 1, explained  # the end-of-input marker's lines are not parsed
    got = _collecting(spark, text, tmp_path, tmp_path / "ck", max_files_per_trigger=1)
    assert sorted((r["room"], r["n"]) for _, r in got[""]) == [("a", 2), ("b", 1)]
    assert got["_reports"] == [
        "pipeline w: 1 malformed input records skipped (e.g. '[1, 2]')",
        "pipeline w: 2 malformed input records skipped (e.g. '{also broken')"]


def test_generator_is_spooled_once_so_a_restart_replays_the_same_events(spark: Any, tmp_path: Path) -> None:
    text = """
version: 1
sources: [{id: ads, type: generator, workload: ysb, count: 300, seed: 3}]
pipelines:
  - id: views
    steps: [{filter: {id: only-views, where: "event_type = 'view'"}}]
"""
    first = _collecting(spark, text, tmp_path, tmp_path / "ck")
    spooled = sorted((tmp_path / "ck" / "_generator" / "ads").glob("*.ndjson"))
    assert spooled and (tmp_path / "ck" / "_generator" / "ads" / "_COMPLETE").exists()
    from edgewise.sources.ysb import YsbWorkload

    views = [e for e in YsbWorkload(seed=3).events(300) if e["event_type"] == "view"]
    assert sorted(r["user_id"] + r["event_time"] for _, r in first[""]) == \
        sorted(e["user_id"] + e["event_time"] for e in views)
    assert _collecting(spark, text, tmp_path, tmp_path / "ck").get("", []) == [], "a restart reads nothing twice"


def test_lookup_missing_error_dead_letters_or_stops_the_query(spark: Any, tmp_path: Path) -> None:
    spool = tmp_path / "in"
    spool.mkdir()
    (spool / "part-1.ndjson").write_text('{"ad": "a1", "n": 1}\n{"ad": "zz", "n": 0}\n')
    (tmp_path / "ads.csv").write_text("ad,campaign\na1,c1\n")
    text = SPOOL_PIPELINE + """\
      - lookup: {id: campaign, table: ads.csv, key: ad, missing: error, on_error: dead}
      - annotate: {id: ratio, set: {r: "1 / n"}, on_error: dead}
sinks:
  - {id: dead, type: stdout}
"""
    got = _collecting(spark, text, tmp_path, tmp_path / "ck")
    assert [r for _, r in got[""]] == [{"ad": "a1", "n": 1, "campaign": "c1", "r": 1.0}]
    (dead,) = [r for _, r in got["dead"]]
    assert dead["step"] == "campaign" and dead["error"]["type"] == "LOOKUP_KEY_MISSING"
    assert dead["event"] == {"ad": "zz", "n": 0}
    from edgewise.engine.spark.job import SparkJobFailed

    with pytest.raises(SparkJobFailed, match="no row for key zz"):
        _collecting(spark, text.replace(", on_error: dead}\n      - annotate", "}\n      - annotate"), tmp_path,
                    tmp_path / "ck2")


LOOKUP_PIPELINE = SPOOL_PIPELINE + """\
      - lookup: {id: enrich, table: TABLE, key: k, fields: [v, w]}
sinks:
  - {id: out, type: stdout}
"""


@pytest.mark.parametrize("table", ["rows.json", "empty.csv"])
def test_a_lookup_table_is_held_in_the_driver_and_gives_what_the_local_engine_gives(spark: Any, tmp_path: Path,
                                                                                   table: str) -> None:
    """The table is a local relation (a Python-list DataFrame would start Python workers to broadcast it) and
    every value kind survives the way there: text with quotes and non-ASCII, numbers, null, nested objects and
    arrays, an empty key; also a table without rows. Oracle: the local engine over the same events."""
    from edgewise.jsonio import as_written
    from edgewise.testing import run

    spool = tmp_path / "in"
    spool.mkdir()
    (tmp_path / "rows.json").write_text(json.dumps([
        {"k": "a", "v": 'say "hi"\n', "w": 1}, {"k": "ä→b", "v": None, "w": 2.5},
        {"k": "", "v": {"deep": [1, {"x": None}]}, "w": [True, "t"]}, {"k": "7", "v": "seven", "w": -7}]))
    (tmp_path / "empty.csv").write_text("k,v,w\n")
    events = [{"k": "a", "n": 1}, {"k": "ä→b", "n": 2}, {"k": "", "n": 3}, {"k": 7, "n": 4}, {"k": "zz", "n": 5},
              {"n": 6}]
    (spool / "part-1.ndjson").write_text("".join(json.dumps(e) + "\n" for e in events))
    text = LOOKUP_PIPELINE.replace("TABLE", table)
    plan = load_text_plan(text, file=str(tmp_path / "pipeline.yaml"), base_dir=str(tmp_path))
    explained = SparkJob(spark, plan, SparkOptions(checkpoint=str(tmp_path / "ck0"), once=True)).explain()
    assert "LocalTableScan" in explained and "ExistingRDD" not in explained, explained
    got = _collecting(spark, text, tmp_path, tmp_path / "ck")
    expected = run(plan, events).outputs["p"]
    assert len(expected) == len(events)
    key = lambda r: r["n"]  # noqa: E731
    assert sorted((as_written(r) for _, r in got[""]), key=key) == sorted(map(as_written, expected), key=key)
