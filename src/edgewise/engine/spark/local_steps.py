"""The local engine's steps on Spark's executors: rows in, the local step (with its ``when``, ``retry`` and
``on_error``), rows out.

Both operators that run local steps (``python_steps``: spawn and plugin steps, per partition; ``keyed_processor``:
keyed state, per bucket) hand rows over as pandas frames of ``id``, ``event_us`` (the event time in µs since the
epoch, BIGINT: pandas keeps times in nanoseconds, which do not reach the end-of-input marker's year 9999, and a
number needs no conversion either way), ``source`` and the payload as JSON text. This module is imported on the
executors' Python workers, so it imports nothing heavy at its top (the step's own modules load with the step).
"""

from __future__ import annotations

from functools import partial
from typing import Any

EVENT_US_SQL = "coalesce(unix_micros(event_time), -9223372036854775808)"
"""SQL: a row's event time as the operators hand it over. Never NULL, so pandas keeps the column as integers (a
NULL would make it floats, which lose the end-of-input marker's microseconds): a missing time (only a routed row
can have one) is the smallest BIGINT, and ``EVENT_TIME_SQL`` makes it NULL again."""
EVENT_TIME_SQL = "CASE WHEN event_us <> -9223372036854775808 THEN timestamp_micros(event_us) END"
"""SQL: ``event_us`` as the row's event time again."""

Row = tuple[Any, ...]
"""``(id, event_us, source, payload JSON or None, route, record JSON or None)``: route ``''`` is a result of the
step (payload set), any other route a copy or dead letter for that sink (record set)."""


def run_local_step(guarded: Any, frame: Any, json_column: str, clock: Any,
                   times: list[int] | None = None) -> list[Row]:
    """The rows of ``frame`` (id, event_us, source, JSON payload) through a local step with its when, retry and
    on_error: rows for its results and for what it sent to sinks. An event failing with ``on_error: fail`` stops
    the query, as native steps do. ``times``: the frame's event times, where the caller has them already."""
    import orjson

    from edgewise.engine.context import RunContext
    from edgewise.events import Batch

    sent: list[tuple[str, Batch]] = []
    ctx = RunContext(clock=clock, send=partial(_keep, sent))
    batch = Batch([orjson.loads(j) for j in frame[json_column]], source=str(frame["source"].iloc[0]),
                  ingest_time_us=0, event_times=times if times is not None else frame["event_us"].tolist(),
                  ids=frame["id"].tolist())
    out = guarded.run(batch, ctx)
    if ctx.stats.failed:
        raise RuntimeError(f"pipeline {guarded.pipeline_id}, step {guarded.step.id}: {ctx.stats.failed} events "
                           "failed (on_error: fail)")
    return batch_rows([("", out), *sent])


def batch_rows(batches: list[tuple[str, Any]]) -> list[Row]:
    """``(route, Batch)`` pairs (route ``''``: the step's results) as rows."""
    from edgewise.jsonio import dumps

    rows: list[Row] = []
    for route, produced in batches:
        ids, times, source = produced.ids(), produced.event_times, produced.source
        for i, payload in enumerate(produced.payloads):
            text = dumps(payload).decode()
            rows.append((ids[i], times[i], source, text, "", None) if route == "" else
                        (ids[i], times[i], source, None, route, text))
    return rows


def _keep(sent: list[tuple[str, Any]], sink: str, batch: Any) -> None:
    """What the step sent to a sink, routed with the partition's rows."""
    sent.append((sink, batch))
