"""``edgewise test``: pipeline unit tests from YAML fixture files (the conformance suite of the engines).

A fixture file::

    pipeline: ../examples/ysb/pipeline.yaml     # a path (relative to this file) or the pipeline inline
    tests:
      - name: keeps only views
        pipeline: views                           # which pipeline; optional when the file has one
        now: "2024-01-01T00:00:00Z"               # the fake clock (dead-letter times); default the epoch
        input:                                    # payloads; sources in the pipeline file are not used
          - {event_type: view, ad_id: a}
          - pause 30s                             # 30 s of processing time pass with no input (timers fire)
          - crash                                 # the run dies here (kill -9) and restarts from its state
          - {event_type: view, ad_id: b}
        expect:                                   # the pipeline's output, order-free
          - {ad_id: a, campaign_id: c}
        expect_sinks:                             # optional: what sinks received (tee copies, dead letters)
          dead: [...]
        expect_failures: 0                        # optional: events failed with on_error: fail
        expect_counters: {per-cell.late: 1}       # optional: step counters (late, duplicates, skipped, ...)
        batch_size: 1                             # optional: events per batch (default 1024)

Every sink is replaced by an in-memory list and state goes to a temporary SQLite file: a test never writes files
or calls a service. Results are compared order-free and deduplicated by event id, as an idempotent sink keeps
them, so a case with a crash expects the same results as the same case without it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from edgewise.clock import FakeClock
from edgewise.config import load, load_document
from edgewise.config.plan import Plan
from edgewise.config.validate import validate_model
from edgewise.config.yamlpos import load_file
from edgewise.declare import Field, Model, field_validator
from edgewise.errors import ConfigError
from edgewise.expr import values as V
from edgewise.expr.timefmt import cast_to_timestamp
from edgewise.testing import CRASH, assert_records_equal, pause, run


class FixtureCase(Model):
    name: str
    pipeline: str | None = None
    now: str | None = None
    input: list[dict[str, Any] | str] = Field(default_factory=list)
    expect: list[dict[str, Any]] | None = None
    expect_sinks: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    expect_failures: int | None = None
    expect_counters: dict[str, int] = Field(default_factory=dict)
    batch_size: int = Field(default=1024, ge=1)

    @field_validator("input")
    @classmethod
    def _markers(cls, items: list[dict[str, Any] | str]) -> list[dict[str, Any] | str]:
        for item in items:
            if isinstance(item, str):
                _marker(item)
        return items


def _marker(text: str) -> Any:
    """``crash`` or ``pause <duration>``; ``ValueError`` otherwise."""
    words = text.split()
    if words == ["crash"]:
        return CRASH
    if len(words) == 2 and words[0] == "pause":
        return pause(words[1])
    raise ValueError(f"an input item is an event (a mapping), 'crash' or 'pause <duration>'; found {text!r}")


class FixtureFile(Model):
    pipeline: str | dict[str, Any]
    description: str | None = None
    tests: list[FixtureCase] = Field(min_length=1)


@dataclass
class CaseResult:
    file: str
    name: str
    ok: bool
    message: str = ""
    unsupported: bool = False
    """The case cannot run on this engine (``message`` says why); counted apart from passes and failures."""


@dataclass
class FixtureReport:
    results: list[CaseResult] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return sum(r.ok for r in self.results)

    @property
    def failed(self) -> int:
        return sum(not r.ok and not r.unsupported for r in self.results)

    @property
    def unsupported(self) -> int:
        return sum(r.unsupported for r in self.results)


FIXTURE_SUFFIXES = (".test.yaml", ".test.yml")
"""How a fixture file's name ends."""


def find_fixture_files(paths: list[str]) -> list[str]:
    """Fixture files named by ``paths``: files as given, directories searched for ``*.test.yaml``."""
    found: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            for root, _, files in os.walk(path):
                found += [os.path.join(root, f) for f in sorted(files) if f.endswith(FIXTURE_SUFFIXES)]
        else:
            found.append(path)
    return sorted(found)


def load_fixture(path: str) -> tuple[FixtureFile, Plan]:
    doc = load_file(path)
    if isinstance(doc.data, dict) and "tests" not in doc.data and "version" in doc.data:
        folder = os.path.dirname(path) or "."
        tests = [os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.endswith(FIXTURE_SUFFIXES)]
        hint = f"; the test files beside it: {', '.join(tests)}" if tests else ""
        raise doc.error((), "this is a pipeline file, not a test file (`pipeline:` and `tests:`): check it with "
                        f"`edgewise validate {path}`, run it with `edgewise run {path}`{hint}")
    fixture = validate_model(FixtureFile, doc, ())
    base = os.path.dirname(os.path.abspath(path))
    if isinstance(fixture.pipeline, str):
        plan = load(os.path.join(base, fixture.pipeline))
    else:
        plan = load_document(doc.sub(("pipeline",)), base_dir=base)
    return fixture, plan


def run_case(plan: Plan, case: FixtureCase) -> CaseResult:
    """Run one case; the result says what differed."""
    if case.pipeline and case.pipeline not in [p.id for p in plan.pipelines]:
        return CaseResult(plan.file, case.name, False, f"no pipeline {case.pipeline!r} in {plan.file}")
    events = [item if isinstance(item, dict) else _marker(item) for item in case.input]
    result = run(plan, events, clock=FakeClock(_now_us(case.now)), batch_size=case.batch_size,
                 pipelines=[case.pipeline] if case.pipeline else None)
    problems: list[str] = []
    if case.expect is not None:
        if len(result.outputs) != 1:
            problems.append("the file has several pipelines: name one with `pipeline:`")
        else:
            _compare(problems, "output", next(iter(result.outputs.values())), case.expect)
    for sink_id, expected in case.expect_sinks.items():
        sink = result.sinks.get(sink_id)
        if sink is None:
            problems.append(f"expect_sinks names {sink_id!r}, which is not a sink of the pipeline file")
            continue
        _compare(problems, f"sink {sink_id}", sink.unique(), expected)
    for counter, expected_n in case.expect_counters.items():
        got = result.counters.get(counter, 0)
        if got != expected_n:
            problems.append(f"counter {counter}: expected {expected_n}, got {got} (counters: {result.counters})")
    if case.expect_failures is not None and result.failed != case.expect_failures:
        problems.append(f"expected {case.expect_failures} failed events, got {result.failed}: {result.errors}")
    elif case.expect_failures is None and result.failed:
        problems.append(f"{result.failed} events failed: {result.errors.strip()}")
    return CaseResult(plan.file, case.name, not problems, "\n".join(problems))


def _compare(problems: list[str], what: str, actual: list[Any], expected: list[Any]) -> None:
    try:
        assert_records_equal(actual, expected)
    except AssertionError as exc:
        problems.append(f"{what}: {exc}")


def _now_us(text: str | None) -> int:
    if text is None:
        return 0
    try:
        ts = cast_to_timestamp(text)
    except Exception:  # noqa: BLE001  # any parse failure is the same config error
        ts = None
    if ts is None:
        raise ConfigError(f"now: {text!r} is not a timestamp")
    return V.timestamp_to_us(ts)


def run_fixture_files(paths: list[str], engine: str = "local", spark: Any = None) -> FixtureReport:
    """Run every case of the fixture files on ``engine`` (``local`` or ``spark``; ``spark`` uses the given session,
    or starts one)."""
    report = FixtureReport()
    if engine == "spark" and spark is None:
        from edgewise.engine.spark.session import spark_session

        spark = spark_session("local[2]", app="edgewise-test", shuffle_partitions=2)
    for path in find_fixture_files(paths):
        fixture, plan = load_fixture(path)
        for case in fixture.tests:
            if engine == "spark":
                from edgewise.engine.spark.fixtures import run_case_on_spark

                result = run_case_on_spark(spark, plan, case, path)
            else:
                result = run_case(plan, case)
            result.file = path
            report.results.append(result)
    return report
