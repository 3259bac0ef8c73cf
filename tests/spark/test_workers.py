"""Spark's Python workers started while the driver plans (`engine/spark/workers.py`): which steps need them, the
job that starts them, and `edgewise spark` running it for a pipeline whose steps run in Python."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from edgewise.engine.spark.workers import JOB_DESCRIPTION, OPERATOR_MODULES

PYTHON_OPERATORS = re.compile(r"^\(\d+\) (FlatMapGroupsInPandasWithState|TransformWithStateInPySpark|MapInPandas|"
                              r"MapInArrow|PythonMapInArrow|ArrowEvalPython|BatchEvalPython)", re.MULTILINE)
"""Spark's operators that run Python, as its explain names them."""

STEPS = {
    "filter and annotate": ["filter: {id: f, where: \"k <> 'x'\"}", "annotate: {id: a, set: {double: t * 2}}"],
    "window": ["window: {id: w, key: [k], tumbling: 1m, aggs: {n: count()}}"],
    "dedupe": ["dedupe: {id: once, key: k, within: 1m, watermark: 5s}"],
    "aggregate after a filter": ["filter: {id: f, where: 't > 0'}",
                                 "aggregate: {id: n, key: [k], aggs: {n: count()}, into: so_far}"],
    "complete": ["complete: {id: c, key: k, parts: {a: \"kind = 'a'\", b: \"kind = 'b'\"}, timeout: 1m, into: st}"],
    "dedupe then window": ["dedupe: {id: once, key: k, within: 1m, watermark: 5s}",
                           "window: {id: w, key: [k], tumbling: 1m, aggs: {n: count()}}"],
    "transform with drop_keys": ["transform: {id: strip, ops: [{drop_keys: \"tmp_*\"}]}"],
    "transform with a rename": ["transform: {id: ren, ops: [{rename: {k: key}}]}"],
}
"""Pipelines by what they hold: native steps only, or steps Spark runs in Python."""


def _pipeline(steps: list[str]) -> str:
    listed = "".join(f"      - {s}\n" for s in steps)
    return (f"version: 1\nevent_time: \"timestamp_seconds(t)\"\nsources: [{{id: spool, type: file, path: in}}]\n"
            f"pipelines:\n  - id: p\n    steps:\n{listed}    to: [out]\nsinks: [{{id: out, type: file, path: out}}]\n")


def test_the_steps_said_to_need_python_workers_are_those_spark_runs_in_python(spark: Any, tmp_path: Path) -> None:
    """`python_worker_modules` against the query Spark plans: a pipeline has modules to import exactly where its
    plan has an operator that runs Python, and they are its Python steps' own modules."""
    from edgewise.config import load_text_plan
    from edgewise.engine.spark.job import SparkJob, SparkOptions, python_worker_modules

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-1.ndjson").write_text('{"k": "a", "t": 1, "kind": "a", "tmp_x": 1}\n')
    expected = {"dedupe": ["edgewise.steps.dedupe"], "aggregate after a filter": ["edgewise.steps.aggregate"],
                "complete": ["edgewise.steps.complete"], "dedupe then window": ["edgewise.steps.dedupe"],
                "transform with drop_keys": ["edgewise.steps.transform"]}
    for n, (name, steps) in enumerate(STEPS.items()):
        plan = load_text_plan(_pipeline(steps), file=str(tmp_path / "pipeline.yaml"), base_dir=str(tmp_path))
        job = SparkJob(spark, plan, SparkOptions(checkpoint=str(tmp_path / f"ck{n}"), once=True),
                       report=lambda text: None)
        operators = PYTHON_OPERATORS.findall(job.explain())
        modules = python_worker_modules(plan)
        assert modules == expected.get(name, []), name
        assert bool(modules) == bool(operators), (name, operators)
        assert python_worker_modules(plan, ["another"]) == []  # only the pipelines the run takes


def test_the_job_that_starts_the_workers_imports_what_the_operators_need(spark: Any) -> None:
    """One task per slot, each worker holding the operators' modules and the steps' own."""
    from edgewise.engine.spark.workers import import_on_workers

    imported = import_on_workers(spark, ["edgewise.steps.dedupe", "edgewise.steps.complete"], 2)
    assert len(imported) == 2
    for pid, modules in imported:
        assert pid > 0
        assert modules == [*OPERATOR_MODULES, "edgewise.steps.dedupe", "edgewise.steps.complete"]
    # the job's description is the job's own: later jobs of the session (a query's) do not carry it
    assert spark.sparkContext.getLocalProperty("spark.job.description") is None


def _jobs(event_log: Path) -> list[tuple[str | None, str]]:
    """(description, result) of each job in a Spark event log directory (uncompressed)."""
    started: dict[int, str | None] = {}
    ended: dict[int, str] = {}
    for path in event_log.rglob("events_*"):
        for line in path.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if event["Event"] == "SparkListenerJobStart":
                started[event["Job ID"]] = (event.get("Properties") or {}).get("spark.job.description")
            elif event["Event"] == "SparkListenerJobEnd":
                ended[event["Job ID"]] = event["Job Result"]["Result"]
    return [(started[job], ended.get(job, "unfinished")) for job in sorted(started)]


def test_edgewise_spark_starts_the_python_workers_of_a_keyed_step_while_it_plans(tmp_path: Path) -> None:
    """A run that launches its own local JVM for a pipeline with a keyed step runs the job that starts the Python
    workers once, and it succeeds; the run's results are the step's. A separate process, as the job runs only
    in a JVM the command launches (the test run's session is shared)."""
    (tmp_path / "pipeline.yaml").write_text(_pipeline(STEPS["dedupe"]))
    (tmp_path / "in").mkdir()
    events = [{"k": "a", "t": 1}, {"k": "b", "t": 2}, {"k": "a", "t": 3}]
    (tmp_path / "in" / "part-1.ndjson").write_text("".join(json.dumps(e) + "\n" for e in events))
    (tmp_path / "events").mkdir()
    event_log = ["--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir={tmp_path / 'events'}",
                 "--conf", "spark.eventLog.compress=false"]
    run = subprocess.run([sys.executable, "-m", "edgewise", "spark", "pipeline.yaml", "--once", "--checkpoint", "ck",
                          "--master", "local[2]", *event_log],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    kept = sorted(json.loads(line)["t"] for p in (tmp_path / "out").glob("*.ndjson") for line in p.read_text().split())
    assert kept == [1, 2]
    jobs = _jobs(tmp_path / "events")
    assert [job for job in jobs if job[0] == JOB_DESCRIPTION] == [(JOB_DESCRIPTION, "JobSucceeded")], jobs
