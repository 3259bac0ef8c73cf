"""`--once` ends the input without extra micro-batches (issue 17): where the sources are read in one micro-batch,
the end-of-input marker is read with the data and the next micro-batch (without data) gives every result. Counted
by Spark's own commit log, not by timing; the results are the local engine's."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from edgewise.config import load_text_plan
from edgewise.engine.local import LocalEngine
from edgewise.testing import FakeClock, ListSink
from tests.fuzz.oracles import canonical
from tests.spark.test_messy_input import SPOOL_EVENT_TIME
from tests.spark.test_sources_and_sinks import _collecting, _segment

WINDOWED = SPOOL_EVENT_TIME + """
      - window: {id: w, key: [k], tumbling: 10s, watermark: 5s, aggs: {n: count(), s: sum(x)}}
"""
KEYED = SPOOL_EVENT_TIME + """
      - complete: {id: c, key: k, parts: {a: "x = 1", b: "x = 2"}, timeout: 10s, into: progress}
"""


def _micro_batches(checkpoint: Path) -> list[int]:
    commits = checkpoint / "p" / "commits"
    return sorted(int(name) for name in os.listdir(commits) if name.isdigit())


def _local(text: str, base: Path) -> list[Any]:
    from edgewise.config import BuildContext

    plan = load_text_plan(text, file=str(base / "pipeline.yaml"), base_dir=str(base))
    sink = ListSink()
    LocalEngine(plan, clock=FakeClock(0), sinks={"<stdout>": sink}).run(
        [plan.source_classes[s.id](s, BuildContext(str(base))) for s in plan.sources])
    return sorted(canonical(r) for r in sink.records)


@pytest.mark.parametrize("text", [WINDOWED, KEYED], ids=["window", "event-time complete"])
def test_once_runs_one_micro_batch_beyond_the_data(spark: Any, tmp_path: Path, text: str) -> None:
    spool = tmp_path / "in"
    spool.mkdir()
    events = [{"k": k, "t": t, "x": x} for k, t, x in
              [("a", 1, 1), ("b", 2, 2), ("a", 12, 2), ("b", 25, 1), ("a", 40, 1)]]
    _segment(spool, 1, [json.dumps(e) for e in events[:3]])
    _segment(spool, 2, [json.dumps(e) for e in events[3:]])
    got = _collecting(spark, text, tmp_path, tmp_path / "ck")
    remote = sorted(canonical(r) for _, r in got.get("", []))
    assert remote == _local(text, tmp_path)
    assert len(remote) >= 3  # windows and completions closed by the end of input, not only by later data
    assert _micro_batches(tmp_path / "ck") == [0, 1]  # the data (and the marker), then one without data


FIRST = [("a", 1, 1), ("b", 2, 2), ("a", 12, 2), ("b", 14, 1), ("a", 26, 1)]
"""``(k, t, x)`` events of a first run: its watermark (21) closes the windows [0, 10) and [10, 20)."""
LATER = [("b", 22, 2), ("a", 24, 1), ("b", 41, 1)]
"""Events of a later run, in the windows the first run left open."""


def _spool_events(spool: Path, n: int, events: list[tuple[str, int, int]]) -> None:
    _segment(spool, n, [json.dumps({"k": k, "t": t, "x": x}) for k, t, x in events])


@pytest.mark.parametrize("text", [WINDOWED, KEYED], ids=["window", "event-time complete"])
def test_keep_open_leaves_open_state_to_the_next_run_and_loses_nothing(spark: Any, tmp_path: Path, text: str) -> None:
    """``--once --keep-open`` run periodically on a growing spool: each run gives what its data's watermark
    closes, the open state waits in the checkpoint, and the runs together give exactly what one run over all the
    input gives locally (a last run without --keep-open closes the rest). A flushing first run would have made the
    second run's events late."""
    spool = tmp_path / "in"
    spool.mkdir()
    _spool_events(spool, 1, FIRST)
    run1 = _collecting(spark, text, tmp_path, tmp_path / "ck", flush=False)
    early = sorted(canonical(r) for _, r in run1.get("", []))
    _spool_events(spool, 2, LATER)
    run2 = _collecting(spark, text, tmp_path, tmp_path / "ck", flush=False)
    run3 = _collecting(spark, text, tmp_path, tmp_path / "ck")  # the input is complete: close the rest
    rest = sorted(canonical(r) for _, r in run2.get("", []) + run3.get("", []))
    everything = _local(text, tmp_path)
    assert sorted(early + rest) == everything
    assert early and rest  # each run gave some results: the first only what its watermark closed


CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


@pytest.mark.parametrize("text", [WINDOWED, KEYED], ids=["window", "event-time complete"])
def test_a_checkpoint_written_with_snapshot_commits_continues_with_changelog_commits(spark: Any, tmp_path: Path,
                                                                                    text: str) -> None:
    """edgewise's session commits RocksDB state as changelogs; checkpoints of earlier versions hold snapshots. A
    job started the old way leaves open state (``--keep-open``), and the next run, the new way, continues it:
    together they give what one local run over all the input gives."""
    assert spark.conf.get(CHANGELOG) == "true"
    spool = tmp_path / "in"
    spool.mkdir()
    _spool_events(spool, 1, FIRST)
    spark.conf.set(CHANGELOG, "false")
    try:
        run1 = _collecting(spark, text, tmp_path, tmp_path / "ck", flush=False)
    finally:
        spark.conf.set(CHANGELOG, "true")
    state = {path.name for path in (tmp_path / "ck").rglob("*") if path.suffix in (".zip", ".changelog")}
    assert state and all(name.endswith(".zip") for name in state), state  # the first run wrote snapshots
    _spool_events(spool, 2, LATER)
    run2 = _collecting(spark, text, tmp_path, tmp_path / "ck")
    assert any(path.suffix == ".changelog" for path in (tmp_path / "ck").rglob("*"))  # the second, changelogs
    got = sorted(canonical(r) for _, r in run1.get("", []) + run2.get("", []))
    assert got == _local(text, tmp_path)
