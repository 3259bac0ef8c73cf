"""JSON in and out (orjson), with the value types expressions produce (DECIMAL, TIMESTAMP, BINARY)."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import orjson

loads = orjson.loads
JSONDecodeError = orjson.JSONDecodeError


def _default(value: Any) -> Any:
    if isinstance(value, Decimal):
        exponent = value.as_tuple().exponent
        return int(value) if isinstance(exponent, int) and exponent >= 0 else float(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"cannot write a {type(value).__name__} as JSON")


_OPTIONS = orjson.OPT_UTC_Z | orjson.OPT_NON_STR_KEYS


def dumps(value: Any) -> bytes:
    """Compact JSON bytes; timestamps as RFC 3339 UTC (``...Z``), decimals as numbers, binary as base64."""
    return orjson.dumps(value, default=_default, option=_OPTIONS)


def as_written(value: Any) -> Any:
    """The value as it reads back once written (decimals and timestamps as the JSON gives them): what compares
    equal across runs and engines."""
    return orjson.loads(dumps(value))


_LINE_OPTIONS = _OPTIONS | orjson.OPT_APPEND_NEWLINE


def dumps_line(value: Any) -> bytes:
    return orjson.dumps(value, default=_default, option=_LINE_OPTIONS)


def dumps_lines(values: Iterable[Any]) -> bytes:
    """NDJSON of many values, each as ``dumps_line`` writes it (without a Python call per value)."""
    dumps, default, option = orjson.dumps, _default, _LINE_OPTIONS
    return b"".join([dumps(v, default=default, option=option) for v in values])


def load_json_file(path: str) -> Any:
    """The JSON value in a file (``-``: standard input); a file that cannot be read or is not JSON is a
    ``ConfigError`` naming it."""
    import sys

    from edgewise.errors import ConfigError

    try:
        if path == "-":
            return orjson.loads(sys.stdin.buffer.read())
        with open(path, "rb") as fh:
            return orjson.loads(fh.read())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON: {exc}") from None
