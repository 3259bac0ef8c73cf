"""Encode values (local or Spark's) in one typed JSON form, and compare two encodings.

tools/spark_expected.py uses ``encode`` on Spark's results; the tests use it on the local engine's.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any


def encode(v: Any) -> Any:
    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, int):
        return {"int": str(v)}
    if isinstance(v, float):
        return {"double": repr(v)}
    if isinstance(v, Decimal):
        return {"decimal": str(v)}
    if isinstance(v, datetime):
        return {"timestamp": v.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")}
    if isinstance(v, date):
        return {"date": v.isoformat()}
    if isinstance(v, bytes | bytearray):
        return {"binary": bytes(v).hex()}
    if hasattr(v, "asDict"):  # a Spark Row: a STRUCT
        return {"struct": {k: encode(x) for k, x in v.asDict(recursive=False).items()}}
    if isinstance(v, list):
        return [encode(x) for x in v]
    if isinstance(v, dict):
        return {"struct": {k: encode(x) for k, x in v.items()}}
    raise TypeError(type(v))


def same(expected: Any, actual: Any) -> bool:
    """Whether two encoded values agree: exact for everything but doubles (1e-12 relative) and decimals
    (numerically equal, whatever their scale)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        if expected.keys() != actual.keys():
            return False
        (kind,) = expected.keys()
        e, a = expected[kind], actual[kind]
        if kind == "double":
            fe, fa = float(e), float(a)
            if math.isnan(fe) or math.isnan(fa):
                return math.isnan(fe) and math.isnan(fa)
            return fe == fa or abs(fe - fa) <= 1e-12 * max(abs(fe), abs(fa))
        if kind == "decimal":
            return Decimal(e) == Decimal(a)
        if kind in ("struct", "map"):
            return e.keys() == a.keys() and all(same(e[k], a[k]) for k in e)
        return bool(e == a)
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(same(x, y) for x, y in zip(expected, actual, strict=True))
    return bool(expected == actual)
