"""Real data: HSL vehicle positions (bundled recordings, receive order, event time ``tst``) counted per vehicle per
1-minute tumbling window with a 60 s watermark, against a plain batch computation over the same lines."""

from __future__ import annotations

import io
import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from edgewise.clock import FakeClock
from edgewise.config import BuildContext, load
from edgewise.engine.local import LocalEngine
from edgewise.events import Batch
from edgewise.sources.file import FileSource, FileSourceConfig
from tests.conftest import ROOT

PIPELINE = ROOT / "examples" / "hsl" / "per-vehicle-minute.yaml"
RECORDINGS = sorted((ROOT / "data" / "hsl-hfp-apc-dumps").glob("*/hfp.dump"))

Key = tuple[str | None, str]  # (vehicle, minute start as ISO text)


def batch_counts(path: Path) -> Counter[Key]:
    """The oracle: read every line, keep VP messages with a tst, count them per (vehicle, minute)."""
    counts: Counter[Key] = Counter()
    for line in path.read_text().splitlines():
        message = json.loads(line[line.index(" {") + 1 :])  # topics may hold spaces ("Matinkylä (M)")
        (kind, payload), = message.items()
        if kind != "VP" or payload.get("tst") is None:
            continue
        tst = datetime.fromisoformat(payload["tst"].replace("Z", "+00:00"))
        minute = tst.replace(second=0, microsecond=0).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        oper, veh = payload.get("oper"), payload.get("veh")
        vehicle = None if oper is None or veh is None else f"{oper}/{veh}"  # SQL concat: NULL in, NULL out
        counts[(vehicle, minute)] += 1
    return counts


def streamed_counts(paths: list[Path]) -> tuple[Counter[Key], int, int]:
    """The pipeline over the files read one after another as one stream: counts, late events, malformed lines."""
    plan = load(str(PIPELINE))
    results: list[Batch] = []
    engine = LocalEngine(plan, clock=FakeClock(), stdout=io.BytesIO(), errors=io.StringIO(),
                         collect=lambda _, batch: results.append(batch))
    sources = [FileSource(FileSourceConfig(id=f"rec{i}", path=str(p), format="hfp"), BuildContext("."))
               for i, p in enumerate(paths)]
    stats = engine.run(sources)
    counts: Counter[Key] = Counter()
    for batch in results:
        for r in batch.payloads:
            key = (r["vehicle"], r["window_start"].strftime("%Y-%m-%dT%H:%M:%SZ"))
            assert key not in counts, f"window {key} emitted twice"
            counts[key] = r["positions"]
    return counts, stats.steps[("per-minute", "late")], stats.malformed


def test_every_recording_gives_the_batch_counts() -> None:
    assert len(RECORDINGS) >= 10
    total = 0
    for path in RECORDINGS:
        expected = batch_counts(path)
        counts, late, malformed = streamed_counts([path])
        assert malformed == 0, path
        assert late == 0, f"{path.parent.name}: the recording is within the 60 s watermark, nothing is late"
        assert counts == expected, path.parent.name
        total += sum(counts.values())
    assert total > 1000


def test_one_stream_of_all_recordings_accounts_for_every_position() -> None:
    """Read as one stream the recordings jump back in time from file to file, so whole files arrive after the
    watermark: those positions must be counted as late, none may be lost or counted twice, and no emitted window
    may hold more than the batch count."""
    expected: Counter[Key] = Counter()
    for path in RECORDINGS:
        expected.update(batch_counts(path))
    counts, late, _ = streamed_counts(RECORDINGS)
    assert late > 0
    assert sum(counts.values()) + late == sum(expected.values())
    for key, n in counts.items():
        assert n <= expected[key], key
