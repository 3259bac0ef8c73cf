"""Steps Spark has no operation for (``spawn``, third-party step plugins) run on the executors, in Python.

The live rows of each partition go, as JSON, through the local engine's own step class (built once per Python
worker from the step's config) with the local engine's ``when``, ``retry`` and ``on_error`` (``GuardedStep``):
the same code, so the same results. What the step sends to a sink (a dead letter, a copy) is routed like any
other routed row. Spark's Python workers pay for the JSON round trip, which is why native steps never come here.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from edgewise.engine.spark import frame as F
from edgewise.engine.spark.sql import SOURCE
from edgewise.engine.spark.steps import Stage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from edgewise.steps.base import Step

SCHEMA = "id STRING, event_time TIMESTAMP, source STRING, _json STRING, _to STRING, _record STRING"

_STEPS: dict[tuple[str, str], Any] = {}
"""Steps built in this Python worker, by (pipeline, step id): a spawn step is built once per worker, not per row."""


def _run_partition(step_class: Any, config: Any, base_dir: str, pipeline_id: str,
                   now_us: int | None) -> Any:
    def run(frames: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        from edgewise.clock import FakeClock, SystemClock
        from edgewise.config import BuildContext
        from edgewise.engine.guard import GuardedStep

        key = (pipeline_id, config.id)
        guarded = _STEPS.get(key)
        if guarded is None:
            step = step_class.from_config(config, BuildContext(base_dir))
            guarded = _STEPS[key] = GuardedStep(step, pipeline_id)
        clock = FakeClock(now_us) if now_us is not None else SystemClock()
        for frame in frames:
            live = frame[frame["_to"] == ""]
            routed = frame[frame["_to"] != ""]
            rows: list[tuple[Any, ...]] = [tuple(r) for r in routed.itertuples(index=False)]
            if len(live):
                rows += run_local_step(guarded, live, "_json", clock)
            yield pd.DataFrame(rows, columns=["id", "event_time", "source", "_json", "_to", "_record"])

    return run


def run_local_step(guarded: Any, frame: Any, json_column: str, clock: Any) -> list[tuple[Any, ...]]:
    """The rows of ``frame`` (id, event_time, source, JSON payload) through a local step with its when, retry and
    on_error: rows ``(id, event_time, source, payload JSON, route, record JSON)`` for its results (route ``''``)
    and for what it sent to sinks. An event failing with ``on_error: fail`` stops the query, as native steps do."""
    import orjson

    from edgewise.engine.context import RunContext
    from edgewise.events import Batch

    sent: list[tuple[str, Batch]] = []
    ctx = RunContext(clock=clock, send=partial(_keep, sent))
    times = [_micros(t) for t in frame["event_time"]]
    batch = Batch([orjson.loads(j) for j in frame[json_column]], source=str(frame["source"].iloc[0]),
                  ingest_time_us=0, event_times=times, ids=list(frame["id"]))
    out = guarded.run(batch, ctx)
    if ctx.stats.failed:
        raise RuntimeError(f"pipeline {guarded.pipeline_id}, step {guarded.step.id}: {ctx.stats.failed} events "
                           "failed (on_error: fail)")
    return batch_rows([("", out), *sent])


def batch_rows(batches: list[tuple[str, Any]]) -> list[tuple[Any, ...]]:
    """``(route, Batch)`` pairs (route ``''``: the step's results) as rows ``(id, event_time, source, payload JSON,
    route, record JSON)``."""
    import datetime as dt

    from edgewise.jsonio import dumps

    rows: list[tuple[Any, ...]] = []
    for route, produced in batches:
        ids = produced.ids()
        for i, payload in enumerate(produced.payloads):
            when = dt.datetime.fromtimestamp(produced.event_times[i] / 1e6, dt.UTC)
            text = dumps(payload).decode()
            rows.append((ids[i], when, produced.source, text, "", None) if route == "" else
                        (ids[i], when, produced.source, None, route, text))
    return rows


def _keep(sent: list[tuple[str, Any]], sink: str, batch: Any) -> None:
    """What the step sent to a sink, routed with the partition's rows."""
    sent.append((sink, batch))


def _micros(value: Any) -> int:
    import pandas as pd

    if value is None or pd.isna(value):
        return 0
    stamp = pd.Timestamp(value)
    if stamp.tzinfo is None:
        stamp = stamp.tz_localize("UTC")
    return int(stamp.value // 1000)


def compile_python_step(stage: Stage, step: Step, plan: Any, now_us: int | None) -> Stage:
    from pyspark.sql import functions as f

    from edgewise.engine.local import _base

    run = _run_partition(type(step), step.config, _base(plan).base_dir, stage.pipeline, now_us)
    as_json = stage.df.select("id", "event_time", "source", f.expr(F.record_json(stage.types)).alias("_json"),
                              "_to", "_record")
    out: DataFrame = as_json.mapInPandas(run, SCHEMA)
    frame = out.select("id", "event_time", "source",
                       f.expr("CASE WHEN _to = '' THEN parse_json(_json) END").alias(SOURCE), "_to", "_record")
    into = getattr(step.config, "into", None)
    if into:
        stage.types.drop(into.split("."))
    else:
        stage.types.tree = {}
    stage.types.fresh_source()
    return Stage(frame, stage.types, stage.pipeline, stage.now_sql)
