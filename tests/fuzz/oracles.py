"""The three oracles of the pipeline fuzzer (issue 13).

(a) the local engine against Spark: order-free results, dead letters (event, step, error class) and sink records;
(b) the local engine with crash markers at random positions, its sinks failing now and then, against the
    uninterrupted run: nothing lost, nothing twice (as an idempotent sink keeps records by id);
(c) for a lone window or aggregate over plain fields, a batch computation written here, independently of the
    engine, from the documented semantics.

Each returns a list of problems (empty: agreed); ``mismatch`` turns one into a readable report.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import yaml

from edgewise.clock import FakeClock
from edgewise.config import BuildContext, load_text_plan
from edgewise.config.plan import Plan
from edgewise.engine.local import STDOUT, LocalEngine
from edgewise.errors import SinkError
from edgewise.events import Batch
from edgewise.jsonio import dumps
from edgewise.placement import LINK, edge_plan, hub_to_run
from edgewise.testing import CRASH, ListSink, run
from tests.fuzz.generate import Case

NOW_US = 1_700_000_000_000_000
"""The clock of both engines: dead letters' ``failed_at``."""


def canonical(record: Any) -> str:
    """A record as sorted JSON with numbers by value (fractions to 12 significant digits, integral floats as
    integers: Spark keeps JSON numbers as decimals, the local engine as doubles; docs/spark.md)."""
    from edgewise.engine.spark.fixtures import by_value

    return orjson.dumps(by_value(orjson.loads(dumps(record))), option=orjson.OPT_SORT_KEYS).decode()


def dead_letter_key(record: dict[str, Any]) -> str:
    """What both engines must agree on in a dead letter: the event, the step and the error class (messages are
    Spark's own words there)."""
    return canonical({"event": record.get("event"), "step": record.get("step"),
                      "type": (record.get("error") or {}).get("type")})


Outputs = dict[str, Counter[str]]
"""Route ("" = results, else a sink id) -> multiset of canonical records."""

FAILED = "<failed>"
"""The route of events that failed a step with ``on_error: fail`` (reported, and the run exits 1), as dead
letters: the event as it came to the step, the step, the error class."""


IdOf = Any
"""``(id, record) -> id or None``: the id a record is compared with (None: its id is not compared)."""


def _keyed(route: str, pairs: list[tuple[str, Any]], id_of: IdOf) -> Counter[str]:
    """A route's records as canonical keys: dead letters by event, step and error class; results, given
    ``id_of``, with their ids."""
    if route in ("dead", FAILED):
        return Counter(dead_letter_key(r) for _, r in pairs)
    if id_of is not None and route == "":
        return Counter(canonical({"id": id_of(i, r), "record": r}) for i, r in pairs)
    return Counter(canonical(r) for _, r in pairs)


def _local_outputs(case: Case, directory: Path, id_of: IdOf = None, plan: Plan | None = None) -> Outputs:
    if plan is None:
        plan = load_text_plan(case.pipeline_text(), file=str(directory / "pipeline.yaml"), base_dir=str(directory))
    sinks = {sid: ListSink(sid) for sid in plan.sinks if not sid.startswith(LINK)}
    sinks[STDOUT] = ListSink(STDOUT)
    engine = LocalEngine(plan, clock=FakeClock(NOW_US), sinks=dict(sinks), stdout=io.BytesIO(), errors=io.StringIO())
    failed: list[tuple[str, Any]] = []

    def on_failed(one: Batch, exc: Exception, pipeline_id: str, step_id: str) -> None:
        failed.append(("", {"event": one.payloads[0], "step": step_id,
                            "error": {"type": getattr(exc, "error_class", type(exc).__name__)}}))

    engine.ctx.on_failed = on_failed
    engine.run([plan.source_classes[s.id](s, BuildContext(str(directory))) for s in plan.sources])
    out: Outputs = {FAILED: _keyed(FAILED, failed, None)}
    for sid, sink in sinks.items():
        route = "" if sid == STDOUT else sid
        out[route] = _keyed(route, list(zip(sink.ids, sink.records, strict=True)), id_of)
    return out


def _spark_outputs(spark: Any, case: Case, directory: Path, id_of: IdOf = None, plan: Plan | None = None) -> Outputs:
    from edgewise.engine.spark.job import SparkJob, SparkOptions

    if plan is None:
        plan = load_text_plan(case.pipeline_text(), file=str(directory / "pipeline.yaml"), base_dir=str(directory))
    got: dict[str, list[tuple[str, Any]]] = {}

    def collect(route: str, batch_id: int, rows: list[tuple[str, str]]) -> None:
        got.setdefault(route, []).extend((i, orjson.loads(r)) for i, r in rows)

    one_each = case.micro_batches or case.continuous
    # processing-time timers run on Spark's clock: a step's clock fixed years before it would time out at once
    clock = None if any(s.get("complete", {}).get("time") == "processing" for s in case.steps) else NOW_US
    job = SparkJob(spark, plan, SparkOptions(checkpoint=str(directory / "ck"), once=not case.continuous,
                                             now_us=clock, max_files_per_trigger=1 if one_each else None),
                   collect=collect, report=lambda text: None)
    if case.continuous:
        _run_continuously(job, directory / "in")
    else:
        job.run()
    return {route: _keyed(route, got.get(route, []), id_of) for route in ["", *plan.sinks]}


def _run_continuously(job: Any, spool: Path) -> None:
    """``job`` as a continuous job (``Case.continuous``): started on the spool's first segment, the others
    arriving one at a time, each once the queries processed everything before it (Spark's
    ``processAllAvailable``: until a trigger finds neither new data nor a micro-batch without data to run, which
    is when the watermark the data moved has closed what it closes), then stopped between two micro-batches."""
    later = sorted(spool.glob("*.ndjson"))[1:]
    arriving = spool.parent / "arriving"
    arriving.mkdir()
    for path in later:
        os.replace(path, arriving / path.name)
    job.start()
    try:
        for path in [None, *later]:
            if path is not None:
                os.replace(arriving / path.name, path)  # sealed whole, as a daemon's spool seals a segment
            for compiled in job.compiled:
                compiled.query.processAllAvailable()
    finally:
        job.stop(between_batches=True)


def _spool(case: Case, directory: Path) -> None:
    """The case's spool, its segments' modification times in name order or all equal (``Case.equal_times``: both
    engines read a spool by name), and its lookup tables."""
    (directory / "in").mkdir(parents=True, exist_ok=True)
    case.write_tables(directory)
    for n, (name, content) in enumerate(case.spool_files().items()):
        path = directory / "in" / name
        path.write_bytes(content)
        written = 1_000_000 if case.equal_times else 1_000_000 + n
        os.utime(path, (written, written))


class Rejected(Exception):
    """Spark refused the pipeline before reading data for its analyser's static typing (``DATATYPE_MISMATCH``:
    docs/spark.md). Any other refusal is a query edgewise built wrong, and a difference."""


def local_vs_spark(spark: Any, case: Case) -> list[str]:
    """Oracle (a)."""
    from pyspark.errors import AnalysisException

    from edgewise.engine.spark.job import SparkJobFailed

    with tempfile.TemporaryDirectory(prefix="edgewise-fuzz-") as tmp:
        directory = Path(tmp)
        _spool(case, directory)
        local = _local_outputs(case, directory)
        try:
            remote = _spark_outputs(spark, case, directory)
        except AnalysisException as exc:
            first = str(exc).splitlines()[0]
            if not first.startswith("[DATATYPE_MISMATCH"):  # not Spark's static typing: a query edgewise got wrong
                return [f"Spark refused the query edgewise built: {first[:600]}"]
            raise Rejected(first) from exc
        except SparkJobFailed as exc:  # the local engine ran it: a query that fails is a difference
            return [f"the Spark query failed, the local engine did not: {str(exc)[:600]}"]
    return _differences(local, remote, "local", "spark")


def split_vs_whole(case: Case, at: int | None, spark: Any = None) -> list[str]:
    """The split oracle (issue 38): the pipeline split before step ``at`` (``hub_from``; None: ``placement:
    auto``), its edge part run on the local engine into a spool link of several segments, then its hub part from
    the link (on the local engine, or on Spark given a session), against the whole pipeline on the local engine.
    Sinks the edge writes and those the hub writes are counted together; events that failed a step with
    ``on_error: fail`` by step and error class (the hub reports an event as the link carried it: only the fields
    it reads)."""
    with tempfile.TemporaryDirectory(prefix="edgewise-split-") as tmp:
        directory = Path(tmp)
        _spool(case, directory)
        whole = _local_outputs(case, directory)
        doc = case.pipeline()
        if at is None:
            doc["pipelines"][0]["placement"] = "auto"
        else:
            doc["pipelines"][0]["hub_from"] = next(iter(case.steps[at].values()))["id"]
        doc["link"] = {"type": "spool", "path": "link"}
        text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
        plan = load_text_plan(text, file=str(directory / "split.yaml"), base_dir=str(directory))
        edge = edge_plan(plan)
        # a few events per segment: the hub reads the link over several segments (and micro-batches)
        edge = replace(edge, sinks={k: v.model_copy(update={"max_events": 3}) if k.startswith(LINK) else v
                                    for k, v in edge.sinks.items()})
        outputs = [_local_outputs(case, directory, plan=edge)]
        hub = hub_to_run(plan, spark=spark is not None)
        if hub is not plan:
            if spark is None:
                outputs.append(_local_outputs(case, directory, plan=hub))
            else:
                from pyspark.errors import AnalysisException

                from edgewise.engine.spark.job import SparkJobFailed

                try:
                    outputs.append(_spark_outputs(spark, case, directory, plan=hub))
                except AnalysisException as exc:
                    first = str(exc).splitlines()[0]
                    if not first.startswith("[DATATYPE_MISMATCH"):
                        return [f"Spark refused the hub's query: {first[:600]}"]
                    raise Rejected(first) from exc
                except SparkJobFailed as exc:  # the whole pipeline ran locally: a hub that fails is a difference
                    return [f"the hub's Spark query failed: {str(exc)[:600]}"]
    split: Outputs = {}
    for out in outputs:
        for route, records in out.items():
            split[route] = split.get(route, Counter()) + records
    for out in (whole, split):
        failed = out.get(FAILED, Counter())
        out[FAILED] = Counter(canonical({"step": orjson.loads(k).get("step"), "type": orjson.loads(k).get("type")})
                              for k in failed.elements())
    return _differences(whole, split, "whole", "edge+hub")


def _differences(a: Outputs, b: Outputs, a_name: str, b_name: str) -> list[str]:
    problems = []
    for route in sorted(set(a) | set(b)):
        x, y = a.get(route, Counter()), b.get(route, Counter())
        if x != y:
            name = "results" if route == "" else f"sink {route}"
            only_a = sorted((x - y).elements())
            only_b = sorted((y - x).elements())
            problems.append(f"{name}: only {a_name}: {only_a[:5]}; only {b_name}: {only_b[:5]}")
    return problems


def crashed_vs_uninterrupted(case: Case, crashes: list[int], batch_size: int, flaky_sinks: int = 0) -> list[str]:
    """Oracle (b): crash markers after the given event counts, and with ``flaky_sinks`` n every sink's n-th write
    failing once (a sink briefly down); the restarted run's records (by id, as an idempotent sink keeps them) must
    equal an uninterrupted run's with sinks that never fail."""
    events: list[Any] = list(case.events)
    for position in sorted(set(crashes), reverse=True):
        events.insert(min(position, len(events)), CRASH)
    with tempfile.TemporaryDirectory(prefix="edgewise-fuzz-") as tmp:  # beside the pipeline: its lookup tables
        case.write_tables(Path(tmp))
        plan = load_text_plan(case.pipeline_text(), file=str(Path(tmp) / "pipeline.yaml"), base_dir=tmp)
        clean = run(plan, case.events, clock=FakeClock(NOW_US), batch_size=batch_size)
        try:
            crashed = run(plan, events, clock=FakeClock(NOW_US), batch_size=batch_size, flaky_sinks=flaky_sinks)
        except SinkError as exc:  # a write that fails once must be tried again, not stop the run
            return [f"the run whose sinks fail one write in {flaky_sinks} stopped: {exc}"]

    def by_id(result: Any) -> Outputs:
        out: Outputs = {"": Counter(canonical(r) for r in result.outputs["p"])}
        for sid, sink in result.sinks.items():
            out[sid] = Counter(canonical(r) for r in sink.unique())
        return out

    return _differences(by_id(clean), by_id(crashed), "uninterrupted", "crashed")


# ---------------------------------------------------------------- oracle (c): a batch computation

class _Failed(Exception):
    pass


def _argument(event: dict[str, Any], path: str, function: str) -> Any:
    value: Any = event
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None or function not in ("sum", "avg"):
        return value
    if isinstance(value, bool):
        raise _Failed
    if isinstance(value, str):  # Spark's implicit cast of a string to DOUBLE (ANSI: invalid text fails)
        try:
            return float(value.strip())
        except ValueError:
            raise _Failed from None
    return value


def batch_oracle_applies(case: Case) -> bool:
    """Oracle (c) covers a lone window or aggregate with ``on_error: skip``, plain-field keys and arguments of
    count/count(x)/sum/avg over numbers and numeric text (min/max only where the data hold no text)."""
    if len(case.steps) != 1:
        return False
    kind, config = next(iter(case.steps[0].items()))
    if kind not in ("window", "aggregate") or config.get("on_error") != "skip" or "when" in config:
        return False
    if kind == "window" and "tumbling" not in config:  # tumbling windows only (the reference has the others)
        return False
    texts = any(isinstance(e.get("x"), str) for e in case.events)
    for text in config["aggs"].values():
        fn, _, arg = text.partition("(")
        arg = arg.rstrip(")")
        if arg not in ("", "x", "y.z", "k") or (fn in ("min", "max") and texts):
            return False
    return all(k in ("k", "s") for k in config["key"])


def batch_computation(case: Case) -> list[str]:
    """Oracle (c): the step's records computed from the events directly, against the local engine's."""
    kind, config = next(iter(case.steps[0].items()))
    specs = [(name, *text.rstrip(")").split("(")) for name, text in config["aggs"].items()]
    rows = []
    for e in case.events:
        try:
            args = [_argument(e, arg, fn) if arg else None for _, fn, arg in specs]
        except _Failed:
            continue  # the event fails the step: skipped, it changes nothing
        rows.append((tuple(e.get(k) for k in config["key"]), e["t"], args, e))

    def result(group: list[Any]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for j, (name, fn, arg) in enumerate(specs):
            xs = [r[2][j] for r in group if r[2][j] is not None]
            if fn == "count":
                values[name] = len(group) if not arg else len(xs)
            elif fn == "count_distinct":
                values[name] = len({str(v) for v in xs})
            elif fn == "sum":
                values[name] = sum(xs) if xs else None
            elif fn == "avg":
                values[name] = sum(xs) / len(xs) if xs else None
            else:
                values[name] = (min if fn == "min" else max)(xs) if xs else None
        return values

    expected: list[dict[str, Any]] = []
    if kind == "window":
        size = int(config["tumbling"].rstrip("s"))
        groups: dict[tuple[Any, ...], list[Any]] = {}
        for row in rows:
            groups.setdefault((row[0], row[1] - row[1] % size), []).append(row)
        for (key, start), group in groups.items():
            record = dict(zip(config["key"], key, strict=True))
            record["window_start"] = f"1970-01-01T00:{start // 60:02d}:{start % 60:02d}Z"
            end = start + size
            record["window_end"] = f"1970-01-01T00:{end // 60:02d}:{end % 60:02d}Z"
            record.update(result(group))
            expected.append(record)
    else:
        seen: dict[tuple[Any, ...], list[Any]] = {}
        for row in rows:
            group = seen.setdefault(row[0], [])
            group.append(row)
            expected.append({**row[3], "st": result(group)})
    plan = load_text_plan(case.pipeline_text())
    got = run(plan, case.events, clock=FakeClock(NOW_US)).outputs["p"]
    return _differences({"": Counter(canonical(r) for r in expected)}, {"": Counter(canonical(r) for r in got)},
                        "batch computation", "local engine")


# ---------------------------------------------------------------- oracle (d): partitioned workers

def partitioned_vs_one(case: Case, workers: int, entry_size: int) -> list[str] | None:
    """``edgewise serve --workers N``'s partitioned workers (``engine/partitions.py``), each an engine taking
    its share of every entry of ``entry_size`` events, against one engine taking them all: their records, dead
    letters and failures together must be the one engine's. ``None``: the daemon refuses the pipeline for
    several workers."""
    from edgewise.engine.partitions import (
        Share,
        check_partitionable,
        entry_partition,
        partition_engine,
        partitions_of,
    )
    from edgewise.errors import ConfigError

    with tempfile.TemporaryDirectory(prefix="edgewise-fuzz-") as tmp:
        case.write_tables(Path(tmp))

        def engine(share: Share | None) -> tuple[LocalEngine, dict[str, ListSink], list[tuple[str, Any]]]:
            plan = load_text_plan(case.pipeline_text(), file=str(Path(tmp) / "pipeline.yaml"), base_dir=tmp)
            sinks = {sid: ListSink(sid) for sid in plan.sinks}
            sinks[STDOUT] = ListSink(STDOUT)
            local = LocalEngine(plan, clock=FakeClock(NOW_US), sinks=dict(sinks), stdout=io.BytesIO(),
                                errors=io.StringIO())
            failed: list[tuple[str, Any]] = []
            local.ctx.on_failed = lambda one, exc, pipeline_id, step_id: failed.append((one.ids()[0], {
                "event": one.payloads[0], "step": step_id,
                "error": {"type": getattr(exc, "error_class", type(exc).__name__)}}))
            if share is not None:
                partition_engine(local, share)
            local.open()
            return local, sinks, failed

        one = engine(None)
        try:
            check_partitionable(one[0].plan)
        except ConfigError:
            return None
        shares = [Share(i, workers, partitions_of(i, workers)) for i in range(workers)]
        many = [engine(share) for share in shares]
        events = list(case.events)
        for seq, first in enumerate(range(0, len(events), entry_size), 1):
            payloads = events[first:first + entry_size]
            for index, (local, _, _) in enumerate([one, *many]):
                if index:
                    share = shares[index - 1]
                    share.owned, share.entries = share.mine, entry_partition(seq) in share.mine
                local.process(Batch(list(payloads), source="spool", ingest_time_us=NOW_US,
                                    event_times=[NOW_US] * len(payloads), id_prefix="spool:",
                                    offsets=range(first, first + len(payloads))))
        for local, _, _ in [one, *many]:
            local.finish()
            local.close()

    def outputs(runs: list[tuple[LocalEngine, dict[str, ListSink], list[tuple[str, Any]]]]) -> Outputs:
        out: Outputs = {FAILED: _keyed(FAILED, [f for _, _, failed in runs for f in failed], None)}
        for sid in runs[0][1]:
            route = "" if sid == STDOUT else sid
            pairs = [(i, r) for _, sinks, _ in runs for i, r in zip(sinks[sid].ids, sinks[sid].records, strict=True)]
            out[route] = _keyed(route, pairs, lambda i, r: i)
        return out

    return _differences(outputs([one]), outputs(many), "one worker", f"{workers} workers")
