"""The event frame: the columns every compiled step reads and writes, and the SQL that reads and edits an event.

A pipeline's DataFrame has these columns:

=============  ==========================  ===================================================================
``id``         STRING                      the stable event id (sinks write idempotently by it)
``event_time`` TIMESTAMP                   the event time (watermarks and windows use it)
``source``     STRING                      the source id
``_src``       VARIANT                     the payload as the source parsed it, exactly as it came
``_to``        STRING                      ``''`` while the event goes on through the steps; a sink id once a
                                           step routed it there (a tee copy, a dead letter)
``_record``    STRING                      the JSON a routed row's sink receives
=============  ==========================  ===================================================================

The event is not one column but a layout the compiler knows (``fields.FieldTypes``): a *base* (``_src``, or after
a step that needs the whole event as a value, an ``event`` column of type ``MAP<STRING, VARIANT>``), less the
fields a ``keep`` left out, with the top-level fields steps set or dropped held in columns of their own (one
VARIANT each; NULL where a field was dropped). Spark then never builds or edits a map per event where a pipeline
only reads fields, sets some and keeps a few: reads go straight to the VARIANT that holds the field, and the record
a sink receives is ``to_json`` of the source (nothing changed), of a struct (after a ``keep``: the fields are
known), or of the map the layout describes. A map lookup and ``to_json`` of a map cost about twice a VARIANT path
read and a struct's ``to_json`` (BENCHMARKS.md, YSB on Spark).

Routed rows ride along to the end of the stateless steps (every step leaves them alone) and are written by the
same ``foreachBatch`` as the results, so a tee copy or a dead letter is part of the same exactly-once micro-batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgewise.engine.spark.fields import ABSENT, FieldTypes
from edgewise.engine.spark.sql import EVENT, SOURCE, json_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

FRAME_COLUMNS = ["id", "event_time", "source", SOURCE, "_to", "_record"]
"""The columns of every row; a routed row carries nothing else (its event is in ``_record``)."""
LIVE = "_to = ''"
"""Rows still going through the pipeline's steps."""
MALFORMED = "_malformed"
"""``_to`` of an input line that is not a JSON object: counted and reported, never silently lost."""
MALFORMED_METRIC = "edgewise_malformed"
"""The observed metric counting malformed lines where they do not reach the writer (``count_malformed``)."""

ISO_FORMAT = "yyyy-MM-dd'T'HH:mm:ss"
JSON_NULL = "parse_json('null')"
"""A JSON null: a field that is present with the value null."""
MAP_TYPE = "MAP<STRING, VARIANT>"


def quote(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def iso_timestamp(sql: str) -> str:
    """A TIMESTAMP as the local engine writes it: RFC 3339 UTC, ``Z``, microseconds only when there are any."""
    return (f"CASE WHEN ({sql}) IS NULL THEN NULL WHEN unix_micros({sql}) % 1000000 = 0 "
            f"THEN date_format({sql}, \"{ISO_FORMAT}'Z'\") "
            f"ELSE date_format({sql}, \"{ISO_FORMAT}.SSSSSS'Z'\") END")


def to_variant(sql: str, spark_type: str) -> str:
    """A typed value as a VARIANT, encoded as the local engine writes it (timestamps as RFC 3339 text)."""
    t = spark_type.lower()
    if t == "variant":
        return sql
    if t.startswith("timestamp"):
        return f"CAST({iso_timestamp(sql)} AS VARIANT)"
    if t.startswith(("struct", "map")):
        return f"to_variant_object({sql})"
    if t.startswith("array") and ("struct" in t or "map" in t or "timestamp" in t):
        return f"parse_json(to_json({sql}))"
    if t == "void":
        return "CAST(NULL AS VARIANT)"
    return f"CAST({sql} AS VARIANT)"


def present(variant_sql: str) -> str:
    """A value a step sets: SQL's NULL is written as a JSON null (the field is there)."""
    return f"coalesce({variant_sql}, {JSON_NULL})"


def count_malformed(df: DataFrame) -> DataFrame:
    """``df``, counting its malformed lines (and keeping one as an example) in an observed metric of the
    micro-batch, for a query whose malformed lines go no further (a window's input): the writer reports them from
    the query's progress (``sinks.BatchWriter.take_progress``). ``df`` needs only ``_to`` and ``_record``."""
    from pyspark.sql import functions as f

    malformed = f.col("_to") == MALFORMED
    return df.observe(MALFORMED_METRIC, f.count(f.when(malformed, 1)).alias("lines"),
                      f.min(f.when(malformed, f.substring("_record", 1, 80))).alias("example"))


# ---------------------------------------------------------------- reading the event


def field_variant(types: FieldTypes, name: str) -> str:
    """SQL: the VARIANT of top-level field ``name`` (NULL when the event has no such field)."""
    held = types.holder(name)
    if held is not None:
        return held
    if types.base_map:
        return f"{EVENT}[{quote(name)}]"
    return f"variant_get({SOURCE}, '{json_path([name])}')"


def variant_at(types: FieldTypes, path: list[str]) -> str:
    """SQL: the VARIANT at ``path`` (NULL when missing; a JSON null stays a VARIANT null)."""
    top = field_variant(types, path[0])
    return top if len(path) == 1 else f"variant_get({top}, '{json_path(path[1:])}')"


def _names(names: list[str]) -> str:
    return ", ".join(quote(n) for n in names)


def event_map(types: FieldTypes) -> str:
    """SQL: the whole event as a ``MAP<STRING, VARIANT>``."""
    base = EVENT if types.base_map else f"try_cast({SOURCE} AS {MAP_TYPE})"
    if types.kept is not None:
        base = (f"map_filter({base}, (k, v) -> k IN ({_names(types.kept)}))" if types.kept
                else f"CAST(map() AS {MAP_TYPE})")
    if not types.held:
        return base
    names = list(types.held)
    entries = ", ".join(f"{quote(n)}, {sql}" for n, sql in types.held.items())
    return (f"map_concat(map_filter({base}, (k, v) -> k NOT IN ({_names(names)})), "
            f"map_filter(map({entries}), (k, v) -> v IS NOT NULL))")


def event_variant(types: FieldTypes) -> str:
    """SQL: the whole event as one VARIANT object."""
    if not types.held and types.kept is None and not types.base_map:
        return SOURCE
    return f"to_variant_object({event_map(types)})"


def record_json(types: FieldTypes) -> str:
    """SQL: the JSON a sink receives for an event: its payload as one object."""
    if not types.held and types.kept is None and not types.base_map:
        return f"to_json({SOURCE})"
    if types.kept is not None:  # every field it can have is known: a struct (an absent field's NULL is left out)
        names = list(dict.fromkeys([*types.kept, *types.held]))
        if not names:
            return "'{}'"
        return f"to_json(named_struct({', '.join(f'{quote(n)}, {field_variant(types, n)}' for n in names)}))"
    return f"to_json({event_map(types)})"


# ---------------------------------------------------------------- editing the event


def _with_path(map_sql: str, path: list[str], value_variant: str) -> str:
    """The map with ``path`` set to a VARIANT (objects on the way are created or extended)."""
    if len(path) == 1:  # the session's map key policy is LAST_WIN: the new value replaces the old
        return f"map_concat({map_sql}, map({quote(path[0])}, {value_variant}))"
    head = quote(path[0])
    inner = f"coalesce(try_cast(try_element_at({map_sql}, {head}) AS {MAP_TYPE}), map())"
    return _with_path(map_sql, path[:1], f"to_variant_object({_with_path(inner, path[1:], value_variant)})")


def _without_path(map_sql: str, path: list[str]) -> str:
    """The map without ``path`` (unchanged when it is missing)."""
    if len(path) == 1:
        return f"map_filter({map_sql}, (k, v) -> k <> {quote(path[0])})"
    head = quote(path[0])
    inner = f"try_cast(try_element_at({map_sql}, {head}) AS {MAP_TYPE})"
    return (f"CASE WHEN {inner} IS NULL THEN {map_sql} "
            f"ELSE {_with_path(map_sql, path[:1], f'to_variant_object({_without_path(inner, path[1:])})')} END")


class Edit:
    """One step's changes to the event's top-level fields: ``changed`` maps each field it changes to SQL of the
    field's new VARIANT (NULL: dropped), over the fields as they were before the step (``types``)."""

    def __init__(self, types: FieldTypes) -> None:
        self.types = types
        self.changed: dict[str, str] = {}

    def current(self, name: str) -> str:
        """SQL: top-level field ``name`` with this step's earlier changes."""
        return self.changed.get(name) or field_variant(self.types, name)

    def value_at(self, path: list[str]) -> str:
        top = self.current(path[0])
        return top if len(path) == 1 else f"variant_get({top}, '{json_path(path[1:])}')"

    def set(self, path: list[str], value_variant: str) -> None:
        """Set ``path`` to a VARIANT (SQL's NULL: a JSON null)."""
        name = path[0]
        if len(path) == 1:
            self.changed[name] = present(value_variant)
            return
        inner = f"coalesce(try_cast({self.current(name)} AS {MAP_TYPE}), map())"
        self.changed[name] = f"to_variant_object({_with_path(inner, path[1:], value_variant)})"

    def drop(self, path: list[str]) -> None:
        name = path[0]
        if len(path) == 1:
            self.changed[name] = ABSENT
            return
        current = self.current(name)
        inner = f"try_cast({current} AS {MAP_TYPE})"
        self.changed[name] = (f"CASE WHEN {inner} IS NULL THEN {current} "
                              f"ELSE to_variant_object({_without_path(inner, path[1:])}) END")

    def only_if(self, condition: str, names: list[str], before: dict[str, str]) -> None:
        """The changes of ``names`` (made since ``before``) take effect only where ``condition`` holds."""
        for name in dict.fromkeys(names):
            if name in self.changed and self.changed[name] != before.get(name):
                earlier = before.get(name) or field_variant(self.types, name)
                self.changed[name] = f"CASE WHEN {condition} THEN {self.changed[name]} ELSE {earlier} END"


def keep_fields(types: FieldTypes, names: list[str]) -> None:
    """The event keeps only ``names`` (on every row: the layout says so)."""
    types.kept = [n for n in names if types.kept is None or n in types.kept]
    types.held = {n: sql for n, sql in types.held.items() if n in names}
    types.typed = {n: typed for n, typed in types.typed.items() if n in names}
    types.keep(names)
