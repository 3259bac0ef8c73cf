"""A pipeline's first stateless steps fused with NDJSON decoding: each line is decoded and taken through them
before the next line is, as a hand-written loop does.

Why: the engine's batches are columns. A chunk of lines is decoded into a list of events, then each step passes
over that list. For a pipeline that filters, enriches and projects (YSB's stateless part), going over decoded
events again costs more than the steps' own work: an event decoded a moment ago is still in the CPU's caches, one
decoded 500 events earlier is not (BENCHMARKS.md, the YSB stateless section).

The head is the longest run of the pipeline's first steps that are each, without ``when``,
- a ``filter`` or ``gate``: any condition, with ``field = 'text'`` written into the loop;
- a ``lookup`` that merges its row into the event by a top-level key field (no ``into``);
- a ``transform`` that only ``keep``s fields; right after such a lookup whose rows all have the same columns,
  each kept field is taken from the row or the event, and the merged event is never built.

Contract: for a chunk of lines the head gives exactly what decoding them and running the general path gives
(events, ids, order, counters), or it gives up on the whole chunk (``None``), which is then decoded and run the
general way. It gives up on anything but the plain case: a line that is not one JSON object (malformed, blank,
an array), a spool envelope, a condition that raises, a lookup key that is not text or has no row, a kept field
that an event lacks. Nothing is counted or sent before it has decided, so giving up costs time, never a different
result. After giving up it leaves a doubling number of chunks (at most ``MAX_SKIP``) to the general path before
it tries again, so input it never suits costs one chunk's extra decoding in ``MAX_SKIP``.
``tests/test_fused.py`` checks it against the general path on generated lines and pipelines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import orjson

from edgewise.config.plan import Plan
from edgewise.engine.guard import GuardedStep
from edgewise.events import Batch, Payload
from edgewise.sources.base import SourceContext
from edgewise.sources.envelope import is_envelope
from edgewise.sources.lines import make_batch
from edgewise.steps.base import Step
from edgewise.steps.filter import FilterStep
from edgewise.steps.lookup import LookupStep
from edgewise.steps.transform import TransformConfig, TransformStep

MAX_SKIP = 256
"""At most this many chunks go the general way after the head gave up, before it tries again."""

Loop = Callable[[list[bytes], int], tuple[list[Payload], list[int], list[int]] | None]
"""The generated loop: lines and the first one's number -> (events, their line numbers, each counter's count)."""


class HeadBatch(Batch):
    """What a fused head gave for a chunk of lines: the events that came through its first ``steps`` steps, of
    ``read`` events read; ``counts`` are the steps' counters (step id, counter, n) for the engine to add."""

    __slots__ = ("counts", "read", "steps")

    counts: list[tuple[str, str, int]]
    read: int
    steps: int


class FusedHead:
    """A pipeline's fused head (the module docstring); ``run`` is what ``line_batches`` calls for each chunk."""

    def __init__(self, steps: list[Step], loop: Loop, counters: list[tuple[str, str]], source: str) -> None:
        self.steps = steps
        self.source = source
        """The generated code, for tests and for the curious."""
        self._loop = loop
        self._counters = counters
        self._skip = 0
        self._backoff = 1
        self.fused = 0
        """Chunks the head ran."""
        self.gave_up = 0
        """Chunks it gave up on (decoded and run the general way)."""

    def run(self, lines: list[bytes], first: int, source_id: str, id_prefix: str, ctx: SourceContext) -> Batch | None:
        if self._skip:
            self._skip -= 1
            return None
        result = self._loop(lines, first)
        if result is None:
            self.gave_up += 1
            self._skip = self._backoff
            self._backoff = min(self._backoff * 2, MAX_SKIP)
            return None
        self.fused += 1
        self._backoff = max(1, self._backoff // 2)
        payloads, offsets, counted = result
        batch = cast(HeadBatch, make_batch(payloads, offsets, source_id, id_prefix, ctx, HeadBatch))
        batch.read = len(lines)
        batch.steps = len(self.steps)
        batch.counts = [(step_id, name, n) for (step_id, name), n in zip(self._counters, counted, strict=True) if n]
        return batch


def events_read(batch: Batch) -> int:
    """The events a source read into ``batch``: a fused head's batch holds only those its steps let through."""
    return batch.read if isinstance(batch, HeadBatch) else len(batch)


def head_of(plan: Plan, pipelines: list[list[GuardedStep]]) -> FusedHead | None:
    """The fused head of a run of ``pipelines`` (each one's steps) over ``plan``: of the only pipeline, where no
    event time is assigned to the decoded events first; None elsewhere."""
    if len(pipelines) != 1 or plan.event_time is not None:
        return None
    return compile_head(pipelines[0])


def compile_head(pipeline: list[GuardedStep]) -> FusedHead | None:
    """The fused head of a pipeline's steps; None when its first step cannot be fused."""
    steps: list[Step] = []
    for guarded in pipeline:
        if guarded.when is not None or not _fusable(guarded.step):
            break
        steps.append(guarded.step)
    if not steps:
        return None
    return _Writer(steps).head()


def explain_head(plan: Plan) -> str | None:
    """The line ``edgewise explain`` adds for a plan whose steps a fused head takes where its input is NDJSON."""
    head = head_of(plan, [[GuardedStep(step, p.id) for step in p.steps] for p in plan.pipelines])
    if head is None:
        return None
    steps = "step 1" if len(head.steps) == 1 else f"steps 1-{len(head.steps)}"
    return (f"  fused: {steps} of pipeline {plan.pipelines[0].id} run on each NDJSON line (file, stdin) as it is "
            "decoded, without a durable state store")


def _fusable(step: Step) -> bool:
    if isinstance(step, FilterStep):
        return True
    if isinstance(step, LookupStep):
        return step.into is None and step._key_field is not None and bool(step.table)
    return _kept(step) is not None


def _kept(step: Step) -> list[str] | None:
    """The fields a transform that only keeps fields keeps, in order; None for any other step."""
    if not isinstance(step, TransformStep):
        return None
    config = step.config
    assert isinstance(config, TransformConfig)
    ops = config.ops
    if len(ops) != 1 or ops[0].keep is None:
        return None
    return list(dict.fromkeys(ops[0].keep))


def _same_columns(table: dict[str, dict[str, Any]]) -> set[str] | None:
    """The columns of every row of a lookup table, when all its rows have the same ones."""
    rows = iter(table.values())
    columns = set(next(rows))
    return columns if all(row.keys() == columns for row in rows) else None


class _Writer:
    """Writes the loop's Python source, one step after another, and compiles it."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.body: list[str] = []
        self.names: dict[str, Any] = {"loads": orjson.loads, "is_envelope": is_envelope}
        self.counters: list[tuple[str, str]] = []
        self.row: tuple[str, set[str], str] | None = None
        """A lookup's row not merged yet (its variable, its columns, the key field, whose text is in ``k``): the
        keep right after it reads from it."""

    def head(self) -> FusedHead:
        for i, step in enumerate(self.steps):
            following = self.steps[i + 1] if i + 1 < len(self.steps) else None
            if isinstance(step, FilterStep):
                self._filter(i, step)
            elif isinstance(step, LookupStep):
                self._lookup(i, step, following)
            else:
                kept = _kept(step)
                assert kept is not None
                self._keep(kept)
        counts = [f"c{n}" for n in range(len(self.counters))]
        source = "\n".join([
            "def loop(lines, first):",
            "    events = []",
            "    numbers = []",
            "    keep_event = events.append",
            "    keep_number = numbers.append",
            *(f"    {c} = 0" for c in counts),
            "    try:",
            "        for number, line in enumerate(lines, first):",
            "            p = loads(line)",
            # an envelope has a "payload" key: one lookup where `len(p) == 4` would be a call per line
            "            if p.__class__ is not dict or ('payload' in p and is_envelope(p)):",
            "                return None",
            *(f"            {line}" for line in self.body),
            "            keep_event(p)",
            "            keep_number(number)",
            "    except Exception:  # whatever it was, the general path meets it again and deals with it",
            "        return None",
            f"    return events, numbers, [{', '.join(counts)}]",
        ])
        exec(source, self.names)  # noqa: S102  # texts are written as their repr, a safe literal; functions by name
        return FusedHead(self.steps, self.names["loop"], self.counters, source)

    def _count(self, step: FilterStep) -> str:
        """The variable counting the events a filter drops."""
        self.counters.append((step.id, "filtered" if step.kind == "filter" else "stopped"))
        return f"c{len(self.counters) - 1}"

    def _filter(self, i: int, step: FilterStep) -> None:
        count = self._count(step)
        evaluate = step.where.evaluate
        self.names[f"where{i}"] = evaluate
        dropped = [f"    {count} += 1", "    continue"]
        equality = getattr(evaluate, "text_equality", None)
        if equality is None:
            self.body += [f"if where{i}(p) is not True:", *dropped]
            return
        field, text, negate = equality
        # text beside text is compared as it is (what the evaluator does too); anything else goes through it
        self.body += [f"v = p.get({field!r})",
                      "if v.__class__ is str:",
                      f"    if v {'==' if negate else '!='} {text!r}:",
                      f"    {dropped[0]}",
                      f"    {dropped[1]}",
                      f"elif where{i}(p) is not True:",
                      *dropped]

    def _lookup(self, i: int, step: LookupStep, following: Step | None) -> None:
        key = step._key_field
        assert key is not None  # _fusable
        self.names[f"rows{i}"] = step.table
        # a missing key field, a key that is not text, a key without a row: the general path takes the chunk
        # (subscripts, not `get`: their KeyError gives up as the `return None` does, one call per event sooner)
        self.body += [f"k = p[{key!r}]",
                      "if k.__class__ is not str:",
                      "    return None",
                      f"row{i} = rows{i}[k]"]
        columns = _same_columns(step.table)
        if following is not None and _kept(following) is not None and columns is not None:
            self.row = (f"row{i}", columns, key)
        else:
            self.body.append(f"p = {{**p, **row{i}}}")

    def _keep(self, kept: list[str]) -> None:
        row, self.row = self.row, None
        self.body.append("p = {" + ", ".join(f"{name!r}: {self._kept_value(name, row)}" for name in kept) + "}")

    @staticmethod
    def _kept_value(name: str, row: tuple[str, set[str], str] | None) -> str:
        """Where a kept field's value is: the lookup's row (its columns win a merge), the key just read, the event."""
        if row is not None and name in row[1]:
            return f"{row[0]}[{name!r}]"
        if row is not None and name == row[2]:
            return "k"
        return f"p[{name!r}]"
