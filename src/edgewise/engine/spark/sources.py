"""Replayable sources as streaming DataFrames in the event frame's shape (``frame.py``).

* ``file``: the NDJSON spool directory that the ``file`` sink and edge daemons write. Only sealed segments
  (``*.ndjson``; a segment being written ends in ``.open``) are read, each exactly once, tracked in the checkpoint.
  A line is either an envelope ``{"id", "event_time", "source", "payload"}`` (what ``envelope: true`` writes: the
  id and event time are kept) or a plain JSON object, whose id is ``<source id>:<file name>:<line>`` as on the
  local engine. A line that is not a JSON object is reported and skipped, never silently lost.
* ``file`` in another format (hfp, csv, clf, regex, json): each file read whole and decoded by the local engine's
  code (``decoded.py``).
* ``generator``: the workload is written once into a spool under the checkpoint directory and read from there,
  so a restarted job replays the same events.
* ``nats``: ``edgewise.engine.spark.nats`` (a Python streaming DataSource over a JetStream stream's sequence numbers).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from edgewise.engine.spark import frame as F
from edgewise.engine.spark.sql import SOURCE, json_path
from edgewise.errors import ConfigError, EdgewiseError
from edgewise.schema import BOOLEAN, INTEGER, NUMBER, TEXT, held_columns
from edgewise.schema import Column as DeclaredColumn
from edgewise.sources.link import HEARTBEAT

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from edgewise.config.plan import Plan

SPOOL_GLOB = "*.ndjson"
HEARTBEAT_ROUTE = "_heartbeat"
"""The route of a link's heartbeats: past every step (the watermark sees them) to no sink."""


def envelope_sql(parsed: str, line: str) -> str:
    """SQL: the line (text ``line``, parsed ``parsed``) is an envelope: exactly the keys id, event_time, source,
    payload. The writers put ``id`` first, so the exact (costlier) check runs only on lines that start that way."""
    keys = f"sort_array(map_keys(try_cast({parsed} AS MAP<STRING, VARIANT>)))"
    return (f"CASE WHEN startswith({line}, '{{\"id\":') THEN "
            f"coalesce({keys} = array('event_time', 'id', 'payload', 'source'), false) ELSE false END")


def payload_sql(parsed: str, envelope: str) -> str:
    """SQL: a spool line's event (its envelope's payload, or the line itself)."""
    return f"CASE WHEN {envelope} THEN variant_get({parsed}, '$.payload') ELSE {parsed} END"


def spool_frame(spark: SparkSession, directory: str, source_id: str, *, max_files: int | None = None,
                line_ids: bool = True, heartbeats: bool = False) -> DataFrame:
    """The sealed segments of a spool directory, one row per line, in the event frame's shape.

    A plain line's id names its line (``<source>:<file>:<line>``), which needs each segment read whole and split
    into numbered lines. Where nothing downstream reads the ids (``line_ids`` false: the job knows), Spark's own
    line reader is cheaper; the id is then ``<source>:<file>``."""
    from pyspark.sql import functions as f

    reader = spark.readStream.format("text").option("pathGlobFilter", SPOOL_GLOB)
    if max_files is not None:
        reader = reader.option("maxFilesPerTrigger", str(max_files))
    if line_ids:
        raw = reader.option("wholetext", "true").load(directory).select(
            f.col("_metadata.file_name").alias("_file"),
            f.col("_metadata.file_modification_time").alias("_mtime"),
            f.posexplode(f.split("value", "\n")).alias("_pos", "_line"))
        line_id = f"concat({F.quote(source_id + ':')}, _file, ':', CAST(_pos + 1 AS STRING))"
    else:  # lines end at \n only, as the split above and the local engine take them
        raw = reader.option("lineSep", "\n").load(directory).select(
            f.col("_metadata.file_name").alias("_file"),
            f.col("_metadata.file_modification_time").alias("_mtime"),
            f.col("value").alias("_line"))
        line_id = f"concat({F.quote(source_id + ':')}, _file)"
    raw = raw.where("trim(_line) <> ''")
    # the parsed line is made by a generator (explode of a one-element array): Spark cannot inline a generator's
    # output into the filters it pushes down, which would parse each line again per condition
    parsed = raw.select("*", f.explode(f.array(f.expr("try_parse_json(_line)"))).alias("_v"))
    parsed = parsed.withColumn("_env", f.expr(envelope_sql("_v", "_line")))
    # the event and whether it is an object come out of a generator too: inlined into the filters a pipeline's
    # steps push down, each would repeat the envelope test (three times in a YSB filter: more generated code for
    # Spark to compile at the first micro-batch, BENCHMARKS.md)
    event = f.struct(f.expr(payload_sql("_v", "_env")).alias(SOURCE),
                     f.expr(is_object_sql("_v", "_line", "_env")).alias("_object"))
    parsed = parsed.select("*", f.inline(f.array(event)))
    return parsed.select(
        *envelope_columns(line_id, "_mtime", source_id),
        f.col(SOURCE),
        f.expr(route_sql("_object", heartbeats)).alias("_to"),
        f.expr("CASE WHEN _object THEN NULL ELSE _line END").alias("_record"))


def envelope_columns(plain_id: str, plain_time: str, source_id: str) -> list[Column]:
    """``id``, ``event_time`` and ``source`` of a parsed line ``_v`` that is an envelope where ``_env``: the
    envelope's, else the plain line's (``plain_id``, ``plain_time``: SQL) and the reading source's id."""
    from pyspark.sql import functions as f

    return [
        f.expr(f"CASE WHEN _env THEN variant_get(_v, '$.id', 'string') ELSE {plain_id} END").alias("id"),
        f.expr("CASE WHEN _env AND variant_get(_v, '$.event_time', 'bigint') IS NOT NULL "
               f"THEN timestamp_micros(variant_get(_v, '$.event_time', 'bigint')) ELSE {plain_time} END")
        .alias("event_time"),
        f.expr(f"CASE WHEN _env THEN coalesce(variant_get(_v, '$.source', 'string'), {F.quote(source_id)}) "
               f"ELSE {F.quote(source_id)} END").alias("source")]


def route_sql(is_object: str, heartbeats: bool) -> str:
    """SQL: a line's ``_to``: its event goes on (``''``), it is malformed, or (a link's, ``heartbeats``) it is a
    heartbeat, routed past every step to no sink."""
    beat = (f"WHEN _env AND variant_get(_v, '$.source', 'string') = {F.quote(HEARTBEAT)} "
            f"THEN {F.quote(HEARTBEAT_ROUTE)} " if heartbeats else "")
    return f"CASE {beat}WHEN {is_object} THEN '' ELSE {F.quote(F.MALFORMED)} END"


def sealed_segments(directory: str) -> list[str]:
    """The names of a spool directory's sealed segments (``SPOOL_GLOB``: one being written ends in ``.open``), in
    name order. OSError where the directory cannot be listed."""
    return sorted(n for n in os.listdir(directory) if fnmatch.fnmatch(n, SPOOL_GLOB))


def out_of_name_order(directory: str) -> str | None:
    """Where Spark would not read a spool's sealed segments in name order (its file source orders them by
    modification time, to the millisecond; the local engine reads them by name): the first two segments whose
    modification times do not rise with their names, said in words; None where they all do."""
    try:
        names = sealed_segments(directory)
    except OSError:
        return None
    before: tuple[str, int] | None = None
    for name in names:
        try:
            ms = os.stat(os.path.join(directory, name)).st_mtime_ns // 1_000_000
        except OSError:
            continue
        if before is not None and ms == before[1]:
            return f"{before[0]} and {name} share a modification time"
        if before is not None and ms < before[1]:
            return f"{name} was modified before {before[0]}"
        before = (name, ms)
    return None


def is_object_sql(parsed: str, line: str, envelope: str) -> str:
    """SQL: the line's event is a JSON object. A line that starts with ``{`` and parses is one, which spares the
    common case a cast of the whole value to a map."""
    def cast(value: str) -> str:
        return f"try_cast({value} AS MAP<STRING, VARIANT>) IS NOT NULL"

    return (f"CASE WHEN {parsed} IS NULL THEN false WHEN {envelope} THEN {cast(payload_sql(parsed, envelope))} "
            f"WHEN startswith({line}, '{{') THEN true ELSE {cast(parsed)} END")


def source_frame(spark: SparkSession, plan: Plan, source: Any, checkpoint: str, *,
                 max_files: int | None = None, line_ids: bool = True) -> DataFrame:
    """The events of one source, for a plan ``check_plan`` accepted (``SparkJob`` runs it first), held to its
    declared schema."""
    df = _read_frame(spark, plan, source, checkpoint, max_files=max_files, line_ids=line_ids)
    columns = held_columns(source)
    return held_to_schema(df, columns) if columns else df


_KIND_SQL = {
    INTEGER: "{k} = 'BIGINT'",  # a JSON integer in BIGINT's range (beyond it, or 3.0, is a DECIMAL in a VARIANT)
    NUMBER: "({k} IN ('BIGINT', 'DOUBLE', 'FLOAT') OR {k} LIKE 'DECIMAL%')",
    TEXT: "{k} = 'STRING'",
    BOOLEAN: "{k} = 'BOOLEAN'",
}
"""SQL testing a VARIANT's ``schema_of_variant`` (``{k}``) for each kind of value a declaration takes."""


def held_to_schema(df: DataFrame, columns: list[DeclaredColumn]) -> DataFrame:
    """``df`` with every event whose declared field holds a value of another kind routed as malformed, its record
    saying which field and value (``edgewise/schema.py``: the local engine skips the same events).

    Each field's kind (``schema_of_variant`` of its value) is computed once per event, by a generator: written
    into the tests below, Spark computed it up to three times per field (its common-subexpression pass does not
    reach into a CASE's later branches), and the check cost as much as parsing the line (BENCHMARKS.md, keyed
    steps on Spark)."""
    from pyspark.sql import functions as f

    values = [f"variant_get({SOURCE}, {F.quote(json_path([column.name]))}, 'VARIANT')" for column in columns]
    kinds = [f"_kind{i}" for i in range(len(columns))]
    found = f.struct(*[f.expr(f"CASE WHEN {F.LIVE} THEN schema_of_variant({value}) END").alias(kind)
                       for value, kind in zip(values, kinds, strict=True)])
    cases = [f"WHEN {kind} <> 'VOID' AND NOT {_KIND_SQL[column.kind].format(k=kind)} "
             f"THEN concat({F.quote(column.misfit_words)}, to_json({value}))"
             for column, value, kind in zip(columns, values, kinds, strict=True)]
    misfit = f"CASE {' '.join(cases)} END"
    return (df.select("*", f.inline(f.array(found)))
              .withColumn("_misfit", f.expr(misfit))
              .withColumn("_to", f.expr(f"CASE WHEN _misfit IS NULL THEN _to ELSE {F.quote(F.MALFORMED)} END"))
              .withColumn("_record", f.expr("coalesce(_misfit, _record)"))
              .drop("_misfit", *kinds))


def _read_frame(spark: SparkSession, plan: Plan, source: Any, checkpoint: str, *,
                max_files: int | None = None, line_ids: bool = True) -> DataFrame:
    kind = source.type
    if kind == "file":
        from edgewise.engine.local import _base

        path = _base(plan).path(source.path)
        if source.format != "ndjson":
            from edgewise.engine.spark.decoded import decoded_frame

            reader = spark.readStream
            if max_files is not None:
                reader = reader.option("maxFilesPerTrigger", str(max_files))
            return decoded_frame(reader, source, path, file_root(source, path))
        return spool_frame(spark, path, source.id, max_files=max_files, line_ids=line_ids,
                           heartbeats=source.is_link)
    if kind == "generator":
        directory = generate_spool(source, os.path.join(checkpoint, "_generator", source.id))
        return spool_frame(spark, directory, source.id, max_files=max_files, line_ids=line_ids)
    if kind == "nats":
        from edgewise.engine.spark.nats import nats_frame

        return nats_frame(spark, source)
    raise AssertionError(f"source {source.id} ({kind}): check_plan refuses it before a job is built")


SPARK_SOURCE_TYPES = ("file", "nats", "generator")


SPARK_REFUSED_STEPS = {
    "entwine": "a timeline is one ordered, hash-chained log written by one process, and Spark runs a step in many "
               "tasks at once; entwine on the edge daemon (or `edgewise run`) before the events reach Spark, or "
               "after Spark in a daemon that reads its output",
}
"""Steps Spark does not run, and why (docs/spark.md)."""


def check_plan(plan: Plan) -> None:
    """Refuse, before Spark starts, what the Spark engine cannot read or run, each problem at its file and line: a
    source that is not replayable, an NDJSON spool that is not a directory, files that do not exist, a step
    Spark does not run."""
    from edgewise.engine.local import _base
    from edgewise.sources.file import FileSourceConfig
    from edgewise.sources.paths import FileSet

    if not plan.sources:
        raise plan.error(("sources",), "the Spark engine reads the file's `sources:` (a file spool, nats or a "
                         "generator); this file declares none")
    problems: list[ConfigError] = []
    for i, source in enumerate(plan.sources):
        if source.type not in SPARK_SOURCE_TYPES:
            hint = ("point a `file` source at the recording instead (format: hfp, ndjson, csv, ...)"
                    if source.type == "replay" else
                    f"an edge daemon can spool {source.type} events with a file sink for Spark to read")
            problems.append(plan.error(("sources", i, "type"), f"the Spark engine reads replayable sources "
                                       f"({', '.join(SPARK_SOURCE_TYPES)}), not {source.type}: {hint}"))
        elif isinstance(source, FileSourceConfig):
            path = _base(plan).path(source.path)
            if source.format == "ndjson" and not os.path.isdir(path):
                problems.append(plan.error(("sources", i, "path"), f"{path} is not a directory: on Spark a file "
                                           "source in format ndjson reads a spool directory of sealed *.ndjson "
                                           "segments (what the file sink writes); for other files give their "
                                           "format"))
            elif source.format != "ndjson":
                try:
                    FileSet(path, source_id=source.id, as_written=source.path).files()
                except EdgewiseError as exc:
                    problems.append(plan.error(("sources", i, "path"), str(exc)))
    problems += refused_steps(plan)
    if problems:
        raise ConfigError.of(problems)


def refused_steps(plan: Plan, placed: Mapping[str, str] | None = None) -> list[ConfigError]:
    """The steps Spark does not run (``SPARK_REFUSED_STEPS``, chains ``refused_chain`` refuses), each at its file and
    line. ``placed``: pipeline id -> why its steps are at the hub (a split file's hub part), said with the step."""
    from edgewise.engine.spark.chains import refused_chain

    problems = []
    for pipeline in plan.pipelines:
        why_here = (placed or {}).get(pipeline.id)
        for j, step in enumerate(pipeline.steps):
            why = SPARK_REFUSED_STEPS.get(step.kind)
            if why:
                said = (f"step {step.id} is placed at the hub ({why_here}), and {step.kind}" if why_here
                        else f"step {step.id}: {step.kind}")
                problems.append(plan.error((*pipeline.step_path(j), step.kind), f"{said} does not run on Spark: {why}"))
        refused = refused_chain(pipeline.steps)
        if refused is not None:
            j, why = refused
            problems.append(plan.error((*pipeline.step_path(j), pipeline.steps[j].kind), why))
    return problems


SHORT_JOB_BYTES = 48 * 2**20
"""The most input (bytes of files) a ``--once`` job is started with Java's quick compiler for
(``session.QUICK_COMPILER``). Measured on the keyed steps' benchmark (a ``dedupe``, 2 cores, from process start):
C1 alone took 21% less time over 20 MB (300,000 events), 16% less over 40 MB, and 30% more over 200 MB, where the
optimising compiler's faster code repays its compiling (BENCHMARKS.md)."""


def input_bytes(plan: Plan) -> int | None:
    """The bytes the plan's sources hold now, where every source is files (an NDJSON spool's sealed segments, a
    file set); None where one is not (a generator, NATS) or cannot be listed (``check_plan`` says why)."""
    from edgewise.engine.local import _base
    from edgewise.sources.paths import FileSet

    total = 0
    for config in plan.sources:
        source: Any = config  # a file source's config has a path and a format
        if source.type != "file":
            return None
        path = _base(plan).path(source.path)
        try:
            if source.format == "ndjson":
                names = [os.path.join(path, n) for n in sealed_segments(path)]
            else:
                names = FileSet(path, source_id=source.id, as_written=source.path).files()
            total += sum(os.stat(name).st_size for name in names)
        except (OSError, EdgewiseError):
            return None
    return total


def short_job(plan: Plan, once: bool) -> bool:
    """A run that is over in seconds: ``--once`` over files of at most ``SHORT_JOB_BYTES``."""
    size = input_bytes(plan) if once else None
    return size is not None and size <= SHORT_JOB_BYTES


def file_root(source: Any, path: str) -> str:
    """The directory a file source's names in ids are relative to (``sources/paths.py``)."""
    from edgewise.sources.paths import FileSet

    return FileSet(path, source_id=source.id, as_written=source.path).root()


def generate_spool(source: Any, directory: str, per_segment: int = 200_000) -> str:
    """Write a generator's events as sealed segments, once (a restarted job reads the same files)."""
    from edgewise.jsonio import dumps_line
    from edgewise.sources.ysb import YsbWorkload

    done = os.path.join(directory, "_COMPLETE")
    if os.path.exists(done):
        return directory
    os.makedirs(directory, exist_ok=True)
    workload = YsbWorkload(seed=source.seed, campaigns=source.campaigns, ads_per_campaign=source.ads_per_campaign,
                           events_per_second=source.events_per_second)
    segment = 0
    buffer: list[bytes] = []

    def seal() -> None:
        nonlocal segment, buffer
        name = os.path.join(directory, f"part-{segment:06d}.ndjson")
        with open(name + ".open", "wb") as fh:
            fh.write(b"".join(buffer))
        os.replace(name + ".open", name)
        segment += 1
        buffer = []

    for event in workload.events(source.count):
        buffer.append(dumps_line(event))
        if len(buffer) >= per_segment:
            seal()
    if buffer:
        seal()
    with open(done, "w", encoding="utf-8") as fh:
        fh.write(f"{source.count}\n")
    return directory
