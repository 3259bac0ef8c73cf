"""A pipeline's first stateless steps fused with NDJSON decoding: each line is decoded and taken through them
before the next line is, as a hand-written loop does.

Why: the engine's batches are columns. A chunk of lines is decoded into a list of events, then each step passes
over that list. For a pipeline that filters, enriches and projects (YSB's stateless part), going over decoded
events again costs more than the steps' own work: an event decoded a moment ago is still in the CPU's caches, one
decoded 500 events earlier is not (BENCHMARKS.md, the YSB stateless section).

The file's ``event_time``, where it has a shape ``engine/event_time.py`` computes directly (an epoch number or digit
text in one field), is read in the loop too: each line's value is kept, and the chunk's values are checked and
converted together afterwards (the head gives up on the chunk when any of them would take the general path).

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

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import orjson

from edgewise.config.plan import Plan
from edgewise.engine.event_time import EventTimeFunction, event_time_function
from edgewise.engine.guard import GuardedStep
from edgewise.events import Batch, Payload
from edgewise.sources.base import SourceContext
from edgewise.sources.envelope import is_envelope
from edgewise.sources.lines import make_batch
from edgewise.steps.base import Step
from edgewise.steps.stateful import FAILURES

if TYPE_CHECKING:
    from edgewise.steps.filter import FilterStep
    from edgewise.steps.lookup import LookupStep
    from edgewise.steps.window import WindowStep

# Steps are told apart by their kind, not by isinstance: importing their modules here would import the modules (and
# make the config classes) of steps a run does not use, at every start.
FILTERS = ("filter", "gate")

MAX_SKIP = 256
"""At most this many chunks go the general way after the head gave up, before it tries again."""

Loop = Callable[[list[bytes], int], tuple[list[Payload], list[int], list[int], list[Any]] | None]
"""The generated loop: lines and the first one's number -> (the events, their line numbers, each counter's count,
each line's event-time field where the head reads one); None: it gave up on the lines."""
TailLoop = Callable[[list[bytes], int], tuple[tuple[list[Any], list[Any] | None], None, list[int], list[Any],
                                              list[Any] | None] | None]
"""The loop of a head with a keyed tail (``KeyedTail``): (the kept events' key values and argument values, None,
each counter's count, each line's event-time field, the kept events' event-time fields), or None."""
Loops = tuple[Loop, TailLoop | None]


_PAYLOADS: Any = Batch.__dict__["payloads"]
_OFFSETS: Any = Batch.__dict__["_offsets"]
"""Batch's own ``payloads`` and ``_offsets`` slots, under ``HeadBatch``'s properties."""


class HeadBatch(Batch):
    """What a fused head gave for a chunk of lines: the events that came through its first ``steps`` steps, of
    ``read`` events read; ``counts`` are the steps' counters (step id, counter, n) for the engine to add;
    ``timed``: the events have their event times already.

    Where the head reads a keyed step's columns (``keyed``), the events and their line numbers are made only if
    something reads ``payloads`` or the ids (an event the step fails: its ``on_error`` takes the event). They are
    made by running the head's general loop again on the chunk, which gives them as a first run would have (the
    steps it fuses are pure)."""

    __slots__ = ("_build", "counts", "read", "steps", "timed")

    counts: list[tuple[str, str, int]]
    read: int
    steps: int
    timed: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._build: Callable[[], tuple[list[Payload], list[int]]] | None = None
        super().__init__(*args, **kwargs)

    @property
    def payloads(self) -> list[Payload]:
        if self._build is not None:
            self._materialise()
        return cast(list[Payload], _PAYLOADS.__get__(self, HeadBatch))

    @payloads.setter
    def payloads(self, payloads: list[Payload]) -> None:
        _PAYLOADS.__set__(self, payloads)

    @property
    def _offsets(self) -> Sequence[int] | None:
        if self._build is not None:
            self._materialise()
        return cast(Sequence[int] | None, _OFFSETS.__get__(self, HeadBatch))

    @_offsets.setter
    def _offsets(self, offsets: Sequence[int] | None) -> None:
        _OFFSETS.__set__(self, offsets)

    def _materialise(self) -> None:
        build, self._build = self._build, None
        assert build is not None
        payloads, offsets = build()
        _PAYLOADS.__set__(self, payloads)
        _OFFSETS.__set__(self, offsets)

    def __len__(self) -> int:
        return len(self.event_times)


class FusedHead:
    """A pipeline's fused head (the module docstring); ``run`` is what ``line_batches`` calls for each chunk."""

    def __init__(self, steps: list[Step], loops: Loops, counters: list[tuple[str, str]], source: str,
                 times: EventTimeFunction | None = None, tail: KeyedTail | None = None) -> None:
        self.steps = steps
        self.times = times
        """The event time the loop reads, where the plan assigns one."""
        self.tail = tail
        """The keyed step after ``steps`` whose columns the loop reads, where it reads them."""
        self.read_factor = 1 if tail is None else 4
        """A keyed tail's batch holds keys and times, not events: chunks of 4x the lines cost no more of the CPU's
        caches, and its step groups a chunk's events by key (7% less time on the YSB benchmark; 16x was slower)."""
        self.source = source
        """The generated code, for tests and for the curious."""
        self._loop, self._tail_loop = loops
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
        batch = self._run(lines, first, source_id, id_prefix, ctx)
        if batch is None:
            self.gave_up += 1
            self._skip = self._backoff
            self._backoff = min(self._backoff * 2, MAX_SKIP)
            return None
        self.fused += 1
        self._backoff = max(1, self._backoff // 2)
        return batch

    def _run(self, lines: list[bytes], first: int, source_id: str, id_prefix: str,
             ctx: SourceContext) -> HeadBatch | None:
        if self.tail is not None:
            return self._keyed(self.tail, lines, first, source_id, id_prefix, ctx)
        result = self._loop(lines, first)
        times = self.times
        if result is None or (times is not None and not times.direct(result[3])):
            return None
        events, offsets, counted, stamps = result
        batch = self._batch(make_batch(events, offsets, source_id, id_prefix, ctx, HeadBatch), lines, counted)
        if times is not None:
            batch.event_times = times.convert([stamps[n - first] for n in offsets])
        return batch

    def _keyed(self, tail: KeyedTail, lines: list[bytes], first: int, source_id: str, id_prefix: str,
               ctx: SourceContext) -> HeadBatch | None:
        """The batch of a head that reads a keyed step's columns: keys, arguments and times, and the events and
        their line numbers only when something asks for them."""
        assert self._tail_loop is not None
        result = self._tail_loop(lines, first)
        times = self.times
        if result is None or (times is not None and not times.direct(result[3])):
            return None
        (key_values, argument_values), _, counted, _, kept_times = result
        try:
            keyed = tail.keys.of_values(key_values, None if argument_values is None
                                        else tail.aggs.rows_of(argument_values))
        except FAILURES:
            return None  # an argument sum or avg cannot take: the general path isolates its event
        now = ctx.clock.now_us()
        batch = HeadBatch([], source=source_id, ingest_time_us=now, id_prefix=id_prefix,
                          event_times=[now] * len(key_values) if times is None or kept_times is None
                          else times.convert(kept_times),
                          offsets=())
        batch._build = lambda: self._events(lines, first, len(key_values))
        batch.keyed = keyed
        return self._batch(batch, lines, counted)

    def _batch(self, batch: Batch, lines: list[bytes], counted: list[int]) -> HeadBatch:
        assert isinstance(batch, HeadBatch)
        batch.timed = self.times is not None
        batch.read = len(lines)
        batch.steps = len(self.steps)
        batch.counts = [(step_id, name, n) for (step_id, name), n in zip(self._counters, counted, strict=True) if n]
        return batch

    def _events(self, lines: list[bytes], first: int, expected: int) -> tuple[list[Payload], list[int]]:
        """The events the head's steps give for ``lines`` (numbered from ``first``) and their line numbers: the
        ones a keyed tail read (``expected`` of them), as the general loop makes them."""
        result = self._loop(lines, first)
        if result is None or len(result[0]) != expected:
            raise RuntimeError("the fused head gave other events on its second run over the same lines")
        return result[0], result[1]


class KeyedTail:
    """The keyed step right after a fused head whose key and aggregate arguments are top-level fields: the head's
    loop reads them in place of keeping each event (``Batch.keyed``)."""

    def __init__(self, step: WindowStep, key_fields: list[str], argument_fields: list[str | None] | None) -> None:
        self.step = step
        self.keys = step.keys
        self.aggs = step.aggs
        self.key_fields = key_fields
        self.argument_fields = argument_fields
        """One per aggregate (None for ``count()``); None when no aggregate has an argument."""


def keyed_tail(guarded: GuardedStep | None) -> KeyedTail | None:
    """The keyed tail a head can end with: a ``window`` without ``when`` that drops its late events (a late sink
    would read them), keyed by fields and aggregating fields."""
    if guarded is None or guarded.when is not None or guarded.step.kind != "window":
        return None
    step = cast("WindowStep", guarded.step)
    key_fields = step.keys.field_names()
    arguments = step.aggs.field_arguments()
    if step.config.late != "drop" or key_fields is None or arguments is None:
        return None
    return KeyedTail(step, key_fields, arguments if step.aggs.has_arguments else None)


def events_read(batch: Batch) -> int:
    """The events a source read into ``batch``: a fused head's batch holds only those its steps let through."""
    return batch.read if isinstance(batch, HeadBatch) else len(batch)


def head_of(plan: Plan, pipelines: list[list[GuardedStep]]) -> FusedHead | None:
    """The fused head of a run of ``pipelines`` (each one's steps) over ``plan``: of the only pipeline, where the
    event time, if the plan assigns one, is one the loop computes directly; None elsewhere."""
    if len(pipelines) != 1:
        return None
    times = None
    if plan.event_time is not None:
        times = event_time_function(plan.event_time)
        if times.shape is None:
            return None
    return compile_head(pipelines[0], times)


def compile_head(pipeline: list[GuardedStep], times: EventTimeFunction | None = None) -> FusedHead | None:
    """The fused head of a pipeline's steps, reading ``times`` too; None when its first step cannot be fused."""
    steps: list[Step] = []
    for guarded in pipeline:
        if guarded.when is not None or not _fusable(guarded.step):
            break
        steps.append(guarded.step)
    tail = keyed_tail(pipeline[len(steps)] if len(steps) < len(pipeline) else None)
    if not steps and tail is None:
        return None
    return _Writer(steps, times, tail).head()


def explain_head(plan: Plan) -> str | None:
    """The line ``edgewise explain`` adds for a plan whose steps a fused head takes where its input is NDJSON."""
    head = head_of(plan, [[GuardedStep(step, p.id) for step in p.steps] for p in plan.pipelines])
    if head is None:
        return None
    n = len(head.steps)
    parts = [f"step 1 of pipeline {plan.pipelines[0].id}" if n == 1 else f"steps 1-{n} of pipeline "
             f"{plan.pipelines[0].id}" if n else "",
             "the event time" if head.times is not None else "",
             f"the key and arguments of step {n + 1} ({head.tail.step.id})" if head.tail is not None else ""]
    parts = [p for p in parts if p]
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"  fused: {listed}: on each NDJSON line (file, stdin) as it is decoded, without a durable state store"


def _fusable(step: Step) -> bool:
    if step.kind in FILTERS:
        return True
    if step.kind == "lookup":
        lookup = cast("LookupStep", step)
        return lookup.into is None and lookup._key_field is not None and bool(lookup.table)
    return _kept(step) is not None


def _kept(step: Step) -> list[str] | None:
    """The fields a transform that only keeps fields keeps, in order; None for any other step."""
    if step.kind != "transform":
        return None
    ops: list[Any] = step.config.ops  # type: ignore[attr-defined]  # a TransformConfig
    if len(ops) != 1 or ops[0].keep is None:
        return None
    return list(dict.fromkeys(ops[0].keep))


def _same_columns(table: dict[str, dict[str, Any]]) -> set[str] | None:
    """The columns of every row of a lookup table, when all its rows have the same ones."""
    rows = iter(table.values())
    columns = set(next(rows))
    return columns if all(row.keys() == columns for row in rows) else None


class _Writer:
    """Writes the loops' Python source, one step after another, and compiles it."""

    def __init__(self, steps: list[Step], times: EventTimeFunction | None, tail: KeyedTail | None) -> None:
        self.steps = steps
        self.times = times
        self.tail = tail
        self.body: list[str] = []
        self.names: dict[str, Any] = {"loads": orjson.loads, "is_envelope": is_envelope}
        self.counters: list[tuple[str, str]] = []
        self.row: tuple[str, set[str] | None, str] | None = None
        """A lookup's row not merged yet (its variable, its columns where all rows have the same, the key field,
        whose text is in ``k``): the keep right after it, or the keyed tail, reads from it."""

    def head(self) -> FusedHead:
        filters = [i for i, step in enumerate(self.steps) if step.kind in FILTERS]
        for i, step in enumerate(self.steps):
            following = self.steps[i + 1] if i + 1 < len(self.steps) else None
            if step.kind in FILTERS:
                self._filter(i, cast("FilterStep", step), counted=i != filters[-1])
            elif step.kind == "lookup":
                self._lookup(i, cast("LookupStep", step), following)
            else:
                kept = _kept(step)
                assert kept is not None
                self._keep(kept)
        merge = [] if self.row is None else [f"p = {{**p, **{self.row[0]}}}"]
        sources = [self._loop("loop", ["events = []", "keep = events.append"], [*merge, "keep(p)"], "events",
                              "events", numbered=True)]
        tail = self.tail
        if tail is not None:
            made = ["keys = []", "keep_key = keys.append"]
            # one key field: its values, which the engine makes one-value keys of at C speed
            fields = [self._value(name) for name in tail.key_fields]
            keep = [f"keep_key({fields[0] if len(fields) == 1 else '(' + ''.join(f + ', ' for f in fields) + ')'})"]
            arguments = "None"
            if tail.argument_fields is not None:
                values = "".join("None, " if name is None else f"{self._value(name)}, "
                                 for name in tail.argument_fields)
                made += ["arguments = []", "keep_arguments = arguments.append"]
                keep.append(f"keep_arguments(({values}))")
                arguments = "arguments"
            sources.append(self._loop("tail_loop", made, keep, f"(keys, {arguments})", "keys", numbered=False))
        source = "\n\n".join(sources)
        exec(source, self.names)  # noqa: S102  # texts are written as their repr, a safe literal; functions by name
        loop = self.names["loop"]
        return FusedHead(self.steps, (loop, self.names.get("tail_loop")), self.counters, source, self.times, tail)

    def _loop(self, name: str, made: list[str], keep: list[str], result: str, kept_list: str, *,
              numbered: bool) -> str:
        """A loop's source: ``made`` starts what it makes, ``keep`` keeps what an event that came through the
        steps gives (one item of ``kept_list`` each), ``result`` is what it made. ``numbered``: it keeps each such
        event's line number; else it gives ``None`` for the numbers and, after the stamps, the kept events'
        event-time fields (where the head reads one)."""
        shape = self.times.shape if self.times is not None else None
        timed = shape is not None
        # the last filter's drops are not counted one by one: they are the events that reached it (those the
        # earlier filters let through; nothing else before it drops events) less those it let through (all kept)
        counted = [f"c{n}" for n, _ in enumerate(self.counters[:-1])] if self.counters else []
        counts = [*counted, f"len(lines) - {''.join(c + ' - ' for c in counted)}len({kept_list})"][
            :len(self.counters)]
        # every line's event-time field, before any step: an event a filter drops has its time checked too, as
        # the general path assigns times before the steps
        stamp = [] if shape is None else [f"t = p.get({shape[0]!r})", "stamp(t)"]
        kept = ["keep_number(number)"] if numbered else ["keep_time(t)"] if timed else []
        return "\n".join([
            f"def {name}(lines, first):",
            *(f"    {line}" for line in made),
            "    kept_numbers = []",
            "    keep_number = kept_numbers.append",
            "    stamps = []",
            "    stamp = stamps.append",
            "    times = []",
            "    keep_time = times.append",
            *(f"    {c} = 0" for c in counted),
            "    try:",
            "        for number, line in enumerate(lines, first):" if numbered else "        for line in lines:",
            "            p = loads(line)",
            # an envelope has a "payload" key: one lookup where `len(p) == 4` would be a call per line. Where the
            # event time is read next, that `p.get` is the check that p is an object (anything else raises)
            "            if 'payload' in p and is_envelope(p):" if timed else
            "            if p.__class__ is not dict or ('payload' in p and is_envelope(p)):",
            "                return None",
            *(f"            {line}" for line in stamp),
            *(f"            {line}" for line in self.body),
            *(f"            {line}" for line in keep),
            *(f"            {line}" for line in kept),
            "    except Exception:  # whatever it was, the general path meets it again and deals with it",
            "        return None",
            f"    return {result}, {'kept_numbers' if numbered else 'None'}, [{', '.join(counts)}], stamps" + (
                "" if numbered else ", times" if timed else ", None"),
        ])

    def _value(self, name: str) -> str:
        """The expression of a top-level field of the event as the steps gave it, with a lookup's row unmerged."""
        row = self.row
        if row is None:
            return f"p.get({name!r})"
        variable, columns, _ = row
        if columns is None:
            return f"({variable}[{name!r}] if {name!r} in {variable} else p.get({name!r}))"
        return f"{variable}[{name!r}]" if name in columns else f"p.get({name!r})"

    def _count(self, step: FilterStep) -> str:
        """The variable counting the events a filter drops."""
        self.counters.append((step.id, "filtered" if step.kind == "filter" else "stopped"))
        return f"c{len(self.counters) - 1}"

    def _filter(self, i: int, step: FilterStep, *, counted: bool) -> None:
        count = self._count(step)
        evaluate = step.where.evaluate
        self.names[f"where{i}"] = evaluate
        dropped = [*([f"    {count} += 1"] if counted else []), "    continue"]
        equality = getattr(evaluate, "text_equality", None)
        if equality is None:
            self.body += [f"if where{i}(p) is not True:", *dropped]
            return
        field, text, negate = equality
        # text beside text is compared as it is (what the evaluator does too); anything else goes through it
        if negate:
            self.body += [f"v = p.get({field!r})",
                          "if v.__class__ is str:",
                          f"    if v == {text!r}:",
                          *(f"    {line}" for line in dropped),
                          f"elif where{i}(p) is not True:",
                          *dropped]
            return
        # only text can equal the text: an event equal to it is kept after one comparison
        self.body += [f"v = p.get({field!r})",
                      f"if v != {text!r} and (v.__class__ is str or where{i}(p) is not True):",
                      *dropped]

    def _lookup(self, i: int, step: LookupStep, following: Step | None) -> None:
        key = step._key_field
        assert key is not None  # _fusable
        self.names[f"rows{i}"] = step.table
        # a missing key field, a key that is not text, a key without a row: the general path takes the chunk
        # (subscripts, not `get`: their KeyError gives up as the `return None` does, one call per event sooner)
        # the table's keys are text (read_table), so a key of any other type finds no row: a KeyError (or, for a
        # list or an object, a TypeError) that gives the chunk up, for the general path to convert the key
        self.body.append(f"k = p[{key!r}]")
        if not all(k.__class__ is str for k in step.table):
            self.body += ["if k.__class__ is not str:", "    return None"]
        self.body.append(f"row{i} = rows{i}[k]")
        columns = _same_columns(step.table)
        if following is not None and _kept(following) is not None and columns is not None:
            self.row = (f"row{i}", columns, key)
        elif following is None and self.tail is not None:
            self.row = (f"row{i}", columns, key)  # merged only where the events are made (_loop)
        else:
            self.body.append(f"p = {{**p, **row{i}}}")

    def _keep(self, kept: list[str]) -> None:
        row, self.row = self.row, None
        self.body.append("p = {" + ", ".join(f"{name!r}: {self._kept_value(name, row)}" for name in kept) + "}")

    @staticmethod
    def _kept_value(name: str, row: tuple[str, set[str] | None, str] | None) -> str:
        """Where a kept field's value is: the lookup's row (its columns win a merge), the key just read, the event."""
        if row is not None and row[1] is not None and name in row[1]:
            return f"{row[0]}[{name!r}]"
        if row is not None and name == row[2]:
            return "k"
        return f"p[{name!r}]"
