"""``CAST(x AS type)`` conversions, shared by CAST/TRY_CAST and the cast-like functions."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from edgewise.errors import ConfigError
from edgewise.expr import values as V
from edgewise.expr.timefmt import cast_to_date, cast_to_timestamp

_INT_RANGES = {
    "TINYINT": (-(2**7), 2**7 - 1),
    "SMALLINT": (-(2**15), 2**15 - 1),
    "INT": (-(2**31), 2**31 - 1),
    "BIGINT": (V.LONG_MIN, V.LONG_MAX),
}
_ALIASES = {"INTEGER": "INT", "LONG": "BIGINT", "BYTE": "TINYINT", "SHORT": "SMALLINT", "REAL": "FLOAT",
            "VARCHAR": "STRING", "CHAR": "STRING", "TEXT": "STRING", "TIMESTAMPTZ": "TIMESTAMP",
            "TIMESTAMP_LTZ": "TIMESTAMP", "TIMESTAMPLTZ": "TIMESTAMP", "DEC": "DECIMAL", "NUMERIC": "DECIMAL"}


def _to_binary(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    s = V.to_string(v)
    return None if s is None else s.encode("utf-8")


def cast_function(type_name: str, params: list[str], spelled: str) -> Callable[[Any], Any]:
    """The converter for a SQL type name; unknown types are a ``ConfigError`` at load time."""
    name = _ALIASES.get(type_name, type_name)
    if name in _INT_RANGES:
        lo, hi = _INT_RANGES[name]
        return lambda v: V.to_long(v, name, lo, hi)
    if name in ("DOUBLE", "FLOAT"):
        return V.to_double
    if name == "STRING":
        return V.to_string
    if name == "BOOLEAN":
        return V.to_boolean
    if name == "TIMESTAMP":
        return cast_to_timestamp
    if name == "DATE":
        return cast_to_date
    if name == "BINARY":
        return _to_binary
    if name == "DECIMAL":
        precision = int(params[0]) if params else 10
        scale = int(params[1]) if len(params) > 1 else 0
        return lambda v: V.to_decimal(v, precision, scale)
    raise ConfigError(f"CAST to {spelled} is not supported; supported types: STRING, BOOLEAN, TINYINT, SMALLINT, "
                      "INT, BIGINT, FLOAT, DOUBLE, DECIMAL(p,s), TIMESTAMP, DATE, BINARY")


def b64(v: bytes) -> str:
    return base64.b64encode(v).decode("ascii")
