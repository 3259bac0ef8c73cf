"""How a value is kept in a state store: JSON, with the types JSON lacks tagged (``{"$ts": µs}``,
``{"$date": iso}``, ``{"$dec": text}``), so a restored value is the value that was saved."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any

from edgewise.expr import values as V


def encode_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"$ts": V.timestamp_to_us(value)}
    if isinstance(value, date):
        return {"$date": value.isoformat()}
    if isinstance(value, Decimal):
        return {"$dec": str(value)}
    if isinstance(value, list):
        return [encode_value(v) for v in value]
    if isinstance(value, dict):
        return {k: encode_value(v) for k, v in value.items()}
    return value


def decode_value(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1:
            tag, inner = next(iter(value.items()))
            if tag == "$ts":
                return V.timestamp_from_us(inner)
            if tag == "$date":
                return date.fromisoformat(inner)
            if tag == "$dec":
                return Decimal(inner)
        return {k: decode_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_value(v) for v in value]
    return value
