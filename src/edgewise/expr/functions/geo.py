"""Geographic functions.

``geo_cell(lat, lon, resolution)`` names the Web Mercator map tile (the "slippy map" z/x/y scheme used by
OpenStreetMap) that contains a point, at zoom level ``resolution`` (0 to 30). A tile at zoom 14 is about 1.2 km
wide in Helsinki. The formula uses only native SQL math, so Spark computes the same cell without a Python UDF.
"""

from __future__ import annotations

import math
from typing import Any

from edgewise.errors import EvalError
from edgewise.expr import values as V
from edgewise.expr.functions.base import FunctionTable

table = FunctionTable("geo")

MAX_LAT = 85.0511287798066


def tile_xy(lat: float, lon: float, zoom: int) -> tuple[int, int]:
    n = 2**zoom
    lat = max(-MAX_LAT, min(MAX_LAT, lat))
    x = math.floor((lon + 180.0) / 360.0 * n)
    lat_rad = math.radians(lat)
    y = math.floor((1.0 - math.log(math.tan(lat_rad) + 1.0 / math.cos(lat_rad)) / math.pi) / 2.0 * n)
    return min(max(x, 0), n - 1), min(max(y, 0), n - 1)


def spark_sql(lat: str, lon: str, zoom: str) -> str:
    """``geo_cell`` as native Spark SQL over SQL argument texts: what the Spark engine emits (no Python UDF)."""
    n = f"pow(2, {zoom})"
    clamped = f"least(greatest({lat}, -{MAX_LAT}), {MAX_LAT})"
    x = f"floor(({lon} + 180.0) / 360.0 * {n})"
    y = f"floor((1.0 - ln(tan(radians({clamped})) + 1.0 / cos(radians({clamped}))) / pi()) / 2.0 * {n})"

    def bounded(v: str) -> str:
        return f"CAST(least(greatest({v}, 0), {n} - 1) AS BIGINT)"

    cell = f"concat(CAST({zoom} AS STRING), '/', {bounded(x)}, '/', {bounded(y)})"
    # least/greatest skip NULLs in Spark; geo_cell must give NULL for a NULL argument like every function
    return f"CASE WHEN ({lat}) IS NULL OR ({lon}) IS NULL OR ({zoom}) IS NULL THEN NULL ELSE {cell} END"


@table.fn("geo_cell", args=3)
def geo_cell(lat: Any, lon: Any, resolution: Any) -> str:
    """The map tile ``'zoom/x/y'`` that holds the point at (lat, lon), at zoom ``resolution`` (0-30)."""
    la, lo = V.to_double(V.numeric(lat, "geo_cell")), V.to_double(V.numeric(lon, "geo_cell"))
    z = V.to_long(resolution)
    assert la is not None and lo is not None and z is not None
    if not 0 <= z <= 30:
        raise EvalError("INVALID_PARAMETER_VALUE", f"geo_cell() resolution must be 0 to 30, found {z}")
    if math.isnan(la) or math.isnan(lo) or not (-90 <= la <= 90) or not (-180 <= lo <= 180):
        raise EvalError("INVALID_PARAMETER_VALUE", f"geo_cell(): ({la}, {lo}) is not a latitude and longitude")
    x, y = tile_xy(la, lo, z)
    return f"{z}/{x}/{y}"
