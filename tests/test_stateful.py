"""Stateful steps: durability across crashes (simulated and a real kill -9), state expiry, config errors."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from edgewise.config import load_text_plan
from edgewise.errors import ConfigError
from edgewise.testing import CRASH, assert_records_equal, run
from tests.conftest import ROOT, need, port_open
from tests.daemon.helpers import wait_for

MIXED = """
version: 1
event_time: "timestamp_seconds(t)"
pipelines:
  - id: mixed
    steps:
      - dedupe: {id: once, key: "concat(room, '/', t)", within: 30s}
      - aggregate: {id: running, key: [room], aggs: {n: count(), hi: max(v)}, into: so_far}
      - window: {id: per-minute, key: [room], sliding: 1m, every: 20s, watermark: 5s, allowed_lateness: 5s,
                 aggs: {n: count(), total: sum(v), rooms: histogram(room)}, late: late}
      - complete: {id: pairs, key: "n % 3", parts: {small: "n < 3", big: "n >= 3"}, timeout: 1m, into: pair}
  - id: sessions
    steps:
      - window: {id: visits, key: [room], session: 25s, watermark: 30s, aggs: {n: count(), last: max(t)},
                 emit: updates}
sinks:
  - {id: late, type: stdout}
"""


def _events(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    events = []
    for i in range(n):
        t = i * 7 + rng.randint(-40, 40)  # out of order by up to 80 s; some late, some duplicates
        events.append({"room": rng.choice("abc"), "t": t, "v": rng.randint(-50, 50)})
    return events


def _canonical_run(plan: Any, events: list[Any], **kw: Any) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    result = run(plan, events, **kw)
    return result.outputs, {sid: s.unique() for sid, s in result.sinks.items()}


@pytest.mark.parametrize("batch_size", [1, 4])
def test_a_crash_anywhere_gives_the_uninterrupted_results(batch_size: int) -> None:
    plan = load_text_plan(MIXED)
    events = _events(60, seed=batch_size)
    expected, expected_sinks = _canonical_run(plan, events, batch_size=batch_size)
    assert len(expected["mixed"]) > 20 and expected_sinks["late"], "the workload must exercise windows and lateness"
    for position in range(1, len(events), 7):
        crashed = [*events[:position], CRASH, *events[position:]]
        if position + 20 < len(events):
            crashed.insert(position + 21, CRASH)  # and a second crash later on
        outputs, sinks = _canonical_run(plan, crashed, batch_size=batch_size)
        for pipeline in ("mixed", "sessions"):
            assert_records_equal(outputs[pipeline], expected[pipeline])
        assert_records_equal(sinks["late"], expected_sinks["late"])



@pytest.mark.service
def test_restart_with_a_redis_store() -> None:
    need(port_open(6379), "Redis on 127.0.0.1:6379")
    from edgewise.state.redis import RedisStore

    plan = load_text_plan(MIXED)
    events = _events(40, seed=7)
    expected, _ = _canonical_run(plan, events, batch_size=3)
    prefix = f"edgewise-test:{uuid.uuid4().hex}:"
    opened: list[RedisStore] = []

    def open_store(name: str) -> RedisStore:
        store = RedisStore("redis://127.0.0.1:6379/0", f"{prefix}{name}:")
        opened.append(store)
        return store

    try:
        outputs, _ = _canonical_run(plan, [*events[:17], CRASH, *events[17:]], batch_size=3, open_store=open_store)
        assert_records_equal(outputs["mixed"], expected["mixed"])
        held = [k for k, _ in open_store("default").scan("")]
        assert held and not any(k.startswith(("source/", "run/", "digest/")) for k in held)  # Redis held the state;
        # the finished run forgot its position (the crash's restart resumed from the one Redis held then)
    finally:
        cleanup = open_store("default")
        for key, _ in list(cleanup.scan("")):
            cleanup.delete(key)
        for store in opened:
            store.close()


def test_window_state_is_expired_once_windows_can_no_longer_change() -> None:
    plan = load_text_plan("""
version: 1
event_time: "timestamp_seconds(t)"
pipelines:
  - id: p
    steps:
      - window: {id: w, key: [k], tumbling: 10s, watermark: 5s, allowed_lateness: 10s, aggs: {n: count()}}
""")
    from edgewise.steps.window import WindowStep

    step = plan.pipelines[0].steps[0]
    assert isinstance(step, WindowStep)
    result = run(plan, [{"k": i % 5, "t": i} for i in range(0, 200)])
    assert len(result.outputs["p"]) == 20 * 5
    # the run finished (windows flushed at end); a run that stops short keeps only the recent windows open
    from edgewise.clock import FakeClock
    from edgewise.engine.context import RunContext
    from edgewise.sources.base import SourceContext
    from edgewise.sources.lines import make_batch

    step.reset()
    ctx = RunContext(clock=FakeClock())
    batch = make_batch([{"k": i % 5, "t": i} for i in range(200)], list(range(200)), "s", "s:",
                       SourceContext(FakeClock(), print))
    batch.event_times = [i * 1_000_000 for i in range(200)]
    out = step.process(batch, ctx)
    # watermark 194 s: windows ending at or before 194 - 10 are gone, later ones still open
    assert {s for s, _ in step.windows} == {180_000_000, 190_000_000}
    assert len(out) == 19 * 5  # windows ending at or before 194 s were emitted, once


def test_config_errors_name_the_field() -> None:
    cases = {
        "window: {id: w, aggs: {n: count()}}": "exactly one of tumbling, sliding (with every) or session",
        "window: {id: w, sliding: 1m, aggs: {n: count()}}": "needs `every`",
        "window: {id: w, tumbling: 1m, aggs: {n: median(x)}}": "unknown aggregate 'median'",
        "window: {id: w, tumbling: 1m, aggs: {n: count(}}": "expected an aggregate",
        "window: {id: w, tumbling: 1m, aggs: {n: count()}, late: nowhere}": "late names 'nowhere'",
        "aggregate: {id: a, aggs: {n: 'sum(x +)'}, into: s}": "aggs.n",
        "dedupe: {id: d, key: x, within: soon}": "within",
        "complete: {id: c, key: x, parts: {a: 'x = 1'}, timeout: 1m, into: s}": "parts",
        "complete: {id: c, key: x, parts: {a: 'x = 1', b: 'x = 2'}, timeout: 1m, into: s, capture: {z: [y]}}":
            "capture names parts that are not in `parts`: z",
        "aggregate: {id: a, aggs: {n: count()}, into: s, store: elsewhere}": "store 'elsewhere' is not declared",
    }
    for step, expected in cases.items():
        text = f"version: 1\npipelines:\n  - id: p\n    steps:\n      - {step}\n"
        with pytest.raises(ConfigError) as info:
            load_text_plan(text, "p.yaml")
        assert expected in info.value.render(), (step, info.value.render())
        assert "p.yaml:5" in info.value.render()


def test_state_section_is_validated() -> None:
    with pytest.raises(ConfigError, match=r"state.default.type: a state store needs `type`"):
        load_text_plan("version: 1\nstate: {default: {type: mongo}}\npipelines: [{id: p}]\n", "p.yaml")
    with pytest.raises(ConfigError, match="unknown field 'file'"):
        load_text_plan("version: 1\nstate: {default: {type: sqlite, file: x}}\npipelines: [{id: p}]\n", "p.yaml")


def test_explain_shows_windows_and_stores() -> None:
    plan = load_text_plan(MIXED.replace("version: 1", "version: 1\nstate: {default: {type: sqlite}}"))
    text = plan.explain()
    assert "window per-minute: sliding 1m every 20s, watermark 5s, allowed lateness 5s" in text
    assert "total = sum(v)" in text
    assert "state store default: sqlite" in text


def _kill_minus_nine_run(tmp: Path, pipeline: Path, data: bytes, out: str) -> None:
    """Feed half the input through a pipe, wait for a commit past a quarter, kill -9, then rerun on the whole
    input: the rerun skips what was committed and replays the rest."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", "edgewise", "run", str(pipeline), "-", "--commit-interval", "0.05", "--batch-size",
           "50"]
    lines = data.splitlines(keepends=True)
    half = len(lines) // 2
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    assert proc.stdin is not None
    db = tmp / "state" / "edgewise.db"

    def committed() -> int:
        try:
            with contextlib.closing(sqlite3.connect(db)) as conn:
                row = conn.execute("SELECT value FROM kv WHERE key = 'source/stdin'").fetchone()
            return int(row[0]) if row else 0
        except sqlite3.OperationalError:
            return 0

    def feed(start: int, stop: int) -> None:
        proc.stdin.write(b"".join(lines[start:stop]))  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]

    # the run commits at a batch boundary once its commit interval has passed, so it commits only while input
    # arrives: feed a chunk at a time until a commit covers some of it, then the rest of the half (what it reads of
    # that after its last commit is what the kill loses and the rerun replays)
    fed = 0
    deadline = time.monotonic() + 60
    while committed() == 0:
        assert time.monotonic() < deadline, "the run never committed"
        if fed < half - 100:
            feed(fed, fed + 100)
            fed += 100
        with contextlib.suppress(AssertionError):
            wait_for(lambda: committed() > 0, timeout=0.2, what="a commit")
    feed(fed, half)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()
    assert proc.stderr is not None
    proc.stderr.close()
    rerun = subprocess.run(cmd, input=data, capture_output=True, env=env, timeout=120)
    assert rerun.returncode == 0, rerun.stderr.decode()
    assert b"resuming after" in rerun.stderr


def _sealed_records(directory: Path) -> dict[str, Any]:
    records: dict[str, Any] = {}
    for part in sorted(directory.glob("*.ndjson")):
        for line in part.read_bytes().splitlines():
            envelope = orjson.loads(line)
            records[envelope["id"]] = envelope["payload"]
    return records


@pytest.mark.slow
def test_kill_minus_nine_then_restart_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    pipeline_text = (ROOT / "tests" / "data" / "kill_pipeline.yaml").read_text()
    events = _events(3000, seed=3)
    data = b"".join(orjson.dumps(e) + b"\n" for e in events)
    for name in ("killed", "clean"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "pipeline.yaml").write_text(pipeline_text)
    _kill_minus_nine_run(tmp_path / "killed", tmp_path / "killed" / "pipeline.yaml", data, "out")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    clean = subprocess.run([sys.executable, "-m", "edgewise", "run", str(tmp_path / "clean" / "pipeline.yaml"), "-"],
                           input=data, capture_output=True, env=env, timeout=120)
    assert clean.returncode == 0, clean.stderr.decode()
    killed = _sealed_records(tmp_path / "killed" / "out")
    expected = _sealed_records(tmp_path / "clean" / "out")
    assert len(expected) > 1000
    assert killed.keys() == expected.keys()
    assert_records_equal(killed.values(), expected.values())


def test_a_later_run_after_a_finished_one_reads_all_of_its_input(tmp_path: Path) -> None:
    """Issue 13: with a persistent store, a second `edgewise run` on *different* stdin used to print "resuming
    after 2 events" and skip its first lines. Issue 39: so did one on stdin that *starts with* the finished run's
    lines: a finished run was taken for a crashed one. A run that read its input to the end forgets where it
    stopped in its last commit: every later run reads all of its input, the state kept (only a killed run resumes:
    test_kill_minus_nine_then_restart_equals_an_uninterrupted_run)."""
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("""
version: 1
state: {default: {type: sqlite, path: st.db}}
pipelines:
  - id: p
    steps:
      - aggregate: {id: running, aggs: {n: count(), total: sum(x)}, into: so_far}
""")

    def edgewise_run(lines: list[int]) -> tuple[list[Any], str]:
        data = b"".join(orjson.dumps({"x": x}) + b"\n" for x in lines)
        done = subprocess.run([sys.executable, "-m", "edgewise", "run", str(pipeline), "-"], input=data,
                              capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=60)
        assert done.returncode == 0, done.stderr
        return [orjson.loads(line) for line in done.stdout.splitlines()], done.stderr.decode()

    first, _ = edgewise_run([1, 2])
    assert [r["so_far"] for r in first] == [{"n": 1, "total": 1}, {"n": 2, "total": 3}]
    other, err = edgewise_run([10, 20, 30])  # other input: every line counts, on top of the kept state
    assert [r["x"] for r in other] == [10, 20, 30]
    assert other[-1]["so_far"] == {"n": 5, "total": 63}
    assert "resuming" not in err
    again, err = edgewise_run([10, 20, 30, 40])  # the finished run's input grown by one line: all of it runs
    assert [r["x"] for r in again] == [10, 20, 30, 40] and again[-1]["so_far"] == {"n": 9, "total": 163}
    assert "resuming" not in err and "reading it from its start" not in err
    shorter, err = edgewise_run([10])
    assert [r["x"] for r in shorter] == [10] and shorter[0]["so_far"] == {"n": 10, "total": 173}
    with sqlite3.connect(tmp_path / "st.db") as db:  # nothing of a finished run's position is left behind
        assert db.execute("SELECT count(*) FROM kv WHERE key LIKE 'source/%' OR key LIKE 'run/%' "
                          "OR key LIKE 'digest/%'").fetchone() == (0,)


def test_new_input_under_a_restored_run_gets_new_event_ids() -> None:
    from edgewise.engine.resume import ResumePoint
    from edgewise.events import Batch

    def batch(values: list[int], first: int) -> Batch:
        return Batch([{"x": v} for v in values], source="s", ingest_time_us=0, event_times=[0] * len(values),
                     id_prefix="s:run1:", offsets=range(first, first + len(values)))

    committed = ResumePoint(0, None)
    list(committed.batches([batch([1, 2], 1)]))
    same = ResumePoint(2, committed.digest.hex())
    assert [b.payloads for b in same.batches([batch([1], 1), batch([2, 3], 2)])] == [[{"x": 3}]] and same.resumed
    other = ResumePoint(2, committed.digest.hex())
    assert [p for b in other.batches([batch([1, 5], 1)]) for p in b.payloads] == [{"x": 1}, {"x": 5}]
    assert other.resumed is False
    renamed = batch([1], 1).renamed("s:run1:", "s:run2:")
    assert renamed.ids() == ["s:run2:1"]


def test_dedupe_remembers_every_kept_time_of_a_key_across_a_restart() -> None:
    """Out of order, a key can have several kept times the watermark has not passed (docs/state.md, dedupe):
    ``a@8, a@13`` are both kept and remembered, so ``a@10`` (2 s from ``a@8``) is a duplicate, after a crash
    between them as without one; ``a@30`` moves the watermark 5 s behind it to 25, past both times, so ``a@12``
    is kept again (not remembered), and so is ``a@27``, 3 s (not less) from ``a@30``."""
    plan = load_text_plan("""
version: 1
event_time: "timestamp_seconds(t)"
pipelines:
  - id: p
    steps: [{dedupe: {id: once, key: k, within: 3s, watermark: 5s}}]
""")
    events = [{"k": "a", "t": t} for t in (8, 13, 10, 30, 12, 27)]
    want = [{"k": "a", "t": t} for t in (8, 13, 30, 12, 27)]
    for crash_at in range(len(events) + 1):
        got = run(plan, [*events[:crash_at], CRASH, *events[crash_at:]], batch_size=1).outputs["p"]
        assert sorted(got, key=lambda e: e["t"]) == sorted(want, key=lambda e: e["t"]), crash_at
