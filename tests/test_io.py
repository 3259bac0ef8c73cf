"""Sources and sinks: formats, malformed input, rolling file segments, HTTP with retries and dead letters."""

from __future__ import annotations

import io
import itertools
import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewise.clock import FakeClock
from edgewise.config import BuildContext, load_text_plan
from edgewise.engine.local import LocalEngine
from edgewise.errors import SinkError
from edgewise.sources.base import SourceContext
from edgewise.sources.file import FileSource, FileSourceConfig
from edgewise.sources.generator import GeneratorConfig, GeneratorSource
from edgewise.sources.lines import line_chunks
from edgewise.testing import ListSource
from tests.conftest import ROOT


def read_all(source: object) -> tuple[list[dict[str, object]], list[str], list[str]]:
    problems: list[str] = []
    payloads: list[dict[str, object]] = []
    ids: list[str] = []
    for batch in source.read(SourceContext(FakeClock(), problems.append, batch_size=2)):  # type: ignore[attr-defined]
        payloads += batch.payloads
        ids += batch.ids()
    return payloads, ids, problems


def test_ndjson_malformed_lines_are_reported_and_skipped(tmp_path: Path) -> None:
    f = tmp_path / "in.ndjson"
    f.write_bytes(b'{"a": 1}\n{bad\n\n[1]\n{"a": 2}\n\xff\xfe\n{"a": 3}\n')
    payloads, ids, problems = read_all(FileSource(FileSourceConfig(id="f", path=str(f)), BuildContext(".")))
    assert payloads == [{"a": 1}, {"a": 2}, {"a": 3}]
    assert ids == ["f:in.ndjson:1", "f:in.ndjson:5", "f:in.ndjson:7"]
    assert [p.split(": ", 1)[0].rsplit(":", 1)[1] for p in problems] == ["2", "4", "6"]
    assert "expected a JSON object" in problems[1]


def test_csv_clf_regex_and_hfp_formats(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("name,age\nann,31\nbob,\n")
    (tmp_path / "access.log").write_text(
        '127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326 '
        '"http://www.example.com/start.html" "Mozilla/4.08"\nnot a log line\n')
    (tmp_path / "app.log").write_text("ERROR disk full\nINFO ok\n")
    ctx = BuildContext(str(tmp_path))
    rows, _, _ = read_all(FileSource(FileSourceConfig(id="c", path="t.csv", format="csv"), ctx))
    assert rows == [{"name": "ann", "age": "31"}, {"name": "bob", "age": ""}]
    logs, _, problems = read_all(FileSource(FileSourceConfig(id="l", path="access.log", format="clf"), ctx))
    assert logs[0]["status"] == 200 and logs[0]["path"] == "/apache_pb.gif" and logs[0]["agent"] == "Mozilla/4.08"
    assert len(problems) == 1
    parsed, _, _ = read_all(FileSource(FileSourceConfig(id="r", path="app.log", format="regex",
                                                        regex=r"(?P<level>\w+) (?P<msg>.*)"), ctx))
    assert parsed == [{"level": "ERROR", "msg": "disk full"}, {"level": "INFO", "msg": "ok"}]
    hfp = ROOT / "data" / "hsl-hfp-apc-dumps" / "stopChange" / "hfp.dump"
    events, _, problems = read_all(FileSource(FileSourceConfig(id="h", path=str(hfp), format="hfp"), ctx))
    assert not problems and len(events) == 14
    assert events[1]["event_type"] == "VP" and events[1]["veh"] == 1913
    assert events[1]["topic"]["transport_mode"] == "bus"  # type: ignore[index]


def test_csv_null_values_read_as_null_so_an_average_skips_them(tmp_path: Path) -> None:
    # nycflights13's shape: NA for a missing number; a quoted "NA" is the same cell text, an empty cell too
    (tmp_path / "flights.csv").write_text('origin,dep_delay,tailnum\nEWR,2,N14228\nEWR,NA,NA\nEWR,,N24211\n'
                                          'JFK,"NA",x\nJFK,-4,NAN\n')
    ctx = BuildContext(str(tmp_path))
    rows, _, _ = read_all(FileSource(FileSourceConfig(id="c", path="flights.csv", format="csv",
                                                      null_values=["NA", ""]), ctx))
    assert [r["dep_delay"] for r in rows] == ["2", None, None, None, "-4"]
    assert [r["tailnum"] for r in rows] == ["N14228", None, "N24211", "x", "NAN"]  # whole cells only
    plain, _, _ = read_all(FileSource(FileSourceConfig(id="c", path="flights.csv", format="csv"), ctx))
    assert plain[1]["dep_delay"] == "NA"  # without null_values a cell stays text
    plan = load_text_plan("""
version: 1
sources: [{id: c, type: file, path: flights.csv, format: csv, null_values: [NA, '']}]
pipelines:
  - id: p
    steps: [{aggregate: {id: delays, key: [origin], aggs: {avg: "avg(cast(dep_delay AS INT))", n: count(dep_delay)},
             into: delay}}]
    to: [out]
sinks: [{id: out, type: stdout}]
""", file=str(tmp_path / "p.yaml"), base_dir=str(tmp_path))
    from edgewise.testing import run_sources

    result = run_sources(plan, [plan.source(s) for s in plan.sources])
    assert not result.errors
    last = {r["origin"]: r["delay"] for _, r in result.produced["p"]}
    assert last == {"EWR": {"avg": 2.0, "n": 1}, "JFK": {"avg": -4.0, "n": 1}}


def test_clf_agent_without_its_closing_quote_is_read_to_the_end_of_the_line(tmp_path: Path) -> None:
    (tmp_path / "access.log").write_text(
        '66.249.66.1 - - [17/May/2015:10:05:03 +0000] "GET /robots.txt HTTP/1.1" 200 26 "-" '
        '"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)  \n'
        '10.0.0.2 - - [17/May/2015:10:05:04 +0000] "GET / HTTP/1.1" 200 5 "-" "curl/8"\n'
        '10.0.0.3 - - [17/May/2015:10:05:05 +0000] "GET / HTTP/1.1\n')
    logs, ids, problems = read_all(FileSource(FileSourceConfig(id="l", path="access.log", format="clf"),
                                              BuildContext(str(tmp_path))))
    assert [r["agent"] for r in logs] == ["Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
                                          "curl/8"]
    assert logs[0]["status"] == 200 and logs[0]["referer"] is None and logs[0]["path"] == "/robots.txt"
    assert len(problems) == 1 and ids == ["l:access.log:1", "l:access.log:2"]  # an unclosed request is not a line


def test_hfp_topics_with_spaces_decode() -> None:
    dump = ROOT / "data" / "hsl-hfp-apc-dumps" / "currentStopNull" / "hfp.dump"
    events, _, problems = read_all(FileSource(FileSourceConfig(id="h", path=str(dump), format="hfp"),
                                              BuildContext(".")))
    assert not problems
    assert len(events) == 1034
    assert any(e["topic"].get("headsign") == "Matinkylä (M)" for e in events)  # type: ignore[index]


def test_generator_is_reproducible() -> None:
    a, ids, _ = read_all(GeneratorSource(GeneratorConfig(id="g", count=5, seed=7), BuildContext(".")))
    b, _, _ = read_all(GeneratorSource(GeneratorConfig(id="g", count=5, seed=7), BuildContext(".")))
    assert a == b and len(a) == 5 and ids[0] == "g:ysb-7:0"
    assert set(a[0]) == {"user_id", "page_id", "ad_id", "ad_type", "event_type", "event_time", "ip_address"}


def test_file_sink_rolls_and_seals_segments_atomically(tmp_path: Path) -> None:
    plan = load_text_plan(f"""
version: 1
pipelines: [{{id: p, steps: [], to: [out]}}]
sinks: [{{id: out, type: file, path: {tmp_path / 'spool'}, max_events: 3, envelope: true}}]
""")
    engine = LocalEngine(plan, clock=FakeClock(5_000_000), stdout=io.BytesIO(), errors=io.StringIO())
    engine.open()
    for batch in ListSource([{"n": i} for i in range(6)]).read(SourceContext(engine.clock, print, batch_size=2)):
        engine.process(batch)
    spool = tmp_path / "spool"
    sealed_before_close = sorted(p.name for p in spool.iterdir() if p.suffix == ".ndjson")
    assert len(sealed_before_close) == 1  # batches of 2: sealed after 4 events, the last 2 still open
    assert any(p.name.endswith(".open") for p in spool.iterdir())
    engine.close()
    files = sorted(spool.iterdir())
    assert all(f.suffix == ".ndjson" for f in files)
    lines = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert [line["payload"]["n"] for line in lines] == list(range(6))
    assert len(files) == 2
    assert lines[0]["id"] == "test:0" and lines[0]["event_time"] == 5_000_000


def test_file_sink_seals_segments_with_modification_times_in_name_order(tmp_path: Path) -> None:
    """Issue 39: Spark reads a spool in modification-time order (to the millisecond), the local engine by name;
    segments sealed within one millisecond were read out of name order. Each sealed segment is now at least a
    millisecond after the one before, this run's and an earlier run's (here one stamped a minute ahead)."""
    spool = tmp_path / "spool"
    spool.mkdir()
    earlier = spool / "part-00000000000000001-0000-000001.ndjson"
    earlier.write_text('{"n": -1}\n')
    ahead_ns = time.time_ns() + 60 * 10**9
    os.utime(earlier, ns=(ahead_ns, ahead_ns))
    plan = load_text_plan(f"""
version: 1
pipelines: [{{id: p, steps: [], to: [out]}}]
sinks: [{{id: out, type: file, path: {spool}, max_events: 1, fsync: false}}]
""")
    engine = LocalEngine(plan, clock=FakeClock(5_000_000), stdout=io.BytesIO(), errors=io.StringIO())
    engine.open()
    for batch in ListSource([{"n": i} for i in range(40)]).read(SourceContext(engine.clock, print, batch_size=1)):
        engine.process(batch)
    engine.close()
    names = sorted(p.name for p in spool.iterdir())
    assert len(names) == 41
    mtimes_ms = [(spool / name).stat().st_mtime_ns // 1_000_000 for name in names]
    assert all(a < b for a, b in itertools.pairwise(mtimes_ms)), mtimes_ms
    assert [json.loads((spool / name).read_text())["n"] for name in names] == list(range(-1, 40))


class Collector(BaseHTTPRequestHandler):
    received: ClassVar[list[object]] = []
    keys: ClassVar[list[str]] = []
    fail_first = 0
    status = 503

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if Collector.fail_first > 0:
            Collector.fail_first -= 1
            self.send_response(Collector.status)
            self.end_headers()
            return
        Collector.received.extend(json.loads(body))
        Collector.keys.append(self.headers["Idempotency-Key"])
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[str]:
    Collector.received, Collector.keys, Collector.fail_first, Collector.status = [], [], 0, 503
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def run_http(url: str, extra: str = "", events: int = 5) -> tuple[LocalEngine, list[float]]:
    plan = load_text_plan(f"""
version: 1
pipelines: [{{id: p, steps: [], to: [hook]}}]
sinks:
  - {{id: hook, type: http, url: "{url}", batch_size: 2, retry: {{attempts: 3, backoff: 10ms}}{extra}}}
  - {{id: dead, type: stdout}}
""")
    sleeps: list[float] = []
    out = io.BytesIO()
    engine = LocalEngine(plan, clock=FakeClock(), stdout=out, errors=io.StringIO(), sleep=sleeps.append)
    engine.run([ListSource([{"n": i} for i in range(events)])])
    engine.stdout_bytes = out.getvalue()  # type: ignore[attr-defined]
    return engine, sleeps


def test_http_sink_batches_and_retries_with_backoff(http_server: str) -> None:
    Collector.fail_first = 2
    engine, sleeps = run_http(http_server)
    assert Collector.received == [{"n": i} for i in range(5)]
    assert sleeps == [0.01, 0.02]  # exponential backoff between the three tries
    assert len(Collector.keys) == 3 and len(set(Collector.keys)) == 3
    assert engine.stats.ok


def test_http_sink_dead_letters_after_retries(http_server: str) -> None:
    Collector.fail_first = 100
    engine, _ = run_http(http_server, ", on_error: dead", events=2)
    letters = [json.loads(line) for line in engine.stdout_bytes.splitlines()]  # type: ignore[attr-defined]
    assert [x["event"] for x in letters] == [{"n": 0}, {"n": 1}]
    assert "503" in letters[0]["error"]["message"]


def test_http_sink_does_not_retry_a_client_error(http_server: str) -> None:
    Collector.fail_first, Collector.status = 100, 400
    with pytest.raises(SinkError, match="answered 400"):
        run_http(http_server)


def test_http_sink_down_fails_the_run_after_retries() -> None:
    with pytest.raises(SinkError, match="could not deliver"):
        run_http("http://127.0.0.1:9/unreachable")


def test_same_named_files_in_different_directories_get_distinct_stable_ids(tmp_path: Path) -> None:
    """Issue 13: ids name a file by its path below the glob's fixed part, so the bundled HSL recordings (13 files
    all named hfp.dump) never share an id, and an id-keyed sink keeps every event."""
    for day in ("2024-05-01", "2024-05-02"):
        (tmp_path / "rec" / day).mkdir(parents=True)
        (tmp_path / "rec" / day / "hfp.dump").write_text('{"a": 1}\n{"a": 2}\n')
    source = FileSource(FileSourceConfig(id="r", path=str(tmp_path / "rec" / "*" / "hfp.dump")), BuildContext("."))
    _, ids, _ = read_all(source)
    assert ids == ["r:2024-05-01/hfp.dump:1", "r:2024-05-01/hfp.dump:2",
                   "r:2024-05-02/hfp.dump:1", "r:2024-05-02/hfp.dump:2"]
    assert read_all(source)[1] == ids  # stable across runs
    directory = FileSource(FileSourceConfig(id="d", path=str(tmp_path / "rec" / "2024-05-01")), BuildContext("."))
    assert read_all(directory)[1] == ["d:hfp.dump:1", "d:hfp.dump:2"]  # a spool directory: its file names


def test_bundled_hsl_recordings_keep_every_event_in_an_id_keyed_sink(tmp_path: Path) -> None:
    import sqlite3

    from edgewise.cli import main

    pipeline = tmp_path / "all.yaml"
    pipeline.write_text(f"""version: 1
sources:
  - {{id: recordings, type: file, path: {ROOT / 'data' / 'hsl-hfp-apc-dumps'}/*/hfp.dump, format: hfp}}
pipelines:
  - {{id: all, steps: [], to: [db]}}
sinks:
  - {{id: db, type: sqlite, path: events.db, table: events}}
""")
    assert main(["run", str(pipeline), "-q"]) == 0
    with sqlite3.connect(tmp_path / "events.db") as conn:
        (rows,) = conn.execute("SELECT count(*) FROM events").fetchone()
    assert rows == 3690


def test_spool_envelopes_give_their_event_with_its_id_and_event_time(tmp_path: Path) -> None:
    """Issue 13: what a daemon's file sink spools ({id, event_time, source, payload}) reads back as the event on
    the local engine too (Spark's spool reader does the same; tests/spark covers that side)."""
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "part-1.ndjson").write_text(
        '{"id":"gh:d-1","event_time":5000000,"source":"gh","payload":{"a":1}}\n'
        '{"a":2}\n'
        '{"id":"x","event_time":1,"source":"s","payload":{"b":1},"extra":true}\n'  # five keys: a plain event
        '{"event_time":1,"id":"y","source":"s","payload":{"b":1}}\n')  # id not first: a plain event
    batches = list(FileSource(FileSourceConfig(id="sp", path=str(spool)), BuildContext(".")).read(
        SourceContext(FakeClock(9), lambda m: None)))
    payloads = [p for b in batches for p in b.payloads]
    ids = [i for b in batches for i in b.ids()]
    times = [t for b in batches for t in b.event_times]
    assert payloads[:2] == [{"a": 1}, {"a": 2}] and "extra" in payloads[2] and "payload" in payloads[3]
    assert ids == ["gh:d-1", "sp:part-1.ndjson:2", "sp:part-1.ndjson:3", "sp:part-1.ndjson:4"]
    assert times[0] == 5_000_000 and times[1] == 9


class _Pipe(io.RawIOBase):
    """A stream whose reads return what a pipe would: at most ``sizes[k]`` bytes on the k-th read, fewer than asked."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self.data, self.sizes, self.pos = data, sizes, 0

    def read1(self, size: int = -1) -> bytes:
        step = self.sizes[len(self.sizes) and self.pos % len(self.sizes)] if self.sizes else size
        out = self.data[self.pos:self.pos + max(1, min(size, step))]
        self.pos += len(out)
        return out


@settings(max_examples=300)
@given(st.lists(st.sampled_from([b"", b"a", b"{}", b"\r", b"xyz" * 20]), max_size=12), st.booleans(),
       st.lists(st.integers(1, 70), max_size=5), st.integers(1, 64))
def test_line_chunks_give_every_line_once_however_the_stream_is_cut(parts, ends_with_newline, sizes, size) -> None:
    """Oracle: ``bytes.split``. Lines may end in any read, span many, or be empty; each comes with its newline, a
    last line without one gets one; nothing else is added."""
    data = b"\n".join(parts) + (b"\n" if ends_with_newline and parts else b"")
    got = [line for lines in line_chunks(_Pipe(data, sizes), size) for line in lines]
    expected = data.split(b"\n")
    if expected and expected[-1] == b"":
        expected.pop()  # the newline that ends the last line
    assert got == [line + b"\n" for line in expected]
    assert all(lines for lines in line_chunks(_Pipe(data, sizes), size))  # no empty chunks
