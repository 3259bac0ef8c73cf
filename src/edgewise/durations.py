"""Durations written in pipeline files: ``250ms``, ``60s``, ``5m``, ``1h``, ``2d``; a plain ``0`` is zero.

A number without a unit other than 0 is refused: ``tumbling: 30`` could mean seconds, minutes or milliseconds,
and a window off by a factor of 60 runs without a word."""

from __future__ import annotations

import re
from typing import Annotated, Any

from edgewise.declare import BeforeValidator, WithJsonSchema

_UNITS_US = {"us": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000, "d": 86_400_000_000}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m|h|d)\s*$")


def parse_duration_us(value: Any) -> int:
    """Parse a duration into whole microseconds; a plain 0 is zero. Raises ``ValueError``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as '30s' or '5m', found {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"a duration cannot be negative, found {value!r}")
        if value:
            raise ValueError(f"a duration needs a unit: '{value:g}s', '{value:g}m' or '{value:g}ms'? found {value!r}")
        return 0
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return int(float(match.group(1)) * _UNITS_US[match.group(2)])
    raise ValueError(f"expected a duration such as '250ms', '30s', '5m', '1h' or '2d', found {value!r}")


def format_duration_us(us: int) -> str:
    """The shortest exact spelling of a duration (``90000000`` -> ``90s``)."""
    for unit in ("d", "h", "m", "s", "ms"):
        size = _UNITS_US[unit]
        if us and us % size == 0:
            return f"{us // size}{unit}"
    return f"{us}us"


Duration = Annotated[
    int,
    BeforeValidator(parse_duration_us),
    WithJsonSchema(
        {
            "anyOf": [{"type": "string", "pattern": _DURATION.pattern}, {"const": 0}],
            "description": "a duration: '250ms', '30s', '5m', '1h', '2d' (a plain number only as 0)",
        }
    ),
]
"""A config field type (pydantic's, through ``declare.py``): accepts ``'5m'``/``'250ms'``/``0`` and holds
microseconds."""
