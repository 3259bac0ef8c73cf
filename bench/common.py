"""What the YSB benchmarks share: the input, the campaign table, a timer."""

from __future__ import annotations

import csv
import gc
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
YSB = ROOT / "examples" / "ysb"


def make_input(events: int) -> bytes:
    """``events`` YSB events (seed 1) as NDJSON, in memory: every implementation reads the same bytes."""
    from edgewise.sources.ysb import YsbWorkload

    return b"".join(orjson.dumps(e) + b"\n" for e in YsbWorkload(seed=1).events(events))


def campaign_table() -> dict[str, str]:
    with open(YSB / "campaigns.csv", newline="") as fh:
        return {row["ad_id"]: row["campaign_id"] for row in csv.DictReader(fh)}


def timed(fn: Any, *args: Any) -> tuple[float, Any]:
    """Seconds ``fn(*args)`` took (after a garbage collection, so one run does not pay for another), its result."""
    gc.collect()
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result


def ratio_stats(baseline_times: list[float], subject_times: list[float]) -> dict[str, float]:
    """Per-round ratios baseline time / subject time (above 1: the subject is faster): median, min and max."""
    import statistics

    ratios = [b / s for b, s in zip(baseline_times, subject_times, strict=True)]
    return {"ratio_median_of_rounds": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3)}


def write_result(path: str, result: dict[str, Any]) -> None:
    """Add where it ran, write the result as JSON and print it."""
    import json
    import os
    import platform

    result = {**result, "python": platform.python_version(), "machine": f"{platform.machine()}, {os.cpu_count()} cores"}
    Path(path).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
