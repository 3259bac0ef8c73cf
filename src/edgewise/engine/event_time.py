"""Assigning event time at ingest from the file's ``event_time`` expression."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime
from typing import Any

from edgewise.errors import EvalError
from edgewise.events import Batch
from edgewise.expr import values as V
from edgewise.expr.compiler import Expression
from edgewise.expr.timefmt import cast_to_timestamp


def to_event_time_us(value: Any) -> int | None:
    """A TIMESTAMP, timestamp text or epoch seconds as microseconds; ``None`` for NULL."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return V.timestamp_to_us(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return round(value * 1_000_000)
    if isinstance(value, str | date):
        ts = cast_to_timestamp(value)
        return None if ts is None else V.timestamp_to_us(ts)
    raise EvalError("DATATYPE_MISMATCH", f"event_time must give a TIMESTAMP, found {V.type_name(value)}")


def assign_event_times(batch: Batch, expr: Expression, failed: Callable[[int, Exception], None]) -> Batch:
    """The batch with event times from ``expr`` (NULL keeps the ingestion time). Events whose expression fails
    are reported through ``failed`` and left out."""
    fn = expr.evaluate
    times = list(batch.event_times)
    keep = [True] * len(batch)
    for i, p in enumerate(batch.payloads):
        try:
            us = to_event_time_us(fn(p))
        except EvalError as exc:
            failed(i, exc)
            keep[i] = False
            continue
        if us is not None:
            times[i] = us
    batch.event_times = times
    return batch if all(keep) else batch.select(keep)
