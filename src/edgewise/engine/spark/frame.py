"""The event frame: the columns every compiled step reads and writes, and the SQL that edits an event.

A pipeline's DataFrame has these columns:

=============  ==========================  ===================================================================
``id``         STRING                      the stable event id (sinks write idempotently by it)
``event_time`` TIMESTAMP                   the event time (watermarks and windows use it)
``source``     STRING                      the source id
``event``      MAP<STRING, VARIANT>        the payload: one VARIANT per top-level field, exactly as it came
``_src``       VARIANT                     the payload as the source parsed it: fields no step has touched are
                                           read from here (``fields.FieldTypes.touched``), which is much cheaper
                                           than a map lookup; NULL where a step made new events (windows)
``_to``        STRING                      ``''`` while the event goes on through the steps; a sink id once a
                                           step routed it there (a tee copy, a dead letter)
``_record``    STRING                      the JSON a routed row's sink receives
=============  ==========================  ===================================================================

Routed rows ride along to the end of the stateless steps (every step leaves them alone) and are written by the
same ``foreachBatch`` as the results, so a tee copy or a dead letter is part of the same exactly-once micro-batch.
"""

from __future__ import annotations

from edgewise.engine.spark.sql import EVENT

LIVE = "_to = ''"
"""Rows still going through the pipeline's steps."""

ISO_FORMAT = "yyyy-MM-dd'T'HH:mm:ss"


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


def with_field(event_sql: str, path: list[str], value_variant: str) -> str:
    """The event with ``path`` set to a VARIANT (objects on the way are created or extended)."""
    if len(path) == 1:
        return f"map_concat({event_sql}, map({quote(path[0])}, {value_variant}))"
    head = quote(path[0])
    inner = f"coalesce(try_cast(try_element_at({event_sql}, {head}) AS MAP<STRING, VARIANT>), map())"
    nested = with_field(inner, path[1:], value_variant)
    return f"map_concat({event_sql}, map({head}, to_variant_object({nested})))"


def without_field(event_sql: str, path: list[str]) -> str:
    """The event without ``path`` (unchanged when it is missing)."""
    if len(path) == 1:
        return f"map_filter({event_sql}, (k, v) -> k <> {quote(path[0])})"
    head = quote(path[0])
    inner = f"try_cast(try_element_at({event_sql}, {head}) AS MAP<STRING, VARIANT>)"
    nested = without_field(inner, path[1:])
    return (f"CASE WHEN {inner} IS NULL THEN {event_sql} "
            f"ELSE map_concat({event_sql}, map({head}, to_variant_object({nested}))) END")


def keeping(event_sql: str, names: list[str]) -> str:
    listed = ", ".join(quote(n) for n in names)
    return f"map_filter({event_sql}, (k, v) -> k IN ({listed}))"


def variant_at(path: list[str]) -> str:
    """The VARIANT at ``path`` of the event map as it is (NULL when missing; a JSON null stays a VARIANT null)."""
    from edgewise.engine.spark.sql import json_path

    top = f"{EVENT}[{quote(path[0])}]"
    return top if len(path) == 1 else f"variant_get({top}, '{json_path(path[1:])}')"


def record_json(event_sql: str = EVENT) -> str:
    """The JSON a sink receives for an event: its payload as one object."""
    return f"to_json({event_sql})"
