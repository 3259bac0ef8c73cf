"""``edgewise test --engine spark``: a fixture case as a Spark streaming job over a spool of its input.

The case's events are written as envelope lines (ids ``test:<n>`` and the case's clock as ingestion time, as the
local test source gives them) into a spool; the job runs with ``availableNow`` and a collecting writer. A
``crash`` marker ends a run there: the next run is a new job on the same checkpoint, as after a ``kill -9``.
Pipelines with a watermark (``window``, ``dedupe``, an event-time ``complete``) get one run per event, because
the local engine advances the watermark after every event, and Spark after a micro-batch (a run ends with the
micro-batch that moves it); every event of those cases therefore also goes through a restart of its queries
(the same job's, started again on the checkpoint; a new job only after a ``crash``, so the query is compiled once
per crash rather than once per event). The writer collects each micro-batch in one Spark job and routes its rows
itself (``BatchWriter._collect_routes``). Results are compared as locally: order-free, the last record per id.

Cases that cannot agree on Spark are reported as such, with the reason (``UNSUPPORTED``); ``docs/spark.md``
lists them.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Any, cast

import orjson

from edgewise.errors import ConfigError, EdgewiseError
from edgewise.expr.values import LONG_MAX, LONG_MIN

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from edgewise.config.plan import Plan
    from edgewise.steps.window import WindowConfig
    from edgewise.testing.fixtures import CaseResult, FixtureCase

COUNTERS = ("late",)
"""Step counters Spark reports (``<window step>.late``: rows its state operator dropped as late)."""


class Unsupported(EdgewiseError):
    """The case uses something the Spark engine does not do (the reason says what)."""


def _reason(plan: Plan, case: FixtureCase, pipeline_id: str) -> str | None:
    steps = plan.pipeline(pipeline_id).steps
    for item in case.input:
        if isinstance(item, str) and item.startswith("pause"):
            return "processing time (`pause`) does not pass inside a Spark micro-batch test"
    for step in steps:
        if step.kind == "window" and cast("WindowConfig", step.config).allowed_lateness:
            return "allowed_lateness has no Spark equivalent"
    if case.expect_failures:
        return "on Spark an event failing a step with on_error: fail stops the query (it restarts from its checkpoint)"
    return None


def run_case_on_spark(spark: SparkSession, plan: Plan, case: FixtureCase, file: str) -> CaseResult:
    from edgewise.testing.fixtures import CaseResult, _compare, _now_us

    ids = [p.id for p in plan.pipelines]
    if case.pipeline is None and len(ids) != 1:
        return CaseResult(file, case.name, False, "the file has several pipelines: name one with `pipeline:`")
    pipeline_id = case.pipeline or ids[0]
    if pipeline_id not in ids:
        return CaseResult(file, case.name, False, f"no pipeline {pipeline_id!r} in {plan.file}")
    reason = _reason(plan, case, pipeline_id)
    if reason is not None:
        return CaseResult(file, case.name, False, reason, unsupported=True)
    try:
        outputs, sinks, counters = _run(spark, plan, case, pipeline_id, _now_us(case.now))
    except ConfigError as exc:
        return CaseResult(file, case.name, False, f"does not compile on Spark: {exc}", unsupported=True)
    except Exception as exc:  # Spark's analysis and runtime errors fail the case, with the reason
        from pyspark.errors import PySparkException

        from edgewise.engine.spark.job import SparkJobFailed

        if not isinstance(exc, PySparkException | SparkJobFailed):
            raise
        return CaseResult(file, case.name, False, f"Spark failed: {str(exc).splitlines()[0][:500]}")
    problems: list[str] = []
    if case.expect is not None:
        _compare(problems, "output", by_value(outputs), by_value(case.expect))
    for sink_id, expected in case.expect_sinks.items():
        if sink_id not in plan.sinks:
            problems.append(f"expect_sinks names {sink_id!r}, which is not a sink of the pipeline file")
            continue
        _compare(problems, f"sink {sink_id}", by_value(_without_messages(sinks.get(sink_id, []))),
                 by_value(_without_messages(expected)))
    for counter, expected_n in case.expect_counters.items():
        if counter.rsplit(".", 1)[-1] not in COUNTERS:
            continue  # Spark does not report it: the case's output is still compared
        got = counters.get(counter, 0)
        if got != expected_n:
            problems.append(f"counter {counter}: expected {expected_n}, got {got} (counters: {counters})")
    return CaseResult(file, case.name, not problems, "\n".join(problems))


def _run(spark: SparkSession, plan: Plan, case: FixtureCase, pipeline_id: str,
         now_us: int) -> tuple[list[Any], dict[str, list[Any]], dict[str, int]]:
    from edgewise.engine.spark.job import SparkJob, SparkOptions, holds_event_time_state
    from edgewise.engine.spark.sinks import RESULTS
    from edgewise.sources.file import FileSourceConfig

    pipeline = plan.pipeline(pipeline_id)
    one_per_batch = holds_event_time_state(pipeline) or any(s.kind == "dedupe" for s in pipeline.steps)
    received: dict[str, dict[str, Any]] = {}

    def collect(route: str, batch_id: int, rows: list[tuple[str, str]]) -> None:
        bucket = received.setdefault(route, {})
        for event_id, record in rows:
            bucket[event_id] = orjson.loads(record)

    counters: dict[str, int] = {}
    work = tempfile.mkdtemp(prefix="edgewise-spark-test-")
    try:
        spool = os.path.join(work, "in")
        os.makedirs(spool)
        source = FileSourceConfig(id="test", type="file", path=spool)
        test_plan = dataclasses.replace(plan, sources=[source])
        # with a watermark, one event per run: each run ends with the micro-batch that moves the watermark, as
        # the local engine moves it after every event; otherwise the crashes split the runs
        runs = _runs(case.input, one_per_batch)
        n = 0
        job: SparkJob | None = None
        jobs: list[SparkJob] = []
        for index, (chunk, restart) in enumerate(runs):
            if chunk:
                _write_segment(spool, index + 1, [(f"test:{n + i}", e) for i, e in enumerate(chunk)], now_us)
                n += len(chunk)
            options = SparkOptions(checkpoint=os.path.join(work, "checkpoint"), once=True,
                                   now_sql=f"timestamp_micros({now_us})", now_us=now_us,
                                   flush=index == len(runs) - 1)
            if job is None or restart:  # a crash: a new job (a new driver's objects) on the same checkpoint
                job = SparkJob(spark, test_plan, options, collect=collect, pipelines=[pipeline_id],
                               report=lambda text: None)
                jobs.append(job)
            else:  # the same query plan started again: its queries restart from the checkpoint all the same
                job.options = options
            job.run()
        for step in pipeline.steps:
            if step.kind == "window":
                key = f"{step.id}.late"
                counters[key] = sum(j.late_counts().get(pipeline_id, 0) for j in jobs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    outputs = list(received.get(RESULTS, {}).values())
    sinks = {route: list(rows.values()) for route, rows in received.items() if route != RESULTS}
    for sink_id in pipeline.to:
        sinks.setdefault(sink_id, []).extend(outputs)
    return outputs, sinks, counters


def _without_messages(records: list[Any]) -> list[Any]:
    """Dead letters with their error class but not its message: on Spark the message is the class's own words
    (``sql.ERROR_MESSAGES``), locally it names the value (docs/spark.md, known differences)."""
    out = []
    for record in records:
        error = record.get("error") if isinstance(record, dict) else None
        if isinstance(error, dict) and "type" in error:
            record = {**record, "error": {k: v for k, v in error.items() if k != "message"}}
        out.append(record)
    return out


def by_value(value: Any) -> Any:
    """Numbers compared by value: Spark's ``parse_json`` keeps a JSON number exactly but reads ``-5.0`` as the
    decimal ``-5``, which it writes back as ``-5``; and where the local engine computes in DOUBLE what Spark
    computes in DECIMAL (a JSON ``1.5`` is a DOUBLE locally, a DECIMAL in a VARIANT) the last digit can differ,
    so fractions are compared to 12 significant digits (docs/spark.md, known differences). An integral double is
    an integer only within 64 bits, as JSON's integers are (``3.49e19`` stays a double, to 12 digits too)."""
    if isinstance(value, float):
        if value.is_integer() and LONG_MIN <= value <= LONG_MAX:
            return int(value)
        return float(f"{value:.12g}")
    if isinstance(value, list):
        return [by_value(v) for v in value]
    if isinstance(value, dict):
        return {k: by_value(v) for k, v in value.items()}
    return value


def _runs(items: list[dict[str, Any] | str], one_per_event: bool) -> list[tuple[list[dict[str, Any]], bool]]:
    """The case's input as runs of a job: (events, whether the run follows a crash, or is the first). One event a
    run where ``one_per_event``, else the runs are split at the crashes only (a run after the last crash may have
    no events: it still runs, to flush)."""
    runs: list[tuple[list[dict[str, Any]], bool]] = [] if one_per_event else [([], True)]
    restart = True
    for item in items:
        if isinstance(item, dict):
            if one_per_event:
                runs.append(([item], restart))
                restart = False
            else:
                runs[-1][0].append(item)
        elif item.strip() == "crash":
            restart = True
            if not one_per_event:
                runs.append(([], True))
    return runs


def _write_segment(spool: str, number: int, events: list[tuple[str, dict[str, Any]]], now_us: int) -> None:
    """One sealed spool segment; its modification time orders it after the previous ones (Spark reads segments
    oldest first)."""
    from edgewise.jsonio import dumps_line

    path = os.path.join(spool, f"part-{number:06d}.ndjson")
    with open(path + ".open", "wb") as fh:
        for event_id, payload in events:
            fh.write(dumps_line({"id": event_id, "event_time": now_us, "source": "test", "payload": payload}))
    os.replace(path + ".open", path)
    stamp = 1_000_000_000 + number
    os.utime(path, (stamp, stamp))
