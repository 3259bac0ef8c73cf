"""``aggregate`` on Spark: keyed state with ``transformWithStateInPandas``, running the local engine's own step.

Spark has no operator that writes a group's running values onto each event, so the events are grouped by the
step's key (computed natively), and for each key the processor restores the local ``AggregateStep`` with that
key's state (a ValueState in Spark's RocksDB state store, checkpointed with the query), runs the key's events
through it with the local ``when`` / ``on_error`` handling, and stores the changed state back: the same code as
the local engine, so the same values. Within a micro-batch a key's events are taken in event-time order (then by
id); locally they are taken in arrival order.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson

from edgewise.engine.spark import frame as F
from edgewise.engine.spark.python_steps import run_local_step
from edgewise.engine.spark.sql import EVENT, SOURCE, to_spark_sql
from edgewise.engine.spark.steps import Stage

if TYPE_CHECKING:
    from edgewise.steps.aggregate import AggregateStep

OUTPUT = "id STRING, event_time TIMESTAMP, source STRING, payload STRING, route STRING, record STRING"
OUTPUT_COLUMNS = ["id", "event_time", "source", "payload", "route", "record"]


def natural_key(text: str) -> tuple[Any, ...]:
    """``test:10`` after ``test:9``: the digit runs of an id compared as numbers (ids count events up)."""
    import re

    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def _processor(step_class: Any, config: Any, base_dir: str, pipeline_id: str, now_us: int | None) -> Any:
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

    class LocalStepProcessor(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            from edgewise.config import BuildContext
            from edgewise.engine.guard import GuardedStep

            self.state = handle.getValueState("items", "items STRING")
            self.step = step_class.from_config(config, BuildContext(base_dir))
            self.step.track_changes(True)
            self.guarded = GuardedStep(self.step, pipeline_id)

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:

            import pandas as pd

            from edgewise.clock import FakeClock, SystemClock

            frame = pd.concat(list(rows), ignore_index=True)
            frame = frame.assign(order=frame["id"].map(natural_key)).sort_values(["event_time", "order"],
                                                                                 kind="stable")
            step = self.step
            step.reset()
            items: dict[str, str] = {}
            stored = self.state.get() if self.state.exists() else None
            if stored is not None:
                items = orjson.loads(stored[0])
                step.restore((name, base64.b64decode(value)) for name, value in items.items())
            clock = FakeClock(now_us) if now_us is not None else SystemClock()
            result = run_local_step(self.guarded, frame, "payload", clock)
            for name, value in step.changes().items():
                if value is None:
                    items.pop(name, None)
                else:
                    items[name] = base64.b64encode(value).decode()
            if items:
                self.state.update((orjson.dumps(items).decode(),))
            else:
                self.state.clear()
            yield pd.DataFrame(result, columns=OUTPUT_COLUMNS)

        def close(self) -> None:
            pass

    return LocalStepProcessor()


def compile_aggregate(stage: Stage, step: AggregateStep, plan: Any, now_us: int | None) -> Stage:
    from pyspark.sql import functions as f

    from edgewise.engine.local import _base

    live = stage.df.where(F.LIVE)
    routed = stage.df.where(f"NOT {F.LIVE}")
    keys = [to_spark_sql(text, stage.types) for text in step.keys.texts]
    fields = ", ".join(f"'k{i}', {k}" for i, k in enumerate(keys))
    group = f"to_json(named_struct({fields}))" if keys else "'{}'"
    # Spark hands a group's rows over as named tuples: the columns need names without a leading underscore
    rows = live.select(f.expr(group).alias("group_key"), "id", "event_time", "source",
                       f.expr(F.record_json()).alias("payload"))
    processor = _processor(type(step), step.config, _base(plan).base_dir, stage.pipeline, now_us)
    out = rows.groupBy("group_key").transformWithStateInPandas(processor, OUTPUT, "Append", "None")
    frame = out.select(
        "id", "event_time", "source",
        f.expr("CASE WHEN route = '' THEN try_cast(parse_json(payload) AS MAP<STRING, VARIANT>) END").alias(EVENT),
        f.expr("CASE WHEN route = '' THEN parse_json(payload) END").alias(SOURCE),
        f.col("route").alias("_to"), f.col("record").alias("_record")).unionByName(routed)
    stage.types.drop(step.config.into.split("."))
    stage.types.fresh_source()
    return Stage(frame, stage.types, stage.pipeline, stage.now_sql)
