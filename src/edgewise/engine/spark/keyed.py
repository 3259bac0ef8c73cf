"""``aggregate``, ``complete`` and ``dedupe`` on Spark: keyed state with ``transformWithStateInPandas``, running
the local engine's own step.

Spark has no operator that writes a group's running values onto each event (``aggregate``) or joins a key's parts
with a timeout (``complete``), so the events are grouped by the step's key (computed natively), and for each key
the processor restores the local step with that key's state (a ValueState in Spark's RocksDB state store,
checkpointed with the query), runs the key's events through it with the local ``when`` / ``on_error`` handling,
and stores the changed state back: the same code as the local engine, so the same values. Within a micro-batch a
key's events are taken in event-time order (then by id); locally they are taken in arrival order.

``complete`` keeps one Spark timer per open completion, at its deadline: an event-time timer (the step's
``watermark`` is the query's ``withWatermark`` delay) or a processing-time one (``time: processing``, Spark's
micro-batch time). A timer fires in the micro-batch after the one that moved the watermark past it, also when
no event of its key arrives; and before a key's events are run, the completions the watermark has passed time
out first, as locally, where time moves after every event. Spark drops rows older than the watermark before an
event-time ``transformWithState``; a late part is still a part locally, so the rows go in with their event
time no longer marked as the watermark column.

``dedupe`` keeps each remembered key with an event-time timer at its time + ``within`` (the step's ``watermark``
is the query's delay); the timer forgets it. Within a micro-batch a key's events are taken in event-time order,
then by id, so the event kept is the first by event time (``dropDuplicatesWithinWatermark`` would keep any one).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson

from edgewise.engine.spark import frame as F
from edgewise.engine.spark.python_steps import batch_rows, run_local_step
from edgewise.engine.spark.sql import SOURCE, to_guarded_sql
from edgewise.engine.spark.steps import Stage
from edgewise.engine.spark.windows import interval

if TYPE_CHECKING:
    from edgewise.steps.aggregate import AggregateStep
    from edgewise.steps.complete import CompleteStep
    from edgewise.steps.dedupe import DedupeStep
    from edgewise.steps.stateful import StatefulStep

OUTPUT = ("id STRING, event_time TIMESTAMP, source STRING, payload STRING, route STRING, record STRING, "
          "routed_us BIGINT")
OUTPUT_COLUMNS = ["id", "event_time", "source", "payload", "route", "record", "routed_us"]
"""A routed row's event time is ``routed_us`` (µs), not ``event_time``: pandas holds times in nanoseconds, which
do not reach the end-of-input marker's (year 9999)."""


def _rows_frame(rows: list[tuple[Any, ...]]) -> Any:
    """Rows ``(id, event_time, source, payload, route, record)`` of the local step as the operator's output."""
    import pandas as pd

    frame = pd.DataFrame(rows, columns=OUTPUT_COLUMNS[:-1])
    return frame.assign(routed_us=pd.array([None] * len(frame), dtype="Int64"))

ROUTED_GROUP, ROUTED_GROUPS = "routed:", 16
"""The groups routed rows pass the keyed operator in (they hold no state): a name no key's JSON text starts
with, and how many (the rows spread over them by id)."""

EVENT_TIME, PROCESSING_TIME, NO_TIME = "EventTime", "ProcessingTime", "None"
"""``transformWithState`` time modes: which clock a step's timers run on."""


def natural_key(text: str) -> tuple[Any, ...]:
    """``test:10`` after ``test:9``: the digit runs of an id compared as numbers (ids count events up)."""
    import re

    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def _ceil_ms(us: int) -> int:
    return -(-us // 1000)


def _processor(step_class: Any, config: Any, base_dir: str, pipeline_id: str, now_us: int | None,
               time_mode: str) -> Any:
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

    class LocalStepProcessor(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            from edgewise.config import BuildContext
            from edgewise.engine.guard import GuardedStep

            self.handle = handle
            self.state = handle.getValueState("items", "items STRING")
            self.step = step_class.from_config(config, BuildContext(base_dir))
            self.step.track_changes(True)
            self.guarded = GuardedStep(self.step, pipeline_id)

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
            import pandas as pd

            frame = pd.concat(list(rows), ignore_index=True)
            if str(key[0]).startswith(ROUTED_GROUP):  # rows for sinks pass unchanged (``_run_keyed``)
                yield frame[OUTPUT_COLUMNS]
                return
            frame = frame.assign(order=frame["id"].map(natural_key)).sort_values(["event_time", "order"],
                                                                                 kind="stable")
            self._restore()
            clock = self._clock(timerValues)
            out: list[tuple[Any, ...]] = []
            if time_mode != NO_TIME:  # what time has already passed comes out before these events
                out += self._expire(self._now(timerValues), clock)
            out += run_local_step(self.guarded, frame, "payload", clock)
            self._save()
            yield _rows_frame(out)

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:

            self._restore()
            # the timer fired: Spark's time passed it (even where a fixed test clock says otherwise)
            now = max(self._now(timerValues), expiredTimerInfo.getExpiryTimeInMs() * 1000)
            out = self._expire(now, self._clock(timerValues))
            self._save()
            if out:
                yield _rows_frame(out)

        def _now(self, timer_values: Any) -> int:
            """The step's time: the watermark (event time) or the clock's (processing time)."""
            if time_mode == EVENT_TIME:
                return int(timer_values.getCurrentWatermarkInMs()) * 1000
            return int(self._clock(timer_values).now_us())

        def _clock(self, timer_values: Any) -> Any:
            """The clock of the local step: the micro-batch's time (recorded in the offset log, so a replayed
            micro-batch sees the same time), or the fixed test clock; without timers Spark gives no batch time
            (-1), and the system clock stands in (it dates dead letters)."""
            from edgewise.clock import FakeClock, SystemClock

            if now_us is not None:
                return FakeClock(now_us)
            batch_ms = int(timer_values.getCurrentProcessingTimeInMs())
            return FakeClock(batch_ms * 1000) if batch_ms >= 0 else SystemClock()

        def _expire(self, now: int, clock: Any) -> list[tuple[Any, ...]]:
            from edgewise.engine.context import RunContext

            fired = self.step.expire(now, RunContext(clock=clock))
            return batch_rows([("", fired)]) if fired is not None else []

        def _restore(self) -> None:
            step = self.step
            step.reset()
            self.items: dict[str, str] = {}
            stored = self.state.get() if self.state.exists() else None
            if stored is not None:
                self.items = orjson.loads(stored[0])
                step.restore((name, base64.b64decode(value)) for name, value in self.items.items())

        def _save(self) -> None:
            items = self.items
            for name, value in self.step.changes().items():
                if value is None:
                    items.pop(name, None)
                else:
                    items[name] = base64.b64encode(value).decode()
            if items:
                self.state.update((orjson.dumps(items).decode(),))
            else:
                self.state.clear()
            if time_mode != NO_TIME:
                self._set_timers()

        def _set_timers(self) -> None:
            """One timer per open completion, at its deadline (Spark's timers are in milliseconds)."""
            wanted = {_ceil_ms(deadline) for deadline in self.step.deadlines()}
            held = set(self.handle.listTimers())
            for ms in held - wanted:
                self.handle.deleteTimer(ms)
            for ms in wanted - held:
                self.handle.registerTimer(ms)

        def close(self) -> None:
            pass

    return LocalStepProcessor()


def _run_keyed(stage: Stage, step: StatefulStep, into: str | None, group: str, plan: Any, now_us: int | None,
               time_mode: str = NO_TIME, watermark_us: int = 0) -> Stage:
    """The live rows through the local ``step`` (which writes ``into``, where given), grouped by the SQL
    ``group`` (a string), with ``time_mode`` timers; routed rows pass.

    Routed rows go through the same operator (in groups of their own, which hold no state) rather than around it
    in a branch of their own: a second branch would compute everything before the step twice, and a stateful
    operator before it (a window) would then be two operators with state of their own, and Spark lost the rows
    of the second (found by the pipeline fuzzer: window, tee, aggregate)."""
    from pyspark.sql import functions as f

    from edgewise.engine.local import _base

    df = stage.df
    if time_mode == EVENT_TIME:  # every row moves the watermark: the end-of-input marker (routed) too
        df = df.withWatermark("event_time", interval(watermark_us))
    # Spark hands a group's rows over as named tuples: the columns need names without a leading underscore.
    # The event time goes in as a value, not as the watermark column, so late rows are not dropped. A routed
    # row's group is never a key's
    routed_group = f"concat('{ROUTED_GROUP}', CAST(pmod(xxhash64(id), {ROUTED_GROUPS}) AS STRING))"
    rows = df.select(f.expr(f"CASE WHEN {F.LIVE} THEN {group} ELSE {routed_group} END").alias("group_key"), "id",
                     f.expr(f"CASE WHEN {F.LIVE} THEN timestamp_micros(unix_micros(event_time)) END")
                     .alias("event_time"), "source",
                     f.expr(f"CASE WHEN {F.LIVE} THEN {F.record_json(stage.types)} END").alias("payload"),
                     f.col("_to").alias("route"), f.col("_record").alias("record"),
                     f.expr(f"CASE WHEN NOT {F.LIVE} THEN unix_micros(event_time) END").alias("routed_us"))
    processor = _processor(type(step), step.config, _base(plan).base_dir, stage.pipeline, now_us, time_mode)
    out = rows.groupBy("group_key").transformWithStateInPandas(processor, OUTPUT, "Append", time_mode)
    frame = out.select(
        "id", f.expr("coalesce(event_time, timestamp_micros(routed_us))").alias("event_time"), "source",
        f.expr("CASE WHEN route = '' THEN parse_json(payload) END").alias(SOURCE),
        f.col("route").alias("_to"), f.col("record").alias("_record"))
    if into is not None:
        stage.types.drop(into.split("."))
    stage.types.fresh_source()
    return Stage(frame, stage.types, stage.pipeline, stage.now_sql)


def _group(keys: list[str]) -> str:
    """SQL: a string naming the group of a row's key values."""
    fields = ", ".join(f"'k{i}', {k}" for i, k in enumerate(keys))
    return f"to_json(named_struct({fields}))" if keys else "'{}'"


def compile_aggregate(stage: Stage, step: AggregateStep, plan: Any, now_us: int | None) -> Stage:
    # a key that fails to evaluate groups as NULL: the local step meets the error and applies on_error
    keys = [to_guarded_sql(text, stage.types)[0] for text in step.keys.texts]
    return _run_keyed(stage, step, step.config.into, _group(keys), plan, now_us)


def compile_complete(stage: Stage, step: CompleteStep, plan: Any, now_us: int | None) -> Stage:
    config = step.config
    # a key that fails to evaluate groups as NULL: the local step meets the error and applies on_error
    key, _ = to_guarded_sql(config.key, stage.types)
    time_mode = EVENT_TIME if config.time == "event" else PROCESSING_TIME
    return _run_keyed(stage, step, config.into, _group([key]), plan, now_us, time_mode, config.watermark)


def compile_dedupe(stage: Stage, step: DedupeStep, plan: Any, now_us: int | None) -> Stage:
    config = step.config
    # a key that fails to evaluate groups as NULL: the local step meets the error and applies on_error
    key, _ = to_guarded_sql(config.key, stage.types)
    return _run_keyed(stage, step, None, _group([key]), plan, now_us, EVENT_TIME, config.watermark)
