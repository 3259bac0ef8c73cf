"""`complete` on Spark beyond the conformance fixtures: processing-time timers on Spark's own clock, and a key
that fails to evaluate going to the dead-letter sink instead of failing the micro-batch."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.helpers import wait_for
from tests.spark.test_sources_and_sinks import _collecting

LONGEST_TIMEOUT_S = 2
"""The timeout the GitHub example's completions get here (1 h in the shipped file)."""

def _spool_pipeline(steps: str, *, event_time: bool = True, sinks: str = "") -> str:
    """A one-pipeline file (`p`) reading the spool `in`, with the given steps (YAML list items)."""
    head = 'event_time: "timestamp_seconds(t)"\n' if event_time else ""
    return (f"version: 1\n{head}sources: [{{id: spool, type: file, path: in}}]\npipelines:\n  - id: p\n"
            f"    steps:\n{steps}{sinks}")


def _segment(spool: Path, n: int, events: list[dict[str, Any]]) -> None:
    path = spool / f"part-{n}.ndjson"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    os.utime(path, (1_000_000 + n, 1_000_000 + n))


def test_processing_time_completion_times_out_on_sparks_clock(spark: Any, tmp_path: Path) -> None:
    spool = tmp_path / "in"
    spool.mkdir()
    text = _spool_pipeline("""\
      - complete:
          id: paid
          key: order_id
          parts: {ordered: "kind = 'order'", paid: "kind = 'payment'"}
          timeout: 1s
          time: processing
          into: progress
""", event_time=False)
    _segment(spool, 1, [{"kind": "order", "order_id": 7}, {"kind": "order", "order_id": 8}])
    first = _collecting(spark, text, tmp_path, tmp_path / "ck")
    processed_by = time.time()
    assert sorted(r["progress"]["status"] for _, r in first[""]) == ["triggered", "triggered"]
    # past the deadline (1 s of processing time after the events ran): the next micro-batch's timers fire, for keys
    # without new events too
    wait_for(lambda: time.time() > processed_by + 1, what="the processing-time deadline")
    _segment(spool, 2, [{"kind": "payment", "order_id": 8}])
    second = _collecting(spark, text, tmp_path, tmp_path / "ck")
    got = sorted((r["progress"]["key"], r["progress"]["status"], r["progress"]["seen"]) for _, r in second[""])
    assert got == [(7, "timed_out", ["ordered"]), (8, "timed_out", ["ordered"]), (8, "triggered", ["paid"])]


def test_a_key_that_fails_goes_to_the_dead_letter_sink(spark: Any, tmp_path: Path) -> None:
    spool = tmp_path / "in"
    spool.mkdir()
    text = _spool_pipeline("""\
      - complete:
          id: pair
          key: "cast(code AS BIGINT)"
          parts: {a: "kind = 'a'", b: "kind = 'b'"}
          timeout: 1m
          into: pairing
          on_error: dead
""", sinks="sinks: [{id: dead, type: stdout}]\n")
    _segment(spool, 1, [{"kind": "a", "code": "12", "t": 1}, {"kind": "a", "code": "x", "t": 2},
                        {"kind": "b", "code": "12", "t": 3}])
    got = _collecting(spark, text, tmp_path, tmp_path / "ck")
    assert sorted(r["pairing"]["status"] for _, r in got[""]) == ["completed", "triggered"]
    [(_, letter)] = got["dead"]
    assert letter["event"] == {"kind": "a", "code": "x", "t": 2} and letter["step"] == "pair"


def test_github_example_joins_the_same_completions_on_spark(spark: Any, tmp_path: Path) -> None:
    """The shipped GitHub example over the real Octokit payloads, from a spool: the completions the data implies
    (an independent walk, tests/test_github_completion.py), then the open ones time out on Spark's clock."""
    from collections import Counter

    from edgewise.config import load_text_plan
    from edgewise.engine.spark.job import SparkJob, SparkOptions
    from tests.conftest import ROOT
    from tests.test_github_completion import CHECKS, deliveries, expected_outcomes

    text = (ROOT / "examples" / "github" / "pipeline.yaml").read_text()
    text = text.replace("type: http, signature: github, secret_env: GITHUB_WEBHOOK_SECRET", "type: file, path: in")
    text = text.replace("timeout: 1h", f"timeout: {LONGEST_TIMEOUT_S}s")
    plan = load_text_plan(text, file=str(tmp_path / "pipeline.yaml"), base_dir=str(tmp_path))
    spool = tmp_path / "in"
    spool.mkdir()
    items = deliveries()
    _segment(spool, 1, items)
    got: dict[str, list[dict[str, Any]]] = {}

    def collect(route: str, batch_id: int, rows: list[tuple[str, str]]) -> None:
        got.setdefault(route, []).extend(json.loads(r) for _, r in rows)

    def run_pipeline(pipeline: str) -> list[dict[str, Any]]:
        got.clear()
        SparkJob(spark, plan, SparkOptions(checkpoint=str(tmp_path / "ck"), once=True), collect=collect,
                 pipelines=[pipeline], report=lambda text: None).run()
        return got.get("", [])

    cases = {"push-to-ci": ("ci", {"pushed": {"push"}, "checked": CHECKS}),
             "ci-to-deploy": ("shipping", {"checked": CHECKS, "deployed": {"deployment", "deployment_status"}})}
    first = {pipeline: run_pipeline(pipeline) for pipeline in cases}
    processed_by = time.time()
    # past every deadline (the longest timeout after the events ran): a later micro-batch fires the timers
    wait_for(lambda: time.time() > processed_by + LONGEST_TIMEOUT_S, what="every processing-time deadline")
    _segment(spool, 2, [{"event": "ping", "body": {}}])  # a micro-batch to run in (joins nothing)
    for pipeline, (field, parts) in cases.items():
        records = first[pipeline] + run_pipeline(pipeline)
        outcomes = Counter((r[field]["key"], r[field]["status"], ",".join(sorted(r[field]["seen"])))
                           for r in records)
        expected = expected_outcomes(items, parts)
        assert outcomes == expected, pipeline
        assert any(status == "completed" for _, status, _ in expected)


def test_keyed_state_before_a_window_runs_once(spark: Any, tmp_path: Path) -> None:
    """The window's routed rows (malformed lines, the end-of-input marker) are read from the input when no step
    before the window can route: Spark then plans the `complete` once, not once per branch of the window."""
    spool = tmp_path / "in"
    spool.mkdir()
    _segment(spool, 1, [{"kind": "a", "k": 1, "t": 0}, {"kind": "b", "k": 1, "t": 10}, {"kind": "a", "k": 2, "t": 20}])
    (spool / "part-2.ndjson").write_text("not json\n")
    steps = """\
      - complete: {id: c, key: k, parts: {a: "kind = 'a'", b: "kind = 'b'"}, timeout: 1h, time: processing, into: st}
      - window: {id: w, key: [st.status], tumbling: 1h, aggs: {n: count()}}
"""
    assert _operators(spark, tmp_path, steps, tmp_path / "ck") == ["TransformWithStateInPySpark"]
    text = _spool_pipeline(steps)
    got = _collecting(spark, text, tmp_path, tmp_path / "ck2")
    assert sorted((r["status"], r["n"]) for _, r in got[""]) == [("completed", 1), ("triggered", 2)]
    assert len(got["_reports"]) == 1 and "1 malformed input records skipped" in got["_reports"][0]


def test_an_aggregate_dead_letter_is_dated_by_the_clock(spark: Any, tmp_path: Path) -> None:
    """Without timers Spark gives the processor no micro-batch time (-1): the system clock dates dead letters."""
    import datetime as dt

    spool = tmp_path / "in"
    spool.mkdir()
    _segment(spool, 1, [{"k": 1, "v": "2"}, {"k": 1, "v": "x"}])
    text = _spool_pipeline("""\
      - aggregate: {id: running, key: [k], into: so_far, aggs: {total: "sum(cast(v AS BIGINT))"}, on_error: dead}
""", event_time=False, sinks="sinks: [{id: dead, type: stdout}]\n")
    got = _collecting(spark, text, tmp_path, tmp_path / "ck")
    [(_, letter)] = got["dead"]
    assert letter["event"] == {"k": 1, "v": "x"}
    failed_at = dt.datetime.fromisoformat(letter["failed_at"].replace("Z", "+00:00"))
    assert abs((dt.datetime.now(dt.UTC) - failed_at).total_seconds()) < 600


def test_a_new_checkpoint_pins_its_buckets_and_one_keyed_per_key_is_refused(spark: Any, tmp_path: Path) -> None:
    from edgewise.config import load_text_plan
    from edgewise.engine.spark.job import LAYOUT_FILE, TYPES_FILE, SparkJob, SparkOptions
    from edgewise.errors import ConfigError

    (tmp_path / "in").mkdir()
    text = _spool_pipeline("      - dedupe: {id: once, key: k, within: 1m}\n")
    plan = load_text_plan(text, file=str(tmp_path / "pipeline.yaml"), base_dir=str(tmp_path))
    SparkJob(spark, plan, SparkOptions(checkpoint=str(tmp_path / "ck"), once=True))
    pinned = json.loads((tmp_path / "ck" / LAYOUT_FILE).read_text())
    # 4 per shuffle partition (the test session runs 2), at least 8; a lone keyed step in applyInPandasWithState
    assert pinned == {"keyed_buckets": 8, "keyed_operator": "applyInPandasWithState"}
    # a checkpoint an earlier edgewise started (types, offsets, no layout) kept its keyed state per key
    old = tmp_path / "old"
    (old / "p" / "offsets").mkdir(parents=True)
    (old / TYPES_FILE).write_text("{}")
    with pytest.raises(ConfigError, match=r"keeps the state of its keyed steps per key.*Start a new checkpoint"):
        SparkJob(spark, plan, SparkOptions(checkpoint=str(old), once=True))
    assert not (old / LAYOUT_FILE).exists()


def test_a_bucket_of_events_from_two_sources_keeps_each_events_source(spark: Any, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A bucket's events, in event-time order, alternate between the sources; a local batch holds one source's."""
    from edgewise.cli import main

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        _segment(tmp_path / name, 1, [{"k": i % 5, "t": 2 * i + (name == "b")} for i in range(12)])
    (tmp_path / "p.yaml").write_text("""\
version: 1
event_time: "timestamp_seconds(t)"
sources: [{id: a, type: file, path: a}, {id: b, type: file, path: b}]
pipelines:
  - id: p
    steps: [{aggregate: {id: n, key: [k], aggs: {n: count()}, into: so_far}}]
    to: [out]
sinks: [{id: out, type: file, path: out, envelope: true}]
""")
    assert main(["spark", str(tmp_path / "p.yaml"), "--checkpoint", str(tmp_path / "ck"), "--once"]) == 0
    lines = [json.loads(line) for p in sorted((tmp_path / "out").glob("*.ndjson")) for line in p.read_text().split()]
    assert len(lines) == 24
    assert all(e["source"] == e["id"].split(":")[0] for e in lines), lines
    # each key's running count over both sources, in event-time order
    by_key: dict[int, list[tuple[int, int]]] = {}
    for e in lines:
        by_key.setdefault(e["payload"]["k"], []).append((e["payload"]["t"], e["payload"]["so_far"]["n"]))
    for key, seen in by_key.items():
        assert [n for _, n in sorted(seen)] == list(range(1, len(seen) + 1)), key
    capsys.readouterr()


def _operators(spark: Any, tmp_path: Path, steps: str, checkpoint: Path) -> list[str]:
    """The keyed operators of the plan's one query, as Spark's explain names them."""
    import re

    from edgewise.config import load_text_plan
    from edgewise.engine.spark.job import SparkJob, SparkOptions

    (tmp_path / "in").mkdir(exist_ok=True)
    plan = load_text_plan(_spool_pipeline(steps), file=str(tmp_path / "pipeline.yaml"), base_dir=str(tmp_path))
    job = SparkJob(spark, plan, SparkOptions(checkpoint=str(checkpoint), once=True), report=lambda text: None)
    return re.findall(r"^\(\d+\) (FlatMapGroupsInPandasWithState|TransformWithStateInPySpark)", job.explain(),
                      re.MULTILINE)


def test_a_lone_keyed_step_runs_in_apply_in_pandas_with_state_and_chained_ones_in_transform_with_state(
        spark: Any, tmp_path: Path) -> None:
    """applyInPandasWithState is the cheaper (BENCHMARKS.md); Spark refuses it beside another stateful operator, and
    a checkpoint started before it keeps the operator whose state it holds."""
    from edgewise.engine.spark.job import LAYOUT_FILE

    lone_dedupe = "      - dedupe: {id: once, key: k, within: 1m, watermark: 5s}\n"
    lone_aggregate = "      - aggregate: {id: n, key: [k], aggs: {n: count()}, into: so_far}\n"
    assert _operators(spark, tmp_path, lone_dedupe, tmp_path / "a") == ["FlatMapGroupsInPandasWithState"]
    assert _operators(spark, tmp_path, lone_aggregate, tmp_path / "b") == ["FlatMapGroupsInPandasWithState"]
    complete = ("      - complete: {id: c, key: k, parts: {a: \"kind = 'a'\", b: \"kind = 'b'\"}, timeout: 1m, "
                "into: st}\n")
    assert _operators(spark, tmp_path, complete, tmp_path / "c") == ["FlatMapGroupsInPandasWithState"]
    chained = lone_dedupe + "      - window: {id: w, key: [k], tumbling: 1m, aggs: {n: count()}}\n"
    assert _operators(spark, tmp_path, chained, tmp_path / "d") == ["TransformWithStateInPySpark"]
    two = lone_dedupe + lone_aggregate
    assert _operators(spark, tmp_path, two, tmp_path / "e") == ["TransformWithStateInPySpark"] * 2
    # a checkpoint an earlier edgewise started with its buckets, before the keyed operator was pinned
    old = tmp_path / "old"
    old.mkdir()
    (old / LAYOUT_FILE).write_text('{"keyed_buckets": 8}')
    assert _operators(spark, tmp_path, lone_dedupe, old) == ["TransformWithStateInPySpark"]
    assert json.loads((old / LAYOUT_FILE).read_text()) == {"keyed_buckets": 8}


@pytest.mark.parametrize("operator", ["applyInPandasWithState", "transformWithStateInPandas"])
def test_a_dedupe_passes_on_events_behind_the_watermark(spark: Any, tmp_path: Path, operator: str) -> None:
    """Worked by hand, from docs/state.md: an event the watermark has passed is not dropped by a dedupe; it is
    compared with what the dedupe still remembers and, kept, passed on unremembered. Spark's operators drop rows
    behind the watermark where they see its column with an event-time timeout: neither keyed operator may. (Both
    remembered the late q@50, and so dropped q@55, before the step took the micro-batch's watermark as its own
    for what it remembers; the local engine keeps q@55.)"""
    from edgewise.engine.spark.job import LAYOUT_FILE

    spool = tmp_path / "in"
    spool.mkdir()
    checkpoint = tmp_path / "ck"
    checkpoint.mkdir()
    layout = {"keyed_buckets": 8, **({"keyed_operator": operator} if operator == "applyInPandasWithState" else {})}
    (checkpoint / LAYOUT_FILE).write_text(json.dumps(layout))
    _segment(spool, 1, [{"k": "a", "t": 100, "n": 1}, {"k": "z", "t": 200, "n": 2}])  # watermark 195 after it
    _segment(spool, 2, [{"k": "a", "t": 101, "n": 3},  # a@100 forgotten (110 <= 195): kept, late
                        {"k": "q", "t": 50, "n": 4},   # a new key, late: kept
                        {"k": "z", "t": 193, "n": 5},  # 7 s from z@200, remembered: a duplicate
                        {"k": "q", "t": 55, "n": 6}])  # q@50 was not remembered (the watermark was past 60): kept
    steps = "      - dedupe: {id: once, key: k, within: 10s, watermark: 5s}\n"
    named = {"applyInPandasWithState": "FlatMapGroupsInPandasWithState",
             "transformWithStateInPandas": "TransformWithStateInPySpark"}
    assert _operators(spark, tmp_path, steps, checkpoint) == [named[operator]]
    got = _collecting(spark, _spool_pipeline(steps), tmp_path, checkpoint, max_files_per_trigger=1)
    assert sorted(r["n"] for _, r in got[""]) == [1, 2, 3, 4, 6]
