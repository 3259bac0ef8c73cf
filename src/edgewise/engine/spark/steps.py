"""Stateless steps as DataFrame projections and filters (``filter gate annotate transform lookup tee``).

Each compiler takes a ``Stage`` (the event frame and the known field types) and gives the next one. Live rows are
edited; rows a step routed to a sink (``_to`` set) pass through untouched. ``when`` and ``on_error`` work as on the
local engine: a step with ``on_error: skip`` or a dead-letter sink evaluates its expressions in their NULL-giving
forms plus an error column (``sql.to_guarded_sql``), so one bad event never fails the micro-batch; with
``on_error: fail`` (the default) Spark's own error stops the query, which restarts from its checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from edgewise.engine.spark import frame as F
from edgewise.engine.spark.fields import FieldTypes
from edgewise.engine.spark.sql import ERROR_MESSAGES, EVENT, to_guarded_sql, to_spark_sql
from edgewise.errors import ConfigError
from edgewise.steps.annotate import split_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

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


class _Exprs:
    """A step's expressions compiled for its ``on_error``: guarded (with an error column) unless it is ``fail``."""

    def __init__(self, step: Step, types: FieldTypes) -> None:
        self.guarded = step.config.on_error != "fail"
        self.types = types
        self.errors: list[str] = []

    def sql(self, text: str, want: str | None = None) -> str:
        if not self.guarded:
            return to_spark_sql(text, self.types, want=want)
        value, error = to_guarded_sql(text, self.types, want=want)
        if error:
            self.errors.append(error)
        return value

    def error(self) -> str | None:
        if not self.errors:
            return None
        return self.errors[0] if len(self.errors) == 1 else f"coalesce({', '.join(self.errors)})"


def _applies(step: Step, exprs: _Exprs) -> str:
    """SQL: the step runs on this row (live, and ``when`` is TRUE)."""
    when = step.config.when
    if when is None:
        return F.LIVE
    return f"({F.LIVE} AND coalesce({exprs.sql(when, 'boolean')}, false))"


def _finish(stage: Stage, step: Step, df: DataFrame, applies: str, exprs: _Exprs) -> DataFrame:
    """Apply ``on_error`` to the rows whose ``_err`` is set, then drop the step's work columns."""
    from pyspark.sql import functions as f

    error = exprs.error()
    if error is None:
        return df.drop("_applies")
    on_error = step.config.on_error
    failed = "(_applies AND _err IS NOT NULL)"
    if on_error == "skip":
        df = df.where(f"NOT {failed}")
    else:
        messages = ", ".join(f"{F.quote(k)}, {F.quote(v)}" for k, v in ERROR_MESSAGES.items())
        record = (f"to_json(named_struct('event_id', id, 'event', to_variant_object(_before), 'error', "
                  f"named_struct('type', _err, 'message', concat('[', _err, '] ', "
                  f"coalesce(map({messages})[_err], _err))), 'pipeline', {F.quote(stage.pipeline)}, "
                  f"'step', {F.quote(step.id)}, 'failed_at', {F.iso_timestamp(stage.now_sql)}))")
        df = (df.withColumn("_record", f.expr(f"CASE WHEN {failed} THEN {record} ELSE _record END"))
                .withColumn("id", f.expr(f"CASE WHEN {failed} THEN concat(id, '#', {F.quote(step.id)}) ELSE id END"))
                .withColumn("_to", f.expr(f"CASE WHEN {failed} THEN {F.quote(on_error)} ELSE _to END")))
    return df.drop("_applies", "_err", "_before")


def _with_error(df: DataFrame, error: str) -> DataFrame:
    """The step's error column (``_err``: the first error class, where the step applies) and the event as it was
    before the step (``_before``, what a dead letter carries)."""
    from pyspark.sql import functions as f

    return df.withColumn("_err", f.expr(f"CASE WHEN _applies THEN {error} END")).withColumn("_before", f.col(EVENT))


def _edit(stage: Stage, step: Step, exprs: _Exprs, applies: str, values: dict[str, str],
          edit: Any, learn: list[tuple[list[str], str]] | None = None) -> Stage:
    """Compute ``values`` (name -> SQL) on the rows the step applies to, then set ``event`` to ``edit(typed)``,
    where ``typed`` maps each name to (column, Spark type). ``learn`` pairs (field path, value name): the field
    now has that value's type, which later references read it as."""
    from pyspark.sql import functions as f

    df = stage.df.withColumn("_applies", f.expr(applies))
    for name, sql in values.items():
        df = df.withColumn(name, f.expr(f"CASE WHEN _applies THEN {sql} END"))
    error = exprs.error()
    if error is not None:
        df = _with_error(df, error)
    typed = {name: (name, df.schema[name].dataType.simpleString()) for name in values}
    for path, name in learn or []:
        stage.types.touch(path[0])
        spark_type = typed[name][1]
        stage.types.set(path, None if spark_type in ("void", "variant") else spark_type)
    ok = "_applies" if error is None else "(_applies AND _err IS NULL)"
    df = df.withColumn(EVENT, f.expr(f"CASE WHEN {ok} THEN {edit(typed)} ELSE {EVENT} END")).drop(*values)
    return Stage(_finish(stage, step, df, applies, exprs), stage.types, stage.pipeline, stage.now_sql)


def _assignments(stage: Stage, step: Step, exprs: _Exprs, items: dict[str, str], prefix: str,
                 types: FieldTypes) -> tuple[dict[str, str], list[tuple[list[str], str]]]:
    values: dict[str, str] = {}
    paths: list[tuple[list[str], str]] = []
    for i, (path, text) in enumerate(items.items()):
        name = f"_{prefix}{i}"
        values[name] = exprs.sql(text)
        paths.append((list(split_path(path)), name))
    return values, paths


def _set_edit(event: str, paths: list[tuple[list[str], str]], typed: dict[str, tuple[str, str]]) -> str:
    for path, name in paths:
        column, spark_type = typed[name]
        event = F.with_field(event, path, F.to_variant(column, spark_type))
    return event


def compile_filter(stage: Stage, step: FilterStep) -> Stage:
    """``filter`` and ``gate``: keep live rows where ``where`` is TRUE (``when`` not TRUE: kept as they are)."""
    from pyspark.sql import functions as f

    exprs = _Exprs(step, stage.types)
    where = exprs.sql(cast("FilterConfig", step.config).where, "boolean")
    applies = _applies(step, exprs)
    df = stage.df.withColumn("_applies", f.expr(applies))
    error = exprs.error()
    if error is not None:
        df = _with_error(df, error)
    keep = f"NOT _applies OR coalesce({where}, false)"
    if error is not None:
        keep = f"NOT _applies OR _err IS NOT NULL OR coalesce({where}, false)"
    df = df.where(keep)
    return Stage(_finish(stage, step, df, applies, exprs), stage.types, stage.pipeline, stage.now_sql)


def compile_annotate(stage: Stage, step: AnnotateStep) -> Stage:
    exprs = _Exprs(step, stage.types)
    applies = _applies(step, exprs)
    values, paths = _assignments(stage, step, exprs, dict(cast("AnnotateConfig", step.config).set), "set", stage.types)
    return _edit(stage, step, exprs, applies, values, lambda typed: _set_edit(EVENT, paths, typed), paths)


def compile_transform(stage: Stage, step: TransformStep) -> Stage:
    for i, op in enumerate(cast("TransformConfig", step.config).ops):
        stage = _transform_op(stage, step, op, i)
    return stage


def _transform_op(stage: Stage, step: TransformStep, op: TransformOp, index: int) -> Stage:
    exprs = _Exprs(step, stage.types)
    applies = _applies(step, exprs)
    types = stage.types
    if op.set is not None:
        values, paths = _assignments(stage, step, exprs, dict(op.set), f"t{index}_", types)
        return _edit(stage, step, exprs, applies, values, lambda typed: _set_edit(EVENT, paths, typed), paths)
    if op.rename is not None:
        pairs = [(list(split_path(a)), list(split_path(b))) for a, b in op.rename.items()]

        def rename(_: dict[str, tuple[str, str]]) -> str:
            event = EVENT
            for src, dst in pairs:
                value = F.variant_at(src).replace(EVENT, event)
                moved = F.with_field(F.without_field(event, src), dst, value)
                event = f"CASE WHEN {value} IS NULL THEN {event} ELSE {moved} END"
            return event

        for src, dst in pairs:
            types.set(dst, types.type_of(src))
            types.drop(src)
            types.touch(src[0])
            types.touch(dst[0])
        return _edit(stage, step, exprs, applies, {}, rename)
    if op.drop is not None:
        dropped = [list(split_path(p)) for p in op.drop]

        def drop(_: dict[str, tuple[str, str]]) -> str:
            event = EVENT
            for path in dropped:
                event = F.without_field(event, path)
            return event

        for path in dropped:
            types.drop(path)
            types.touch(path[0])
        return _edit(stage, step, exprs, applies, {}, drop)
    if op.keep is not None:
        names = list(dict.fromkeys(op.keep))
        types.keep(names)
        types.touch_all()  # a dropped field must read as NULL, which only the map knows
        return _edit(stage, step, exprs, applies, {}, lambda _: F.keeping(EVENT, names))
    rr = op.regex_replace
    assert rr is not None
    target = list(split_path(rr.field))
    current = F.variant_at(target)
    replacement = rr.replacement.replace("\\", "$") if "\\" in rr.replacement else rr.replacement
    value = (f"CASE WHEN {current} IS NULL OR is_variant_null({current}) THEN NULL ELSE "
             f"regexp_replace(CAST({current} AS STRING), {F.quote(rr.pattern)}, {F.quote(replacement)}) END")

    def regex(typed: dict[str, tuple[str, str]]) -> str:
        return (f"CASE WHEN _rx IS NULL THEN {EVENT} ELSE "
                f"{F.with_field(EVENT, target, F.to_variant('_rx', 'string'))} END")

    types.set(target, "string")
    types.touch(target[0])
    return _edit(stage, step, exprs, applies, {"_rx": value}, regex)


def compile_tee(stage: Stage, step: TeeStep) -> Stage:
    """A copy of each live row (optionally reshaped) is routed to the tee's sink; the original goes on."""
    from pyspark.sql import functions as f

    config = cast("TeeConfig", step.config)
    exprs = _Exprs(step, stage.types)
    applies = _applies(step, exprs)
    copy = EVENT
    df = stage.df.withColumn("_applies", f.expr(applies))
    values: dict[str, str] = {}
    for i, text in enumerate((config.set or {}).values()):
        values[f"_tee{i}"] = exprs.sql(text)
    for name, sql in values.items():
        df = df.withColumn(name, f.expr(f"CASE WHEN _applies THEN {sql} END"))
    for i, path in enumerate((config.set or {}).keys()):
        name = f"_tee{i}"
        copy = F.with_field(copy, list(split_path(path)), F.to_variant(name, df.schema[name].dataType.simpleString()))
    if config.keep:
        copy = F.keeping(copy, list(config.keep))
    df = (df.withColumn("_copy", f.expr("CASE WHEN _applies THEN array(false, true) ELSE array(false) END"))
            .withColumn("_copy", f.explode("_copy"))
            .withColumn("_record", f.expr(f"CASE WHEN _copy THEN {F.record_json(copy)} ELSE _record END"))
            .withColumn("id", f.expr(f"CASE WHEN _copy THEN concat(id, '#', {F.quote(step.id)}) ELSE id END"))
            .withColumn("_to", f.expr(f"CASE WHEN _copy THEN {F.quote(config.to)} ELSE _to END"))
            .drop("_copy", "_applies", *values))
    return Stage(df, stage.types, stage.pipeline, stage.now_sql)


def compile_lookup(stage: Stage, step: LookupStep) -> Stage:
    """A broadcast join with the (small, static) table, by the string form of the key, as locally."""
    from pyspark.sql import functions as f

    spark = stage.df.sparkSession
    exprs = _Exprs(step, stage.types)
    applies = _applies(step, exprs)
    key = exprs.sql(cast("LookupConfig", step.config).key, "string")
    columns = step.columns
    # the table's values are parsed into VARIANTs once, here, not per event
    rows = [(k, {c: _json_text(row.get(c)) for c in columns}) for k, row in step.table.items()]
    table = (spark.createDataFrame(rows, "_lk_key STRING, _lk_row MAP<STRING, STRING>")
             .selectExpr("_lk_key", "transform_values(_lk_row, (k, v) -> parse_json(v)) AS _lk_row"))
    df = stage.df.withColumn("_applies", f.expr(applies)).withColumn(
        "_lk_probe", f.expr(f"CASE WHEN _applies THEN CAST({key} AS STRING) END"))
    df = df.join(f.broadcast(table), df["_lk_probe"] == table["_lk_key"], "left")
    missing = step.missing
    if missing == "drop":
        df = df.where("NOT _applies OR _lk_key IS NOT NULL")
    elif missing == "error" and exprs.guarded:
        exprs.errors.append("CASE WHEN _lk_key IS NULL THEN 'LOOKUP_KEY_MISSING' END")
    nulls = "map(" + ", ".join(f"{F.quote(c)}, CAST(NULL AS VARIANT)" for c in columns) + ")"
    row_map = f"coalesce(_lk_row, {nulls})" if columns else "map()"
    if step.into is None:
        edited = f"map_concat({EVENT}, {row_map})" if columns else EVENT
        for c in columns:
            stage.types.drop([c])
            stage.types.touch(c)
    else:
        value = f"CASE WHEN _lk_key IS NULL THEN CAST(NULL AS VARIANT) ELSE to_variant_object({row_map}) END"
        edited = F.with_field(EVENT, list(step.into), value)
        stage.types.touch(step.into[0])
    error = exprs.error()
    ok = "_applies"
    if error is not None:
        df = _with_error(df, error)
        ok = "(_applies AND _err IS NULL)"
    event = f"CASE WHEN {ok} THEN {edited} ELSE {EVENT} END"
    if missing == "error" and not exprs.guarded:  # on_error: fail: the event stops the query, as a Spark error does
        event = (f"CASE WHEN _applies AND _lk_key IS NULL THEN raise_error(concat('lookup {step.id}: no row for key ', "
                 f"coalesce(_lk_probe, 'NULL'))) ELSE {event} END")
    df = df.withColumn(EVENT, f.expr(event)).drop("_lk_probe", "_lk_key", "_lk_row")
    return Stage(_finish(stage, step, df, applies, exprs), stage.types, stage.pipeline, stage.now_sql)


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
