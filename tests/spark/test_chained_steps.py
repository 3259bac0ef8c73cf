"""Chained stateful steps in one Spark query (issue 43, item 4): a dedupe or an aggregate before a window, each
checked against a plain computation written from docs/state.md, on Spark and on the local engine; the one
watermark Spark keeps per query, pinned as a difference; and the chains Spark cannot run, refused before it
starts."""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from edgewise.errors import ConfigError
from edgewise.testing import run_pipeline
from tests.spark.test_sources_and_sinks import _collecting

WITHIN = 20
"""The dedupe's ``within``, in seconds."""


def _pipeline(steps: str, sinks: str = "") -> str:
    return ("version: 1\nevent_time: \"timestamp_seconds(t)\"\nsources: [{id: spool, type: file, path: in}]\n"
            f"pipelines:\n  - id: p\n    steps:\n{steps}{sinks}")


DEDUPE_THEN_WINDOW = _pipeline(f"""\
      - dedupe: {{id: once, key: k, within: {WITHIN}s, watermark: 60s}}
      - window: {{id: per10, key: [g], tumbling: 10s, watermark: 60s, aggs: {{n: count(), s: sum(v)}}}}
""")

AGGREGATE_THEN_WINDOW = _pipeline("""\
      - aggregate: {id: running, key: [k], aggs: {seen: count(), total: sum(v)}, into: so_far}
      - window: {id: per10, key: [g], tumbling: 10s, watermark: 60s,
                 aggs: {n: count(), most_seen: max(so_far.seen), top: max(so_far.total)}}
""")


def _events(seed: int) -> list[dict[str, Any]]:
    """Events in event-time order (Spark takes a micro-batch's events by event time, the local engine by arrival:
    in order, both see the same order), a key's copies redelivered a few seconds later, some keys again much
    later (a new event, not a copy)."""
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    for i in range(40):
        t = rng.randrange(0, 90)
        k = f"k{rng.randrange(12)}"
        events.append({"t": t, "k": k, "g": rng.choice("xy"), "v": rng.randrange(-5, 50), "i": i})
        if rng.random() < 0.4:  # a redelivered copy
            events.append({**events[-1], "t": min(t + rng.randrange(0, 4), 99), "i": 100 + i})
    return sorted(events, key=lambda e: (e["t"], e["i"]))


def _write_spool(base: Path, events: list[dict[str, Any]], segments: int) -> None:
    spool = base / "in"
    spool.mkdir()
    size = -(-len(events) // segments)
    for n in range(segments):
        path = spool / f"part-{n}.ndjson"
        path.write_text("".join(json.dumps(e) + "\n" for e in events[n * size:(n + 1) * size]))
        os.utime(path, (1_000_000 + n, 1_000_000 + n))


def _kept_by_dedupe(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """docs/state.md: an event is dropped when its key was kept less than ``within`` of event time away."""
    kept: list[dict[str, Any]] = []
    kept_times: dict[str, list[int]] = {}
    for e in events:
        if any(abs(e["t"] - t) < WITHIN for t in kept_times.get(e["k"], [])):
            continue
        kept_times.setdefault(e["k"], []).append(e["t"])
        kept.append(e)
    return kept


def _window_counts(events: list[dict[str, Any]]) -> Counter[tuple[str, int, int, int]]:
    """(group, window start, count, sum of v) for 10 s tumbling windows."""
    groups: dict[tuple[str, int], list[int]] = {}
    for e in events:
        groups.setdefault((e["g"], e["t"] - e["t"] % 10), []).append(e["v"])
    return Counter((g, start, len(vs), sum(vs)) for (g, start), vs in groups.items())


def _start_s(start: Any) -> int:
    """A window start (ISO text from Spark's records, a datetime from the local engine's) in seconds."""
    if isinstance(start, str):
        start = datetime.fromisoformat(start)
    return int(start.timestamp())


def _local(text: str, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The local engine's results over the same events, in the same order."""
    return run_pipeline(text, events)["p"]


@pytest.mark.parametrize(("seed", "segments"), [(1, 1), (2, 4)])
def test_dedupe_then_window_runs_in_one_query(spark: Any, tmp_path: Path, seed: int, segments: int) -> None:
    events = _events(seed)
    _write_spool(tmp_path, events, segments)
    expected = _window_counts(_kept_by_dedupe(events))
    assert len(_kept_by_dedupe(events)) < len(events), "the input has copies for the dedupe to drop"
    got = _collecting(spark, DEDUPE_THEN_WINDOW, tmp_path, tmp_path / "ck", max_files_per_trigger=1)
    on_spark = Counter((r["g"], _start_s(r["window_start"]), r["n"], r["s"]) for _, r in got.get("", []))
    locally = Counter((r["g"], _start_s(r["window_start"]), r["n"], r["s"]) for r in _local(DEDUPE_THEN_WINDOW,
                                                                                             events))
    assert (on_spark, locally) == (expected, expected)


def _aggregate_then_window(events: list[dict[str, Any]]) -> Counter[tuple[str, int, int, int, int]]:
    """docs/state.md: each event leaves with its key's count and sum so far (itself included); the window then
    counts them and takes the largest of each."""
    seen: Counter[str] = Counter()
    total: Counter[str] = Counter()
    rows: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for e in events:
        seen[e["k"]] += 1
        total[e["k"]] += e["v"]
        rows.setdefault((e["g"], e["t"] - e["t"] % 10), []).append((seen[e["k"]], total[e["k"]]))
    return Counter((g, start, len(vs), max(s for s, _ in vs), max(t for _, t in vs))
                   for (g, start), vs in rows.items())


@pytest.mark.parametrize("segments", [1, 3])
def test_aggregate_then_window_runs_in_one_query(spark: Any, tmp_path: Path, segments: int) -> None:
    events = _events(7)
    _write_spool(tmp_path, events, segments)
    expected = _aggregate_then_window(events)
    got = _collecting(spark, AGGREGATE_THEN_WINDOW, tmp_path, tmp_path / "ck", max_files_per_trigger=1)

    def rows(records: list[dict[str, Any]]) -> Counter[tuple[str, int, int, int, int]]:
        return Counter((r["g"], _start_s(r["window_start"]), r["n"], r["most_seen"], r["top"]) for r in records)

    assert (rows([r for _, r in got.get("", [])]), rows(_local(AGGREGATE_THEN_WINDOW, events))) == (
        expected, expected)


SHORT_THEN_LONG = _pipeline("""\
      - dedupe: {id: once, key: k, within: 5s, watermark: 0s}
      - window: {id: per10, key: [], tumbling: 10s, watermark: 30s, late: late, aggs: {n: count()}}
""", sinks="sinks:\n  - {id: late, type: stdout}\n")


def test_pinned_difference_one_watermark_per_query(spark: Any, tmp_path: Path) -> None:
    """docs/spark.md, "Chained stateful steps": Spark keeps one watermark per query, the largest of its steps'
    (here the dedupe's, 0 s behind the latest time), where locally the window keeps its own (30 s behind). One
    event per micro-batch: t=1, t=25, then t=4. Locally the window's watermark is -5 s and t=4 counts in [0, 10);
    on Spark the watermark is 25 s and t=4 is late."""
    events = [{"t": 1, "k": "a"}, {"t": 25, "k": "b"}, {"t": 4, "k": "c"}]
    _write_spool(tmp_path, events, segments=3)
    got = _collecting(spark, SHORT_THEN_LONG, tmp_path, tmp_path / "ck", max_files_per_trigger=1)
    assert sorted((_start_s(r["window_start"]), r["n"]) for _, r in got[""]) == [(0, 1), (20, 1)]
    assert [r for _, r in got["late"]] == [{"t": 4, "k": "c"}]
    local = run_pipeline(SHORT_THEN_LONG, events)
    assert sorted((_start_s(r["window_start"]), r["n"]) for r in local["p"]) == [(0, 2), (20, 1)]
    assert local["sink:late"] == []


@pytest.mark.parametrize(("first", "word"), [
    ("window: {id: first, key: [g], tumbling: 10s, watermark: 5s, aggs: {n: count()}}", "its results"),
    ("complete: {id: first, key: k, time: event, watermark: 5s, timeout: 30s, into: st, "
     "parts: {a: \"p = 'a'\", b: \"p = 'b'\"}}", "its timeouts"),
])
def test_a_window_after_a_step_that_emits_behind_the_watermark_is_refused_before_spark_starts(
        tmp_path: Path, first: str, word: str) -> None:
    """No Spark session here: the chain is refused by the plan check, at the window's file and line."""
    from edgewise.config import load_text_plan
    from edgewise.engine.spark.sources import check_plan

    (tmp_path / "in").mkdir()
    text = _pipeline(f"      - {first}\n      - window: {{id: second, key: [], tumbling: 20s, watermark: 0s, "
                     "aggs: {m: count()}}\n")
    plan = load_text_plan(text, file=str(tmp_path / "p.yaml"), base_dir=str(tmp_path))
    with pytest.raises(ConfigError) as caught:
        check_plan(plan)
    message = str(caught.value)
    assert "p.yaml:8:" in message and "pipelines[0].steps[1].window" in message
    assert f"step second: on Spark a window cannot follow {first.split(':')[0]} first: {word}" in message


def test_a_dedupe_or_complete_after_a_window_is_accepted(tmp_path: Path) -> None:
    from edgewise.config import load_text_plan
    from edgewise.engine.spark.sources import check_plan

    (tmp_path / "in").mkdir()
    text = _pipeline("      - window: {id: w, key: [g], tumbling: 10s, watermark: 5s, aggs: {n: count()}}\n"
                     "      - dedupe: {id: d, key: g, within: 1m, watermark: 0s}\n"
                     "      - complete: {id: c, key: g, time: event, watermark: 0s, timeout: 30s, into: st, "
                     "parts: {big: \"n > 1\", small: \"n <= 1\"}}\n")
    check_plan(load_text_plan(text, file=str(tmp_path / "p.yaml"), base_dir=str(tmp_path)))


def _times_and_status(records: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """(t, completion status) of each record, sorted: a timeout record has no t (-1), an event no status ('')."""
    return sorted((r.get("t", -1), (r.get("done") or {}).get("status", "")) for r in records)


def _complete_then_dedupe(timeout: int, within: int) -> str:
    """A completion of key k (no watermark delay) then a dedupe by s, which timeouts (no s) share as '-'."""
    return _pipeline(f"""\
      - complete: {{id: joined, key: k, timeout: {timeout}s, watermark: 0s, into: done,
                   parts: {{pos: "x > 0", neg: "x <= 0"}}}}
      - dedupe: {{id: once, key: "coalesce(s, '-')", within: {within}s, watermark: 0s}}
""")


COMPLETE_THEN_DEDUPE = _complete_then_dedupe(timeout=5, within=3)


def test_a_timeout_that_comes_behind_the_watermark_meets_what_the_dedupe_kept_around_its_time(
        spark: Any, tmp_path: Path) -> None:
    """Worked by hand from docs/state.md: t=0 opens key a's completion (deadline 5 s), t=4 (no s) is kept under
    '-'; in the next micro-batch t=30 moves time past the deadline. Locally the timeout (event time 5, no s: key
    '-') comes out before t=30 and meets '-'@4, 1 s away: a duplicate. On Spark it comes out a micro-batch later,
    when the watermark (30) has passed 4 + 3: it must still meet '-'@4 (found by the fuzzer:
    tests/fuzz/cases/a-completion-timeout-before-a-dedupe.yaml)."""
    events = [{"t": 0, "k": "a", "x": 1, "s": "p"}, {"t": 4}, {"t": 30, "s": "q"}]
    _write_spool(tmp_path, events, segments=2)  # t=0 and t=4, then t=30
    got = _collecting(spark, COMPLETE_THEN_DEDUPE, tmp_path, tmp_path / "ck", max_files_per_trigger=1)
    expected = [(0, "triggered"), (4, ""), (30, "")]
    assert _times_and_status([r for _, r in got[""]]) == expected
    assert _times_and_status(_local(COMPLETE_THEN_DEDUPE, events)) == expected


LATE_DEDUPE = _pipeline("      - dedupe: {id: once, key: k, within: 3s, watermark: 0s}\n")


def test_a_late_event_of_a_later_micro_batch_meets_only_what_the_watermark_left(spark: Any, tmp_path: Path) -> None:
    """docs/state.md: a kept time is forgotten when the watermark is ``within`` past it. a@10, then a@20 (the
    watermark 20 passes 10 + 3), then a@11, each in a micro-batch of its own: a@10 is forgotten, so the late
    a@11 is kept, on both engines (the rows an earlier step makes behind the watermark, above, meet more: only
    they go before the micro-batch's watermark forgets)."""
    events = [{"t": 10, "k": "a"}, {"t": 20, "k": "a"}, {"t": 11, "k": "a"}]
    _write_spool(tmp_path, events, segments=3)
    got = _collecting(spark, LATE_DEDUPE, tmp_path, tmp_path / "ck", max_files_per_trigger=1)
    assert (sorted(r["t"] for _, r in got[""]), sorted(r["t"] for r in _local(LATE_DEDUPE, events))) == (
        [10, 11, 20], [10, 11, 20])


PROMPT_COMPLETE_THEN_DEDUPE = _complete_then_dedupe(timeout=2, within=5)


def test_pinned_difference_a_timeout_meets_a_later_step_after_the_events_that_moved_time_past_it(
        spark: Any, tmp_path: Path) -> None:
    """docs/spark.md, Known differences, "Timeouts": t=0 opens key a's completion (deadline 2 s); t=3 (no k, no s)
    in the next micro-batch moves time past it. Locally the timeout (event time 2, key '-' for the dedupe) comes
    out before t=3 and is kept, and t=3 is its duplicate; on Spark the timeout comes a micro-batch after t=3, which
    is kept, and the timeout is the duplicate."""
    events = [{"t": 0, "k": "a", "x": 1, "s": "p"}, {"t": 3}]
    _write_spool(tmp_path, events, segments=2)
    got = _collecting(spark, PROMPT_COMPLETE_THEN_DEDUPE, tmp_path, tmp_path / "ck", max_files_per_trigger=1)
    assert _times_and_status([r for _, r in got[""]]) == [(0, "triggered"), (3, "")]
    assert _times_and_status(_local(PROMPT_COMPLETE_THEN_DEDUPE, events)) == [(-1, "timed_out"), (0, "triggered")]
