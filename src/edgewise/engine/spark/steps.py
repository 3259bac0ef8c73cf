"""Stateless steps as DataFrame projections and filters (``filter gate annotate transform lookup tee``).

Each compiler takes a ``Stage`` (the event frame and the known field types) and gives the next one. Live rows are
edited; rows a step routed to a sink (``_to`` set) pass through untouched. ``when`` and ``on_error`` work as on the
local engine: a step with ``on_error: skip`` or a dead-letter sink evaluates its expressions in their NULL-giving
forms plus an error column (``sql.to_guarded_sql``), so one bad event never fails the micro-batch; with
``on_error: fail`` (the default) Spark's own error stops the query, which restarts from its checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from edgewise.engine.spark import frame as F
from edgewise.engine.spark.fields import FieldTypes
from edgewise.engine.spark.sql import ERROR_MESSAGES, EVENT, to_guarded_sql, to_spark_sql
from edgewise.errors import ConfigError
from edgewise.steps.annotate import split_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from edgewise.steps.annotate import AnnotateConfig, AnnotateStep
    from edgewise.steps.base import Step
    from edgewise.steps.filter import FilterConfig, FilterStep
    from edgewise.steps.lookup import LookupConfig, LookupStep
    from edgewise.steps.tee import TeeConfig, TeeStep
    from edgewise.steps.transform import TransformConfig, TransformOp, TransformStep


@dataclass
class Stage:
    df: DataFrame
    types: FieldTypes
    pipeline: str
    now_sql: str
    """SQL giving the dead-letter time (``current_timestamp()``; a fixed time in tests)."""


_STEP_SQL: ContextVar[list[tuple[str, str]] | None] = ContextVar("edgewise_step_sql", default=None)


@contextmanager
def recording_step_sql() -> Iterator[list[tuple[str, str]]]:
    """``(step id, SQL)`` for each expression the steps compiled in this block turned into: a query that fails
    names the SQL it failed in, and this tells which step that was (``job.py``)."""
    made: list[tuple[str, str]] = []
    token = _STEP_SQL.set(made)
    try:
        yield made
    finally:
        _STEP_SQL.reset(token)


class StepExprs:
    """A step's expressions compiled for its ``on_error``: guarded (with an error column) unless it is ``fail``.

    The ``when`` condition's own error counts wherever the row is live (locally a ``when`` that fails takes the
    step's ``on_error``); the other expressions' errors only where the step applies."""

    def __init__(self, step: Step, types: FieldTypes) -> None:
        self.step_id = step.id
        self.guarded = step.config.on_error != "fail"
        self.types = types
        self.errors: list[str] = []
        self.when_error: str | None = None

    def sql(self, text: str, want: str | None = None) -> str:
        if not self.guarded:
            return self._made(to_spark_sql(text, self.types, want=want))
        value, error = to_guarded_sql(text, self.types, want=want)
        if error:
            self.errors.append(self._made(error))
        return self._made(value)

    def when_sql(self, text: str) -> str:
        if not self.guarded:
            return self._made(to_spark_sql(text, self.types, want="boolean"))
        value, self.when_error = to_guarded_sql(text, self.types, want="boolean")
        if self.when_error:
            self._made(self.when_error)
        return self._made(value)

    def _made(self, sql: str) -> str:
        made = _STEP_SQL.get()
        if made is not None:
            made.append((self.step_id, sql))
        return sql

    def error(self) -> str | None:
        """SQL: the row's first error class (NULL: none), for live rows only."""
        parts = [self.when_error] if self.when_error else []
        if self.errors:
            rest = self.errors[0] if len(self.errors) == 1 else f"coalesce({', '.join(self.errors)})"
            parts.append(f"CASE WHEN _applies THEN {rest} END")
        if not parts:
            return None
        first = parts[0] if len(parts) == 1 else f"coalesce({', '.join(parts)})"
        return f"CASE WHEN {F.LIVE} THEN {first} END"


def _applies(step: Step, exprs: StepExprs) -> str:
    """SQL: the step runs on this row (live, and ``when`` is TRUE)."""
    when = step.config.when
    if when is None:
        return F.LIVE
    return f"({F.LIVE} AND coalesce({exprs.when_sql(when)}, false))"


def apply_on_error(stage: Stage, step: Step, df: DataFrame, applies: str, exprs: StepExprs) -> DataFrame:
    """Apply ``on_error`` to the rows whose ``_err`` is set, then drop the step's work columns."""
    from pyspark.sql import functions as f

    error = exprs.error()
    if error is None:
        return df.drop("_applies")
    on_error = step.config.on_error
    failed = "(_err IS NOT NULL)"
    if on_error == "skip":
        df = df.where(f"NOT {failed}")
    else:
        messages = ", ".join(f"{F.quote(k)}, {F.quote(v)}" for k, v in ERROR_MESSAGES.items())
        record = (f"to_json(named_struct('event_id', id, 'event', _before, 'error', "
                  f"named_struct('type', _err, 'message', concat('[', _err, '] ', "
                  f"coalesce(map({messages})[_err], _err))), 'pipeline', {F.quote(stage.pipeline)}, "
                  f"'step', {F.quote(step.id)}, 'failed_at', {F.iso_timestamp(stage.now_sql)}))")
        df = (df.withColumn("_record", f.expr(f"CASE WHEN {failed} THEN {record} ELSE _record END"))
                .withColumn("id", f.expr(f"CASE WHEN {failed} THEN concat(id, '#', {F.quote(step.id)}) ELSE id END"))
                .withColumn("_to", f.expr(f"CASE WHEN {failed} THEN {F.quote(on_error)} ELSE _to END")))
    return df.drop("_applies", "_err", "_before")


def with_step_error(df: DataFrame, exprs: StepExprs, types: FieldTypes) -> tuple[DataFrame, str]:
    """The frame with the step's error columns where its expressions can fail, and SQL telling where the step
    applies and did not fail (its changes are made there only)."""
    error = exprs.error()
    if error is None:
        return df, "_applies"
    return with_error(df, error, types), "(_applies AND _err IS NULL)"


def with_error(df: DataFrame, error: str, types: FieldTypes) -> DataFrame:
    """The step's error column (``_err``: the first error class, ``StepExprs.error``) and the event as it was
    before the step (``_before``, a VARIANT: what a dead letter carries)."""
    from pyspark.sql import functions as f

    return (df.withColumn("_err", f.expr(error))
              .withColumn("_before", f.expr(F.event_variant(types))))


Changes = Callable[[dict[str, tuple[str, str]], F.Edit], None]
"""Given the step's computed values (name -> (column, Spark type)), records its changes in an ``Edit``."""


def _edit(stage: Stage, step: Step, exprs: StepExprs, applies: str, values: dict[str, str],
          changes: Changes, learn: list[tuple[list[str], str]] | None = None) -> Stage:
    """Compute ``values`` (name -> SQL) on the rows the step applies to, then give each top-level field the step
    changes a column of its own holding its new VARIANT there (elsewhere the old one). ``learn`` pairs (field path,
    value name): the field now has that value's type, which later references read it as."""
    from pyspark.sql import functions as f

    types = stage.types
    df = stage.df.withColumn("_applies", f.expr(applies))
    for name, sql in values.items():
        df = df.withColumn(name, f.expr(f"CASE WHEN _applies THEN {sql} END"))
    df, ok = with_step_error(df, exprs, types)
    typed = {name: (name, df.schema[name].dataType.simpleString()) for name in values}
    edit = F.Edit(types)
    changes(typed, edit)
    # a field set at its top level is also held at its type (reads at that type skip the VARIANT)
    simple = {path[0]: typed[name] for path, name in learn or [] if len(path) == 1}
    df = _hold(df, edit, ok, simple)
    for path, name in learn or []:
        spark_type = typed[name][1]
        types.set(path, None if spark_type in ("void", "variant") else spark_type)
    df = df.drop(*values)
    return Stage(apply_on_error(stage, step, df, applies, exprs), types, stage.pipeline, stage.now_sql)


SIMPLE_TYPES = ("string", "bigint", "double", "boolean")
"""Types a held field's value is also kept in (``FieldTypes.typed``): its VARIANT reads back the same value."""


def _hold(df: DataFrame, edit: F.Edit, ok: str, typed: dict[str, tuple[str, str]] | None = None) -> DataFrame:
    """Each field ``edit`` changed gets a column of its own: the new VARIANT where ``ok`` (the step applied and did
    not fail), the old one elsewhere. The layout then reads the field there. ``typed`` (field -> (SQL, type)) gives
    a changed field's new value at a simple type, which a column holds too, for reads at that type."""
    from pyspark.sql import functions as f

    types = edit.types
    for name, sql in edit.changed.items():
        column = types.new_column()
        df = df.withColumn(column, f.expr(f"CASE WHEN {ok} THEN {sql} ELSE {F.field_variant(types, name)} END"))
        value = (typed or {}).get(name)
        if value is None or value[1] not in SIMPLE_TYPES:
            types.hold(name, column)
            continue
        typed_column = types.new_column()
        # only where the step set it: elsewhere (a row it passed by, failed or routed) a read takes the field's
        # VARIANT at the type (``sql.field_read``), where a later step reads it. Read here, the old value at the
        # new type failed the whole query on a dead-lettered 'oops' (found by the final soak of issue 39)
        df = df.withColumn(typed_column, f.expr(f"CASE WHEN {ok} THEN {value[0]} END"))
        types.hold(name, column, (typed_column, value[1]))
    return df


def _assignments(stage: Stage, step: Step, exprs: StepExprs, items: dict[str, str], prefix: str,
                 types: FieldTypes) -> tuple[dict[str, str], list[tuple[list[str], str]]]:
    values: dict[str, str] = {}
    paths: list[tuple[list[str], str]] = []
    for i, (path, text) in enumerate(items.items()):
        name = f"_{prefix}{i}"
        values[name] = exprs.sql(text)
        paths.append((list(split_path(path)), name))
    return values, paths


def _setting(paths: list[tuple[list[str], str]]) -> Changes:
    def changes(typed: dict[str, tuple[str, str]], edit: F.Edit) -> None:
        for path, name in paths:
            column, spark_type = typed[name]
            edit.set(path, F.to_variant(column, spark_type))

    return changes


def materialize(stage: Stage) -> DataFrame:
    """The frame with the whole event in the ``event`` map column, which becomes the layout's base."""
    from pyspark.sql import functions as f

    df = stage.df.withColumn(EVENT, f.expr(F.event_map(stage.types)))
    stage.types.whole_in_map()
    return df


def compile_filter(stage: Stage, step: FilterStep) -> Stage:
    """``filter`` and ``gate``: keep live rows where ``where`` is TRUE (``when`` not TRUE: kept as they are)."""
    from pyspark.sql import functions as f

    exprs = StepExprs(step, stage.types)
    where = exprs.sql(cast("FilterConfig", step.config).where, "boolean")
    applies = _applies(step, exprs)
    if applies == F.LIVE and exprs.error() is None:  # the common case: one condition, no work columns
        df = stage.df.where(f"NOT ({F.LIVE}) OR coalesce({where}, false)")
        return Stage(df, stage.types, stage.pipeline, stage.now_sql)
    df = stage.df.withColumn("_applies", f.expr(applies))
    error = exprs.error()
    if error is not None:
        df = with_error(df, error, stage.types)
    keep = f"NOT _applies OR coalesce({where}, false)"
    if error is not None:
        keep = f"NOT _applies OR _err IS NOT NULL OR coalesce({where}, false)"
    df = df.where(keep)
    return Stage(apply_on_error(stage, step, df, applies, exprs), stage.types, stage.pipeline, stage.now_sql)


def compile_annotate(stage: Stage, step: AnnotateStep) -> Stage:
    exprs = StepExprs(step, stage.types)
    applies = _applies(step, exprs)
    values, paths = _assignments(stage, step, exprs, dict(cast("AnnotateConfig", step.config).set), "set", stage.types)
    return _edit(stage, step, exprs, applies, values, _setting(paths), paths)


def runs_in_python(step: Step) -> bool:
    """A stateless step Spark has no operation for: a ``transform`` that removes keys by pattern at every depth
    (``drop_keys``; a VARIANT cannot be rebuilt without them in SQL). It runs as the local step on the executors
    (``python_steps.py``), with the same results."""
    return step.kind == "transform" and any(op.drop_keys is not None
                                            for op in cast("TransformConfig", step.config).ops)


WHEN_DECIDED = "_when_decided"
"""A transform's ``when``, decided once for all its operations."""


def compile_transform(stage: Stage, step: TransformStep) -> Stage:
    from pyspark.sql import functions as f

    ops = cast("TransformConfig", step.config).ops
    when = step.config.when
    if when is None or len(ops) == 1:
        for i, op in enumerate(ops):
            stage = _transform_op(stage, step, op, i)
        return stage
    # ``when`` is decided on the event as it came to the step, as locally: an operation that changes a field the
    # condition reads must not change which rows the later ones apply to (found by the pipeline fuzzer: `when: x IS
    # NULL` with `set: {x: coalesce(x, 0)}` then `keep` kept every field). The first operation still evaluates it
    # itself, with its errors, which take the step's on_error
    decided = f"coalesce({StepExprs(step, stage.types).when_sql(when)}, false)"
    stage = Stage(stage.df.withColumn(WHEN_DECIDED, f.expr(decided)), stage.types, stage.pipeline, stage.now_sql)
    for i, op in enumerate(ops):
        stage = _transform_op(stage, step, op, i, None if i == 0 else f"({F.LIVE} AND {WHEN_DECIDED})")
    return Stage(stage.df.drop(WHEN_DECIDED), stage.types, stage.pipeline, stage.now_sql)


def _transform_op(stage: Stage, step: TransformStep, op: TransformOp, index: int,
                  decided: str | None = None) -> Stage:
    """One operation of a transform, on the rows its ``when`` (or ``decided``: SQL of that, decided before the
    operations began) applies to."""
    from pyspark.sql import functions as f

    exprs = StepExprs(step, stage.types)
    applies = decided or _applies(step, exprs)
    types = stage.types
    if op.set is not None:
        values, paths = _assignments(stage, step, exprs, dict(op.set), f"t{index}_", types)
        return _edit(stage, step, exprs, applies, values, _setting(paths), paths)
    if op.rename is not None:
        pairs = [(list(split_path(a)), list(split_path(b))) for a, b in op.rename.items()]

        def rename(_: dict[str, tuple[str, str]], edit: F.Edit) -> None:
            for src, dst in pairs:  # a missing field is not renamed (nor is its new name set)
                value = edit.value_at(src)
                before = dict(edit.changed)
                edit.drop(src)
                edit.set(dst, value)
                edit.only_if(f"{value} IS NOT NULL", [src[0], dst[0]], before)

        for src, dst in pairs:
            sampled = tuple(src) in types.sampled
            types.set(dst, types.type_of(src))
            types.drop(src)
            if sampled:  # the input's value under a new name: its type still comes from the sample
                types.sampled.add(tuple(dst))
        return _edit(stage, step, exprs, applies, {}, rename)
    if op.drop is not None:
        dropped = [list(split_path(p)) for p in op.drop]

        def drop(_: dict[str, tuple[str, str]], edit: F.Edit) -> None:
            for path in dropped:
                edit.drop(path)

        for path in dropped:
            types.drop(path)
        return _edit(stage, step, exprs, applies, {}, drop)
    if op.keep is not None:
        names = list(dict.fromkeys(op.keep))
        if step.config.when is None:  # every live row keeps the same fields: the layout says which
            F.keep_fields(types, names)
            return stage
        # only some rows keep them: the whole event as a map, filtered where the step applies (and its `when` did
        # not fail: a failing `when` takes on_error, with the event as it was)
        df, ok = with_step_error(materialize(stage).withColumn("_applies", f.expr(applies)), exprs, types)
        kept = f"map_filter({EVENT}, (k, v) -> k IN ({', '.join(F.quote(n) for n in names)}))"
        df = df.withColumn(EVENT, f.expr(f"CASE WHEN {ok} THEN {kept} ELSE {EVENT} END"))
        types.keep(names)
        return Stage(apply_on_error(stage, step, df, applies, exprs), types, stage.pipeline, stage.now_sql)
    rr = op.regex_replace
    assert rr is not None
    target = list(split_path(rr.field))
    current = F.variant_at(types, target)
    replacement = rr.replacement.replace("\\", "$") if "\\" in rr.replacement else rr.replacement
    value = (f"CASE WHEN {current} IS NULL OR is_variant_null({current}) THEN NULL ELSE "
             f"regexp_replace(CAST({current} AS STRING), {F.quote(rr.pattern)}, {F.quote(replacement)}) END")

    def regex(_: dict[str, tuple[str, str]], edit: F.Edit) -> None:
        before = dict(edit.changed)
        edit.set(target, F.to_variant("_rx", "string"))
        edit.only_if("_rx IS NOT NULL", [target[0]], before)

    types.set(target, "string")
    return _edit(stage, step, exprs, applies, {"_rx": value}, regex)


def compile_tee(stage: Stage, step: TeeStep) -> Stage:
    """A copy of each live row (optionally reshaped) is routed to the tee's sink; the original goes on."""
    from pyspark.sql import functions as f

    config = cast("TeeConfig", step.config)
    exprs = StepExprs(step, stage.types)
    applies = _applies(step, exprs)
    df = stage.df.withColumn("_applies", f.expr(applies))
    values: dict[str, str] = {}
    for i, text in enumerate((config.set or {}).values()):
        values[f"_tee{i}"] = exprs.sql(text)
    for name, sql in values.items():
        df = df.withColumn(name, f.expr(f"CASE WHEN _applies THEN {sql} END"))
    # an event whose `when` or copy fails is neither copied nor passed on: it takes on_error, as locally
    df, ok = with_step_error(df, exprs, stage.types)
    copy = stage.types.copy()  # the copy's layout: the event's, with the tee's own changes
    edit = F.Edit(copy)
    for i, path in enumerate((config.set or {}).keys()):
        name = f"_tee{i}"
        edit.set(list(split_path(path)), F.to_variant(name, df.schema[name].dataType.simpleString()))
    for name, sql in edit.changed.items():
        copy.hold(name, sql)
    if config.keep:
        F.keep_fields(copy, list(config.keep))
    df = (df.withColumn("_copy", f.expr(f"CASE WHEN {ok} THEN array(false, true) ELSE array(false) END"))
            .withColumn("_copy", f.explode("_copy"))
            .withColumn("_record", f.expr(f"CASE WHEN _copy THEN {F.record_json(copy)} ELSE _record END"))
            .withColumn("id", f.expr(f"CASE WHEN _copy THEN concat(id, '#', {F.quote(step.id)}) ELSE id END"))
            .withColumn("_to", f.expr(f"CASE WHEN _copy THEN {F.quote(config.to)} ELSE _to END")))
    df = df.drop("_copy", *values)
    return Stage(apply_on_error(stage, step, df, applies, exprs), stage.types, stage.pipeline, stage.now_sql)


def compile_lookup(stage: Stage, step: LookupStep) -> Stage:
    """A broadcast join with the (small, static) table, by the string form of the key, as locally."""
    from pyspark.sql import functions as f

    spark = stage.df.sparkSession
    exprs = StepExprs(step, stage.types)
    applies = _applies(step, exprs)
    key = exprs.sql(cast("LookupConfig", step.config).key, "string")
    columns = step.columns
    # the table's values are parsed into VARIANTs once, here, not per event
    rows = [(k, {c: _json_text(row.get(c)) for c in columns}) for k, row in step.table.items()]
    table = _local_table(spark, rows).selectExpr(
        "_lk_key", "transform_values(_lk_row, (k, v) -> parse_json(v)) AS _lk_row")
    # a column whose values have one JSON type is also read at it, once per table row
    column_types = {c: _column_type(step.table.values(), c) for c in columns} if step.into is None else {}
    typed = {c: (f"_lk_t{i}", t) for i, (c, t) in enumerate(column_types.items()) if t is not None}
    if typed:
        table = table.select("*", *(f.expr(f"variant_get(_lk_row[{F.quote(c)}], '$', '{t}')").alias(column)
                                    for c, (column, t) in typed.items()))
    df = stage.df.withColumn("_applies", f.expr(applies)).withColumn(
        "_lk_probe", f.expr(f"CASE WHEN _applies THEN CAST({key} AS STRING) END"))
    df = df.join(f.broadcast(table), df["_lk_probe"] == table["_lk_key"], "left")
    missing = step.missing
    if missing == "drop":
        df = df.where("NOT _applies OR _lk_key IS NOT NULL")
    elif missing == "error" and exprs.guarded:
        exprs.errors.append("CASE WHEN _lk_key IS NULL THEN 'LOOKUP_KEY_MISSING' END")
    if missing == "error" and not exprs.guarded:  # on_error: fail: the event stops the query, as a Spark error does
        df = df.where(f"CASE WHEN _applies AND _lk_key IS NULL THEN CAST(raise_error(concat('lookup {step.id}: "
                      f"no row for key ', coalesce(_lk_probe, 'NULL'))) AS BOOLEAN) ELSE true END")
    types = stage.types
    df, ok = with_step_error(df, exprs, types)
    edit = F.Edit(types)
    if step.into is None:
        for c in columns:  # a missing row sets them to null
            edit.set([c], f"_lk_row[{F.quote(c)}]")
            types.set([c], column_types[c])
    else:
        nulls = "map(" + ", ".join(f"{F.quote(c)}, CAST(NULL AS VARIANT)" for c in columns) + ")"
        row_map = f"coalesce(_lk_row, {nulls})" if columns else "map()"
        edit.set(list(step.into), f"CASE WHEN _lk_key IS NULL THEN NULL ELSE to_variant_object({row_map}) END")
        types.drop(list(step.into))
    df = _hold(df, edit, ok, typed).drop("_lk_probe", "_lk_key", "_lk_row", *(c for c, _ in typed.values()))
    return Stage(apply_on_error(stage, step, df, applies, exprs), types, stage.pipeline, stage.now_sql)


def _column_type(rows: Any, column: str) -> str | None:
    """The Spark type of a lookup table's column when its values have one JSON type (the reads of the field it
    sets are then typed), else None."""
    kinds = {type(row.get(column)) for row in rows} - {type(None)}
    if len(kinds) != 1:
        return None
    return {str: "string", int: "bigint", float: "double", bool: "boolean"}.get(kinds.pop())


def _local_table(spark: SparkSession, rows: list[tuple[str, dict[str, str]]]) -> DataFrame:
    """A lookup table's rows as a DataFrame Spark holds in the driver (a ``LocalRelation``, through Arrow).

    Made from a Python list instead, the table is an RDD of pickled rows, and the first micro-batch starts
    Python workers to broadcast it: 1.6 s of a YSB job's first micro-batch on 2 cores, in a query that needs
    no Python worker otherwise (BENCHMARKS.md, YSB from process start)."""
    import pyarrow as pa

    table = pa.table({"_lk_key": pa.array([k for k, _ in rows], pa.string()),
                      "_lk_row": pa.array([list(row.items()) for _, row in rows], pa.map_(pa.string(), pa.string()))})
    frame: DataFrame = spark.createDataFrame(table, "_lk_key STRING, _lk_row MAP<STRING, STRING>")
    return frame


def _json_text(value: Any) -> str:
    from edgewise.jsonio import dumps

    return dumps(value).decode()


STATELESS: dict[str, Callable[[Stage, Any], Stage]] = {
    "filter": compile_filter,
    "gate": compile_filter,
    "annotate": compile_annotate,
    "transform": compile_transform,
    "tee": compile_tee,
    "lookup": compile_lookup,
}


def compile_stateless(stage: Stage, step: Step) -> Stage:
    compiler = STATELESS.get(step.kind)
    if compiler is None:
        raise ConfigError(f"step {step.id}: the Spark engine does not compile `{step.kind}` steps yet "
                          "(see docs/spark.md for what runs on Spark)")
    return compiler(stage, step)
