"""A plain batch computation over the bundled HSL recordings, independent of edgewise: the oracle for the
showcase (examples/hsl/live.yaml) and its map."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from datetime import UTC, datetime
from typing import NamedTuple

from tests.conftest import ROOT

WINDOW_S = 30


class Position(NamedTuple):
    vehicle: str
    t: float  # event time (tst), epoch seconds
    lat: float
    long: float


def tile(lat: float, lon: float, zoom: int) -> str:
    """The slippy-map tile of a point (the OpenStreetMap formula), computed here independently of geo_cell."""
    n = 2 ** zoom
    return (f"{zoom}/{int((lon + 180) / 360 * n)}/"
            f"{int((1 - math.asinh(math.tan(math.radians(lat))) / math.pi) / 2 * n)}")


def positions() -> list[Position]:
    """Every vehicle position (VP with lat, long and tst) of the recordings' distinct lines."""
    lines = {line for f in sorted((ROOT / "data" / "hsl-hfp-apc-dumps").glob("*/hfp.dump"))
             for line in f.read_text().splitlines() if line.strip()}
    found = []
    for line in lines:
        topic, body = line.split(" ", 1)[1].split(" {", 1)  # a topic may hold spaces ("Tikkurila as.")
        (kind, fields), = json.loads("{" + body).items()
        if kind != "VP" or fields.get("lat") is None or fields.get("long") is None or fields.get("tst") is None:
            continue
        parts = topic.split("/")  # /hfp/v2/journey/<temporal>/vp/<mode>/<operator>/<vehicle>/...
        t = datetime.fromisoformat(fields["tst"].replace("Z", "+00:00")).timestamp()
        found.append(Position(f"{parts[7]}/{parts[8]}", t, fields["lat"], fields["long"]))
    return found


def cells(found: list[Position]) -> dict[tuple[str, str], tuple[int, int]]:
    """(cell, window start) -> (distinct vehicles, positions) per 30 s window and zoom-14 cell."""
    vehicles: dict[tuple[str, str], set[str]] = defaultdict(set)
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for p in found:
        start = datetime.fromtimestamp(math.floor(p.t / WINDOW_S) * WINDOW_S, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        key = (tile(p.lat, p.long, 14), start)
        vehicles[key].add(p.vehicle)
        counts[key] += 1
    return {k: (len(vehicles[k]), counts[k]) for k in vehicles}
