"""A plain batch computation over the bundled Capital Metro day, independent of edgewise: the oracle for the
showcase's Austin cells (examples/austin/live.yaml: zoom-14 map cells, 5-minute tumbling windows)."""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from datetime import UTC, datetime

from tests.conftest import ROOT
from tests.hsl_oracle import tile

WINDOW_S = 5 * 60
RECORDING = ROOT / "data" / "capmetro-2016-11-25" / "vehicle_positions.csv"


def cells() -> dict[tuple[str, str], tuple[int, int]]:
    """(cell, window start) -> (distinct vehicles, positions), every row of the recording counted."""
    vehicles: dict[tuple[str, str], set[str]] = defaultdict(set)
    counts: dict[tuple[str, str], int] = defaultdict(int)
    with open(RECORDING, newline="") as f:
        for row in csv.DictReader(f):
            t = datetime.fromisoformat(row["timestamp"]).timestamp()
            start = datetime.fromtimestamp(math.floor(t / WINDOW_S) * WINDOW_S, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            key = (tile(float(row["latitude"]), float(row["longitude"]), 14), start)
            vehicles[key].add(row["vehicle_id"])
            counts[key] += 1
    return {k: (len(vehicles[k]), counts[k]) for k in vehicles}
