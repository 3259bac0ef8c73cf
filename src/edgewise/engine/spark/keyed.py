"""``aggregate``, ``complete`` and ``dedupe`` on Spark: keyed state with ``applyInPandasWithState`` or
``transformWithStateInPandas`` (``group_state_allowed`` says which), running the local engine's own step.

Spark has no operator that writes a group's running values onto each event (``aggregate``) or joins a key's parts
with a timeout (``complete``), so the local step runs on the executors with its state in Spark's RocksDB state
store, checkpointed with the query: the same code as the local engine, so the same values.

The rows are not grouped by the step's key but by a stable hash bucket of it (``buckets_for``): one Python
call of the operator takes all of a bucket's rows in a micro-batch, restores the local step with the state of the
bucket's keys (one ValueState per bucket: the step's items, by name), runs the rows through it with the local
``when`` / ``on_error`` handling, and stores what changed. Grouped by key, each key was a Python call of its own with
its own pandas frame and state round trips: 30,000 keys took minutes (BENCHMARKS.md). Within a micro-batch a
bucket's events are taken in event-time order (then by id), so each key's are; locally they are taken in arrival
order. A key's result does not depend on the other keys of its bucket: a step's own watermark (its largest event
time, here the bucket's) only forgets keys and times out completions that Spark's watermark passed already or that
no later event of the micro-batch can reach (they are taken in event-time order); such a timeout comes out in the
micro-batch that passed it rather than in the next one, with the same id, time and values.

``complete`` keeps one Spark timer per bucket, at its earliest open deadline: an event-time timer (the step's
``watermark`` is the query's ``withWatermark`` delay) or a processing-time one (``time: processing``, Spark's
micro-batch time). A timer fires in the micro-batch after the one that moved the watermark past it, also when
no event of its bucket arrives, and times out every completion of the bucket the time has passed; before a
bucket's events are run, the completions the watermark has passed time out first, as locally, where time moves
after every event. Spark drops rows older than the watermark before an event-time ``transformWithState``; a late
part is still a part locally, so the rows go in with their event time no longer marked as the watermark column.

``dedupe`` keeps the same timer at the earliest time + ``within`` of a remembered key (the step's ``watermark`` is
the query's delay); the timer forgets the keys the watermark passed, and nothing else does (``forget_on_timers``):
the records an earlier step made behind the watermark run first in their micro-batch. Within a micro-batch events
are taken in event-time order, then by id, so the event kept is the first by event time
(``dropDuplicatesWithinWatermark`` would keep any one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from edgewise.engine.spark import frame as F
from edgewise.engine.spark.local_steps import EVENT_TIME_SQL, EVENT_US_SQL
from edgewise.engine.spark.sql import SOURCE, to_guarded_sql
from edgewise.engine.spark.steps import Stage
from edgewise.engine.spark.windows import interval

if TYPE_CHECKING:
    from edgewise.steps.aggregate import AggregateStep
    from edgewise.steps.base import Step
    from edgewise.steps.complete import CompleteStep
    from edgewise.steps.dedupe import DedupeStep
    from edgewise.steps.stateful import StatefulStep

BUCKETS_PER_PARTITION, MIN_BUCKETS = 4, 8
"""How many hash buckets of a step's key the rows are grouped in, per shuffle partition of a new checkpoint (which
keeps the number: its state is kept by bucket, ``SparkJob._keyed_buckets``). Each bucket a micro-batch touches costs
Spark about 5 ms of its own (a Python call, Arrow batches, state-store round trips), so tens of buckets per core
cost more than they save; and a touched bucket's whole state is restored and written back, so a few per partition
keep that work spread over the cores."""

ROUTED_GROUPS = 16
"""How many groups the routed rows pass the keyed operator in (spread by id)."""


def buckets_for(shuffle_partitions: int) -> int:
    """The number of buckets for a new checkpoint whose queries run ``shuffle_partitions`` partitions."""
    return max(MIN_BUCKETS, BUCKETS_PER_PARTITION * shuffle_partitions)


class Keyed(NamedTuple):
    """How a query's keyed steps keep their state."""

    buckets: int
    """The hash buckets of a step's key (``buckets_for``, pinned in the checkpoint)."""
    group_state: bool
    """The step runs through ``applyInPandasWithState`` (``keyed_processor.GroupStateFunction``), not
    ``transformWithStateInPandas`` (``group_state_allowed``)."""


KEYED_STEPS = ("aggregate", "complete", "dedupe")
STATEFUL_KINDS = (*KEYED_STEPS, "window")
"""The steps that are stateful operators on Spark."""


def group_state_allowed(steps: list[Step]) -> bool:
    """Whether the keyed step among ``steps`` (its query's) runs through ``applyInPandasWithState``: where it is the
    query's one stateful operator. Spark refuses that API after an aggregation (a window), before one (its rows
    could be late there: Spark's correctness check) and twice in a query."""
    return sum(s.kind in STATEFUL_KINDS for s in steps) == 1


WATERMARK_MARK = "watermark_mark"
"""An empty column (NULL in every row) that Spark takes for the watermark's: see ``_run_keyed``."""
WATERMARK_DELAY_KEY = "spark.watermarkDelayMs"
"""The metadata by which Spark knows a watermarked column (``EventTimeWatermark.delayKey``)."""


def _run_keyed(stage: Stage, step: StatefulStep, into: str | None, group: str, plan: Any, now_us: int | None,
               keyed: Keyed, time_mode: str | None = None, watermark_us: int = 0) -> Stage:
    """The live rows through the local ``step`` (which writes ``into``, where given), grouped in ``keyed.buckets``
    hash buckets of the SQL ``group`` (a string), with ``time_mode`` timers; routed rows pass.

    Routed rows go through the same operator (in groups of their own, which hold no state) rather than around it
    in a branch of their own: a second branch would compute everything before the step twice, and a stateful
    operator before it (a window) would then be two operators with state of their own, and Spark lost the rows
    of the second (found by the pipeline fuzzer: window, tee, aggregate)."""
    from pyspark.sql import functions as f

    from edgewise.engine.local import _base
    from edgewise.engine.spark.keyed_processor import (
        EVENT_TIME,
        GROUP_STATE_TIMEOUTS,
        NO_TIME,
        OUTPUT,
        ROUTED_GROUP,
        STATE_SCHEMA,
        GroupStateFunction,
        LocalStepProcessor,
    )

    time_mode = time_mode or NO_TIME
    df = stage.df
    marks = []
    if time_mode == EVENT_TIME:  # every row moves the watermark: the end-of-input marker (routed) too
        df = df.withWatermark("event_time", interval(watermark_us))
        if keyed.group_state:
            # applyInPandasWithState takes an event-time timeout (and gives the watermark) only where a column of
            # its rows is marked as the watermark's; it then drops the rows whose value there is behind the
            # watermark, and a late event is not dropped by a keyed step (a late part is a part locally). So the
            # marked column is an empty one: the watermark itself is the event time's, moved where it is set above
            marks = [f.expr("CAST(NULL AS TIMESTAMP)").alias(
                WATERMARK_MARK, metadata={WATERMARK_DELAY_KEY: watermark_us // 1000})]
    # Spark hands a group's rows over as named tuples: the columns need names without a leading underscore.
    # The event time goes in as a value, not as the watermark column, so late rows are not dropped. A routed
    # row's group is never a key's
    routed_group = f"concat('{ROUTED_GROUP}', CAST(pmod(xxhash64(id), {ROUTED_GROUPS}) AS STRING))"
    bucket = f"CAST(pmod(xxhash64({group}), {keyed.buckets}) AS STRING)"
    rows = df.select(f.expr(f"CASE WHEN {F.LIVE} THEN {bucket} ELSE {routed_group} END").alias("group_key"), "id",
                     f.expr(EVENT_US_SQL).alias("event_us"), "source",
                     f.expr(f"CASE WHEN {F.LIVE} THEN {F.record_json(stage.types)} END").alias("payload"),
                     f.col("_to").alias("route"), f.col("_record").alias("record"), *marks)
    makers = frozenset({stage.pipeline, *(s.id for p in plan.pipelines if p.id == stage.pipeline for s in p.steps)})
    made = (type(step), step.config, _base(plan).base_dir, stage.pipeline, now_us, time_mode, makers)
    if keyed.group_state:
        out = rows.groupBy("group_key").applyInPandasWithState(GroupStateFunction(*made), OUTPUT, STATE_SCHEMA,
                                                               "Append", GROUP_STATE_TIMEOUTS[time_mode])
    else:
        out = rows.groupBy("group_key").transformWithStateInPandas(LocalStepProcessor(*made), OUTPUT, "Append",
                                                                   time_mode)
    frame = out.select(
        "id", f.expr(EVENT_TIME_SQL).alias("event_time"), "source",
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


def compile_aggregate(stage: Stage, step: AggregateStep, plan: Any, now_us: int | None, keyed: Keyed) -> Stage:
    # a key that fails to evaluate groups as NULL: the local step meets the error and applies on_error
    keys = [to_guarded_sql(text, stage.types)[0] for text in step.keys.texts]
    return _run_keyed(stage, step, step.config.into, _group(keys), plan, now_us, keyed)


def compile_complete(stage: Stage, step: CompleteStep, plan: Any, now_us: int | None, keyed: Keyed) -> Stage:
    from edgewise.engine.spark.keyed_processor import EVENT_TIME, PROCESSING_TIME  # PySpark: Spark's path only

    config = step.config
    # a key that fails to evaluate groups as NULL: the local step meets the error and applies on_error
    key, _ = to_guarded_sql(config.key, stage.types)
    time_mode = EVENT_TIME if config.time == "event" else PROCESSING_TIME
    return _run_keyed(stage, step, config.into, _group([key]), plan, now_us, keyed, time_mode, config.watermark)


def compile_dedupe(stage: Stage, step: DedupeStep, plan: Any, now_us: int | None, keyed: Keyed) -> Stage:
    from edgewise.engine.spark.keyed_processor import EVENT_TIME  # PySpark: Spark's path only

    config = step.config
    # a key that fails to evaluate groups as NULL: the local step meets the error and applies on_error
    key, _ = to_guarded_sql(config.key, stage.types)
    return _run_keyed(stage, step, None, _group([key]), plan, now_us, keyed, EVENT_TIME, config.watermark)
