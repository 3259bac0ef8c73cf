"""Steps Spark has no operation for (``spawn``, third-party step plugins) run on the executors, in Python.

The live rows of each partition go, as JSON, through the local engine's own step class (built once per Python
worker from the step's config) with the local engine's ``when``, ``retry`` and ``on_error`` (``GuardedStep``):
the same code, so the same results. What the step sends to a sink (a dead letter, a copy) is routed like any
other routed row. Spark's Python workers pay for the JSON round trip, which is why native steps never come here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from edgewise.engine.spark import frame as F
from edgewise.engine.spark.local_steps import EVENT_TIME_SQL, EVENT_US_SQL
from edgewise.engine.spark.sql import SOURCE
from edgewise.engine.spark.steps import Stage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from edgewise.steps.base import Step

SCHEMA = "id STRING, event_us BIGINT, source STRING, _json STRING, _to STRING, _record STRING"

_STEPS: dict[tuple[str, str], Any] = {}
"""Steps built in this Python worker, by (pipeline, step id): a spawn step is built once per worker, not per row."""


def _run_partition(step_class: Any, config: Any, base_dir: str, pipeline_id: str,
                   now_us: int | None) -> Any:
    def run(frames: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        from edgewise.clock import FakeClock, SystemClock
        from edgewise.config import BuildContext
        from edgewise.engine.guard import GuardedStep
        from edgewise.engine.spark.local_steps import run_local_step

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
            yield pd.DataFrame.from_records(rows, columns=["id", "event_us", "source", "_json", "_to", "_record"])

    return run


def compile_python_step(stage: Stage, step: Step, plan: Any, now_us: int | None) -> Stage:
    from pyspark.sql import functions as f

    from edgewise.engine.local import _base

    run = _run_partition(type(step), step.config, _base(plan).base_dir, stage.pipeline, now_us)
    as_json = stage.df.select("id", f.expr(EVENT_US_SQL).alias("event_us"), "source",
                              f.expr(F.record_json(stage.types)).alias("_json"), "_to", "_record")
    out: DataFrame = as_json.mapInPandas(run, SCHEMA)
    frame = out.select("id", f.expr(EVENT_TIME_SQL).alias("event_time"), "source",
                       f.expr("CASE WHEN _to = '' THEN parse_json(_json) END").alias(SOURCE), "_to", "_record")
    into = getattr(step.config, "into", None)
    if into:
        stage.types.drop(into.split("."))
    else:
        stage.types.tree = {}
    stage.types.fresh_source()
    return Stage(frame, stage.types, stage.pipeline, stage.now_sql)
