"""``edgewise diff``: two versions of a pipeline file over the same input, and what the change does to the output.

Both versions run on the local engine over the same recording, deterministically: event time comes from the
events, processing time from a fake clock that only the input moves, every sink is replaced by one that keeps
its records (nothing is written anywhere), and state lives in a temporary directory (the files' own stores are
not touched). Records are matched by event id within each pipeline's output and each sink: a record under an id
only one version produced is *only in old* or *only in new*; under an id both produced, a record whose content
differs is *changed*, with the fields that differ. Per-step counters (events in, and each step's outcomes:
filtered, duplicates, late, failed, ...) are set side by side.

This is the check to run before reloading a daemon with a changed file: replay what it received (its spool, a
recording) through both versions and read what would change.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import orjson

from edgewise.config import BuildContext, load
from edgewise.config.plan import Plan
from edgewise.engine.context import RunContext
from edgewise.engine.guard import GuardedStep
from edgewise.events import Batch
from edgewise.jsonio import as_written
from edgewise.sources.base import Source
from edgewise.wording import count

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "(absent)"})()
"""A field one version's record does not have."""


@dataclass
class FieldChange:
    path: str
    old: Any
    new: Any


@dataclass
class Changed:
    id: str
    fields: list[FieldChange]


@dataclass
class OutputDiff:
    """One pipeline's results or one sink's records in both versions."""

    kind: str  # "pipeline" or "sink"
    id: str
    old_count: int
    new_count: int
    only_old: list[tuple[str, Any]] = field(default_factory=list)
    only_new: list[tuple[str, Any]] = field(default_factory=list)
    changed: list[Changed] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not (self.only_old or self.only_new or self.changed)


@dataclass
class DiffReport:
    events: tuple[int, int]
    """Events each version read."""
    outputs: list[OutputDiff]
    steps: list[tuple[str, str, dict[str, int], dict[str, int]]]
    """(pipeline, step, old counters, new counters), in pipeline order (old's steps first, then new ones)."""

    @property
    def equal(self) -> bool:
        return all(o.equal for o in self.outputs) and all(a == b for _, _, a, b in self.steps)


# ---------------------------------------------------------------- running one version


class _StepCounts:
    """Counts the events that enter each step (the engine counts each step's outcomes itself)."""

    def __init__(self) -> None:
        self.entered: Counter[tuple[str, str]] = Counter()

    def pipeline(self, pipeline_id: str, events: int) -> AbstractContextManager[object]:
        return contextlib.nullcontext()

    def step(self, pipeline_id: str, guarded: GuardedStep, batch: Batch, ctx: RunContext) -> Batch:
        self.entered[(pipeline_id, guarded.step.id)] += len(batch)
        return guarded.run(batch, ctx)


@dataclass
class _Version:
    outputs: dict[tuple[str, str], list[tuple[str, Any]]]
    """(kind, id) → (event id, record) in the order produced."""
    steps: dict[tuple[str, str], dict[str, int]]
    events: int


def _run(plan: Plan, sources: list[Source]) -> _Version:
    from edgewise.clock import FakeClock
    from edgewise.testing import run_sources

    counts = _StepCounts()
    result = run_sources(plan, sources, clock=FakeClock(), instrument=counts)
    outputs: dict[tuple[str, str], list[tuple[str, Any]]] = {
        ("pipeline", p.id): result.produced.get(p.id, []) for p in plan.pipelines}
    for sink_id, sink in result.sinks.items():
        outputs[("sink", sink_id)] = list(zip(sink.ids, sink.records, strict=True))
    steps: dict[tuple[str, str], dict[str, int]] = {}
    for pipeline in plan.pipelines:
        for step in pipeline.steps:
            key = (pipeline.id, step.id)
            outcomes = {what: n for (step_id, what), n in result.step_outcomes.items() if step_id == step.id}
            steps[key] = {"in": counts.entered.get(key, 0)} | outcomes
    return _Version(outputs, steps, result.events_in)


# ---------------------------------------------------------------- comparing


def field_changes(old: Any, new: Any, path: str = "") -> list[FieldChange]:
    """Where two records differ, field by field (objects recursively; anything else as a whole).

    >>> [(c.path, c.old, c.new) for c in field_changes({"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 3}, "d": 4})]
    [('b.c', 2, 3), ('d', (absent), 4)]
    """
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[FieldChange] = []
        for key in list(old) + [k for k in new if k not in old]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in new:
                out.append(FieldChange(sub, old[key], MISSING))
            elif key not in old:
                out.append(FieldChange(sub, MISSING, new[key]))
            else:
                out.extend(field_changes(old[key], new[key], sub))
        return out
    if old == new and type(old) is type(new):
        return []
    return [FieldChange(path or "(record)", old, new)]


def compare_records(kind: str, output_id: str, old: list[tuple[str, Any]],
                    new: list[tuple[str, Any]]) -> OutputDiff:
    """Match by event id; records under one id pair up in the order they were produced."""
    diff = OutputDiff(kind, output_id, len(old), len(new))
    by_id_new: dict[str, list[Any]] = {}
    for event_id, record in new:
        by_id_new.setdefault(event_id, []).append(as_written(record))
    for event_id, record in old:
        waiting = by_id_new.get(event_id)
        if not waiting:
            diff.only_old.append((event_id, record))
            continue
        other = waiting.pop(0)
        changes = field_changes(as_written(record), other)
        if changes:
            diff.changed.append(Changed(event_id, changes))
    for event_id, records in by_id_new.items():
        diff.only_new.extend((event_id, r) for r in records)
    return diff


def diff_plans(old: Plan, new: Plan, old_sources: list[Source], new_sources: list[Source]) -> DiffReport:
    a, b = _run(old, old_sources), _run(new, new_sources)
    outputs = [compare_records(kind, output_id, a.outputs.get((kind, output_id), []),
                               b.outputs.get((kind, output_id), []))
               for kind, output_id in _union(list(a.outputs), list(b.outputs))]
    steps = [(p, s, a.steps.get((p, s), {}), b.steps.get((p, s), {}))
             for p, s in _union(list(a.steps), list(b.steps))]
    return DiffReport((a.events, b.events), outputs, steps)


def _union(first: list[tuple[str, str]], second: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return first + [k for k in second if k not in first]


# ---------------------------------------------------------------- the command


def sources_for(plan: Plan, inputs: Sequence[str]) -> list[Source]:
    """INPUT files (NDJSON, one source ``input`` each, as ``edgewise run`` reads them), or the file's own sources."""

    from edgewise.sources.file import FileSource, FileSourceConfig

    if inputs:
        return [FileSource(FileSourceConfig(id="input" if len(inputs) == 1 else f"input{n + 1}", path=path),
                           BuildContext("."))
                for n, path in enumerate(inputs)]
    return [plan.source(s) for s in plan.sources]


def diff_files(old_file: str, new_file: str, inputs: Sequence[str]) -> DiffReport:
    old, new = load(old_file), load(new_file)
    return diff_plans(old, new, sources_for(old, inputs), sources_for(new, inputs))


def _short(value: Any, width: int = 60) -> str:
    text = "(absent)" if value is MISSING else orjson.dumps(as_written(value)).decode()
    return text if len(text) <= width else text[: width - 1] + "…"


def render_text(report: DiffReport, old_name: str, new_name: str, limit: int = 10) -> Iterator[str]:
    """The readable report: a line per output, up to ``limit`` examples of each kind of difference, the steps."""
    yield f"old: {old_name} ({count(report.events[0], 'event', thousands=True)})"
    yield f"new: {new_name} ({count(report.events[1], 'event', thousands=True)})"
    for o in report.outputs:
        verdict = "same" if o.equal else (f"{len(o.only_old):,} only in old, {len(o.only_new):,} only in new, "
                                          f"{len(o.changed):,} changed")
        yield ""
        yield f"{o.kind} {o.id}: {o.old_count:,} records in old, {o.new_count:,} in new: {verdict}"
        for event_id, record in o.only_old[:limit]:
            yield f"  - {event_id}  {_short(record)}"
        for event_id, record in o.only_new[:limit]:
            yield f"  + {event_id}  {_short(record)}"
        for c in o.changed[:limit]:
            changes = "; ".join(f"{f.path}: {_short(f.old, 30)} -> {_short(f.new, 30)}" for f in c.fields[:5])
            more = f" (+{len(c.fields) - 5} fields)" if len(c.fields) > 5 else ""
            yield f"  ~ {c.id}  {changes}{more}"
        shown = min(limit, len(o.only_old)) + min(limit, len(o.only_new)) + min(limit, len(o.changed))
        hidden = len(o.only_old) + len(o.only_new) + len(o.changed) - shown
        if hidden > 0:
            yield f"  ... and {hidden:,} more (--limit, or --format json for all)"
    yield ""
    yield "steps (events in, outcomes; old -> new):"
    width = max((len(f"{p}/{s}") for p, s, _, _ in report.steps), default=4)
    for p, s, a, b in report.steps:
        names = ["in", *sorted((set(a) | set(b)) - {"in"})]
        cells = []
        for name in names:
            x, y = a.get(name), b.get(name)
            if name == "in" and not a:
                x = None
            cells.append(f"{name} {_count(x)}" if x == y else f"{name} {_count(x)} -> {_count(y)}")
        mark = " " if a == b else "*"
        yield f" {mark} {f'{p}/{s}':<{width}}  " + ", ".join(cells)
    yield ""
    yield "equal" if report.equal else "different"


def _count(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def as_json(report: DiffReport) -> dict[str, Any]:
    def changes(c: Changed) -> dict[str, Any]:
        return {"id": c.id, "fields": [{"path": f.path, **({} if f.old is MISSING else {"old": as_written(f.old)}),
                                        **({} if f.new is MISSING else {"new": as_written(f.new)})}
                                       for f in c.fields]}

    return {
        "equal": report.equal,
        "events": {"old": report.events[0], "new": report.events[1]},
        "outputs": [{"kind": o.kind, "id": o.id, "old": o.old_count, "new": o.new_count, "equal": o.equal,
                     "only_old": [{"id": i, "record": as_written(r)} for i, r in o.only_old],
                     "only_new": [{"id": i, "record": as_written(r)} for i, r in o.only_new],
                     "changed": [changes(c) for c in o.changed]} for o in report.outputs],
        "steps": [{"pipeline": p, "step": s, "old": a or None, "new": b or None} for p, s, a, b in report.steps],
    }
