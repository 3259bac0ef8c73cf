"""The stateful step Spark has natively: ``window`` (``window``/``session_window`` + ``withWatermark``).

Spark advances the watermark once per micro-batch (edgewise's local engine after every event), and a window's
results leave the query in append mode (``emit: final``) once the watermark passes its end, or in update mode
(``emit: updates``) after every micro-batch that changed it. Late events are dropped by Spark's state operator;
when the step names a ``late`` sink, a copy of each event also rides to the writer tagged with the end of its
window, and the writer keeps the copies whose window had closed at that micro-batch's watermark (which Spark
records in the checkpoint's offset log, so a replayed micro-batch decides the same way).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgewise.engine.spark import frame as F
from edgewise.engine.spark.fields import FieldTypes
from edgewise.engine.spark.sql import SOURCE, to_spark_sql
from edgewise.engine.spark.steps import Stage, StepExprs, apply_on_error, with_error
from edgewise.errors import ConfigError
from edgewise.steps.aggs import NUMBER_TEXT as LOCAL_NUMBER_TEXT

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from edgewise.steps.aggs import AggSpec
    from edgewise.steps.window import WindowStep

LATE_ROUTE = "_late:"
"""``_to`` of a late-event candidate: ``_late:<sink id>``; ``_late_at`` holds its window's end (µs)."""


def interval(us: int) -> str:
    return f"{us} microseconds"


def _typed(sql: str, spark_type: str) -> str:
    """Grouping needs a comparable type: a VARIANT key (its type unknown) groups by its JSON text."""
    return f"to_json({sql})" if spark_type == "variant" else sql


def _argument(stage: Stage, spec: AggSpec) -> tuple[str, str | None]:
    """The expression an aggregate reads and the type it reads it at: ``sum``/``avg`` DOUBLE (a numeric string
    counts, as Spark's implicit cast does); ``min``/``max`` the argument's own type (a STRING or a VARIANT then
    ordered by ``_order_key``), DOUBLE for a NULL; the others a STRING key.

    ``sum``/``avg`` over text cast it to DOUBLE in the expression, where the guard makes a value that does not
    cast fail its event (``CAST_INVALID_INPUT``, as on the local engine); Spark's own implicit cast in
    ``sum``/``avg`` is outside any try form, so ``'oops'`` failed the query. (Found by the pipeline fuzzer's soak:
    ``avg(x)`` over a field the sample typed STRING.)"""
    from pyspark.sql import functions as f

    assert spec.argument is not None
    text = spec.argument.text
    if spec.function not in ("sum", "avg", "min", "max"):
        return text, "string"
    want = "double" if spec.function in ("sum", "avg") else None
    own = stage.df.select(f.expr(to_spark_sql(text, stage.types, want=want)).alias("v")).schema["v"]
    own_type = own.dataType.simpleString()
    if want is not None:
        return (f"CAST(({text}) AS DOUBLE)" if own_type == "string" else text), want
    return text, "double" if own_type == "void" else None


NUMBER_TEXT = "^" + LOCAL_NUMBER_TEXT.pattern + "\\z"
"""Java's form of the text ``min`` and ``max`` order as a number (``steps/aggs.NUMBER_TEXT``): anchored at both
ends (``\\z``, as ``$`` would let a trailing newline through)."""


def _order_key(column: str, spark_type: str) -> str | None:
    """SQL: where ``min``/``max`` place a value of ``column``, as the local engine's ``aggs._less`` does (NULL for
    NULL): (0, the number, 0) for a number, (0, its number, 1, text) for text that reads as one, (1, NULL, 1,
    text) for other text, (2, NULL, 2, "false" or "true") for a boolean, so ``min_by``/``max_by`` give the value
    as it came. None where the type orders itself (numbers, times, booleans). In a VARIANT (a field of several
    kinds), arrays and objects come last, by their JSON text (locally they compare as SQL compares them, and fail
    beside another kind: docs/spark.md)."""
    pattern = F.quote(NUMBER_TEXT)

    def of_text(text: str) -> str:
        return (f"CASE WHEN {text} RLIKE {pattern} THEN named_struct('n', 0, 'd', CAST({text} AS DOUBLE), "
                f"'t', 1, 's', {text}) ELSE named_struct('n', 1, 'd', CAST(NULL AS DOUBLE), 't', 1, 's', {text}) END")

    if spark_type == "string":
        return f"CASE WHEN {column} IS NOT NULL THEN {of_text(column)} END"
    if spark_type != "variant":
        return None
    kind = f"schema_of_variant({column})"
    text = f"try_variant_get({column}, '$', 'string')"
    return (f"CASE WHEN {column} IS NULL OR is_variant_null({column}) THEN NULL "
            f"WHEN {kind} IN ('BIGINT', 'DOUBLE', 'FLOAT', 'INT', 'SMALLINT', 'TINYINT') OR {kind} LIKE 'DECIMAL%' "
            f"THEN named_struct('n', 0, 'd', try_variant_get({column}, '$', 'double'), 't', 0, "
            f"'s', CAST(NULL AS STRING)) "
            f"WHEN {kind} = 'STRING' THEN {of_text(text)} "
            f"WHEN {kind} = 'BOOLEAN' THEN named_struct('n', 2, 'd', CAST(NULL AS DOUBLE), 't', 2, 's', "
            f"to_json({column})) "
            f"ELSE named_struct('n', 3, 'd', CAST(NULL AS DOUBLE), 't', 3, 's', to_json({column})) END")


def compile_window(stage: Stage, step: WindowStep, routes_from: DataFrame | None = None, *,
                   marker_only: bool = False) -> tuple[Stage, DataFrame | None, str]:
    """(the window results as a new stage, the routed rows to add back (or None), the output mode).

    The routed rows leave in a branch of their own, which Spark computes apart from the window's (a second read
    of its input). Given ``routes_from`` (where the job knows the only routed rows are, when no step before the
    window can route), that branch reads them there, and the steps before the window run once, not once per
    branch. With ``marker_only``, ``routes_from`` is just the end-of-input marker's spool: the window's input then
    counts its malformed lines (an observed metric), narrowed first to what the window reads, so that only those
    columns are computed for each event."""
    from pyspark.sql import functions as f

    config = step.config
    if config.allowed_lateness:
        raise ConfigError(f"step {step.id}: allowed_lateness has no Spark equivalent (Spark drops a window's state "
                          "once the watermark passes its end); use 0 on Spark")
    if config.when is not None:
        raise ConfigError(f"step {step.id}: a window with `when` is not compiled for Spark (the events it does not "
                          "apply to would have to pass the window unchanged); filter before the window instead, or "
                          "run it on the local engine")
    types = stage.types
    # the keys and the aggregates' arguments, computed for the live rows; with on_error skip or a dead-letter sink
    # in their NULL-giving forms, and an event whose key or argument fails takes on_error before the window
    exprs = StepExprs(step, types)
    key_columns = []
    for i, (name, text) in enumerate(zip(step.keys.names, step.keys.texts, strict=True)):
        sql = exprs.sql(text)
        probe = stage.df.select(f.expr(sql).alias("k")).schema["k"].dataType.simpleString()
        key_columns.append((name, f"_k{i}", _typed(sql, probe), probe))
    arguments: dict[str, str] = {}
    for i, (_, spec) in enumerate(step.aggs.specs):
        if spec.argument is not None:
            text, want = _argument(stage, spec)
            arguments[f"_x{i}"] = exprs.sql(text, want=want)
    error = exprs.error()
    if error is not None:
        checked = with_error(stage.df.withColumn("_applies", f.expr(F.LIVE)), error, types)
        stage = Stage(apply_on_error(stage, step, checked, F.LIVE, exprs), types, stage.pipeline, stage.now_sql)
    inputs = stage.df
    for column, sql in [*((c, s) for _, c, s, _ in key_columns), *arguments.items()]:
        inputs = inputs.withColumn(column, f.expr(f"CASE WHEN {F.LIVE} THEN {sql} END"))
    # min/max over text or a VARIANT: by the local engine's order (``_order_key``), computed on the typed columns
    order_keys = {f"_x{i}": _order_key(f"_x{i}", inputs.schema[f"_x{i}"].dataType.simpleString())
                  for i, (_, spec) in enumerate(step.aggs.specs) if spec.function in ("min", "max")}
    if marker_only:
        columns = ["event_time", "_to", "_record", *(c for _, c, _, _ in key_columns), *arguments]
        inputs = F.count_malformed(inputs.select(*columns))
    # the watermark sees every row, routed ones too: the end-of-input marker (routed past every step) moves it
    watermarked = inputs.withWatermark("event_time", interval(config.watermark))
    live = watermarked.where(F.LIVE)
    routed_from = watermarked if routes_from is None else routes_from.withWatermark(
        "event_time", interval(config.watermark))
    routed = routed_from.where(f"NOT {F.LIVE}").select(*F.FRAME_COLUMNS)
    if config.late != "drop":
        size_us = step.size
        slide_us = step.slide
        if step.sessions:
            ends = f"unix_micros(event_time) + {size_us}"
        else:
            ends = f"floor(unix_micros(event_time) / {slide_us}) * {slide_us} + {size_us}"
        late = (live.withColumn("_to", f.lit(LATE_ROUTE + config.late))
                    .withColumn("_record", f.expr(F.record_json(types)))
                    .select(*F.FRAME_COLUMNS, f.expr(f"CAST({ends} AS BIGINT)").alias("_late_at")))
        routed = routed.withColumn("_late_at", f.lit(None).cast("bigint")).unionByName(late)
    df = live
    if step.sessions:
        window = f.session_window("event_time", interval(step.size))
    elif config.sliding:
        window = f.window("event_time", interval(step.size), interval(step.slide))
    else:
        window = f.window("event_time", interval(step.size))
    aggs: list[Column] = []
    post: dict[str, str] = {}
    for i, (_, spec) in enumerate(step.aggs.specs):
        column = f"_a_{len(aggs)}"
        argument = f"_x{i}"
        fn = spec.function
        if fn == "count":
            aggs.append(f.expr("count(*)" if spec.argument is None else f"count({argument})").alias(column))
        elif fn == "avg":  # a DOUBLE, as locally: over a DECIMAL Spark's avg keeps a scale of 4 (420.3333)
            aggs.append(f.expr(f"avg(CAST({argument} AS DOUBLE))").alias(column))
        elif fn in ("min", "max") and order_keys.get(argument):
            aggs.append(f.expr(f"{fn}_by({argument}, {order_keys[argument]})").alias(column))
        elif fn in ("sum", "min", "max"):
            aggs.append(f.expr(f"{fn}({argument})").alias(column))
        elif fn == "count_distinct":
            aggs.append(f.expr(f"size(collect_set({argument}))").alias(column))
        else:  # histogram: value -> count, from the values collected in the window
            aggs.append(f.expr(f"collect_list(CAST({argument} AS STRING))").alias(column))
            post[column] = (f"map_from_entries(transform(array_distinct({column}), "
                            f"v -> struct(v, size(filter({column}, y -> y = v)))))")
        post.setdefault(column, column)
    by = [f.col(c) for _, c, _, _ in key_columns]
    if step.sessions and not by:  # Spark refuses a session window alone ("global aggregation"): one group for all
        df, by = df.withColumn("_one_group", f.lit(0)), [f.col("_one_group")]
    grouped = df.groupBy(window.alias("_w"), *by).agg(*aggs)
    for column, sql in post.items():
        grouped = grouped.withColumn(column, f.expr(sql))
    # the result's fields, each a VARIANT column of its own: the layout holds them all (``frame.py``)
    # a VARIANT key was grouped by its JSON text: the result holds the value again
    keys = [(name, f"parse_json({column})" if spark_type == "variant" else column, spark_type)
            for name, column, _, spark_type in key_columns]
    fields = list(keys)
    fields.append(("window_start", "_w.start", "timestamp"))
    fields.append(("window_end", "_w.end", "timestamp"))
    for (name, _), agg in zip(step.aggs.specs, list(post), strict=True):
        fields.append((name, agg, grouped.schema[agg].dataType.simpleString()))
    # the key values as JSON, each as a VARIANT (an array needs one element type): `[1,"a"]`, as the local id
    key_json = ("to_json(array(" + ", ".join(F.to_variant(v, t) for _, v, t in keys) + "))") if keys else "'[]'"
    result_id = f"concat({F.quote(step.id)}, ':', CAST(unix_micros(_w.start) AS STRING), ':', {key_json})"
    updates = config.emit == "updates"
    if updates:  # one result per change: the values tell the updates of one window apart, and replay alike
        values = ", ".join(post)
        result_id = f"concat({result_id}, '#', CAST(xxhash64({values}) AS STRING))"
    new_types = FieldTypes(kept=[])  # results are new events: nothing of a source, every field held
    held = []
    for name, value, spark_type in fields:
        column = new_types.new_column()
        held.append(f.expr(F.present(F.to_variant(value, spark_type))).alias(column))
        new_types.held[name] = column
        new_types.set([name], spark_type)
    results = grouped.select(
        f.expr(result_id).alias("id"),
        f.expr("_w.end - INTERVAL 1 MICROSECOND").alias("event_time"),
        f.lit(stage.pipeline).alias("source"),
        f.lit(None).cast("variant").alias(SOURCE),
        f.lit("").alias("_to"),
        f.lit(None).cast("string").alias("_record"),
        *held,
    )
    mode = "update" if updates else "append"
    return Stage(results, new_types, stage.pipeline, stage.now_sql), routed, mode
