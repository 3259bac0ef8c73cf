"""A reference interpreter for pipelines of ``filter``, ``gate``, ``annotate``, ``transform``, ``tee``, ``lookup``,
``spawn``, ``entwine``, ``dedupe``, ``aggregate``, ``window`` and ``complete``, with ``when`` (issue 39).

Written from docs/state.md and docs/pipeline-file.md, not from the engine's code, and deliberately plain: the whole
input in memory, each step a function from the list of events it receives to the list it passes on, no
incremental state, no batching, no guard. Its expressions are evaluated by Spark's batch SQL over typed rows
where a session is given (``spark_evaluator``), and by a small evaluator of its own otherwise (``evaluate_here``:
three-valued logic and the few values ``reference_cases`` draws, with SQL's ``%``, ``+`` and ``-``), which is held
to Spark's each time both run; never by the engine's compiler.

What it covers, and what it leaves to the other oracles:

- chains of any length of ``filter``, ``gate``, ``annotate``, ``transform`` (``set``, ``rename``, ``drop``, ``keep``),
  ``tee`` (with ``set`` and ``keep``: its sink's records are compared too), ``dedupe`` and ``aggregate`` in any order,
  any of them with a ``when``, ending in at most one ``window`` (tumbling, sliding or session, with or without a
  key) or one ``complete`` (last: what follows a window sees its results in the order the
  engine closes windows, which is not part of the documented semantics, and a completion's time-out record has no
  fields for the steps after it to read);
- events with numbers or NULL in ``x`` and keys from a small set or NULL, and in a third of the cases text in
  ``x`` (``TEXTS_IN_X``: a number's text or none), which docs/expressions.md casts to BIGINT beside an integer and to
  DOUBLE beside a fraction and in ``sum``/``avg``: an event whose text cannot be cast fails the step that reads it
  (``step_failures``: its ``when`` first, then its own expressions), and its ``on_error`` drops it (``skip``) or
  sends it to the sink ``dead`` as a dead letter (the event as it came to the step, the step, the error class);
  such cases read ``x`` untyped, and aggregate ``AGGREGATES_OF_TEXT``; a ``complete``'s parts can fail too. Events are
  in event-time order with distinct times and a watermark delay larger than their spread: no event is late, so the
  watermark moving per event (locally) or per micro-batch (Spark) gives the same results, whatever the segments the
  spool is cut into (random cut points) and whether Spark reads them in one micro-batch or one per micro-batch;
- steps left at ``on_error: fail`` as well as ``skip``, and sources with and without a ``schema`` (Spark reads
  typed fields and compiles a step that cannot fail without the guard ``skip`` needs: another code path); with
  text in ``x``, events failing a step at ``on_error: fail``: reported (``FAILED``) and left out, the others going
  on (the local engine only: on Spark a failing event stops the query);
- ``complete``'s time-outs, which need no late event: a completion times out when event time passes its deadline
  (with events in time order, Spark's watermark per micro-batch and the step's own largest event time give the
  same deadlines as the local engine's watermark per event);
- lateness, in ``filter`` chains ending in a ``window`` over events out of order: docs/state.md's rule (an event is
  late when its window's end, every window's for a sliding one, is at or before the watermark; the watermark is the
  largest event time the window has seen minus its delay; a window whose end the watermark reached is given and
  dropped, so a sliding window's later event goes only to its windows still open, and a session's starts a new
  session) with the watermark moving after each event for the local engine and once per micro-batch for Spark,
  given the micro-batch boundaries (the spool's segments, one per micro-batch, or all in one);
- events out of order through a whole chain (a quarter of the chains, with short watermark delays), against the
  local engine only (Spark takes a key's events by event time within a micro-batch: docs/spark.md, Order):
  ``dedupe`` remembering every kept time of a key until the watermark is ``within`` past it, a window's late
  events after a ``dedupe`` or ``aggregate``, completions opened out of order;
- ``lookup`` over a JSON table (merged or ``into``, all columns or ``fields``, ``missing`` NULL or ``drop``);
- results' ids where the docs give them: an event keeps the id it was read with (``spool:<segment>:<line>``, or
  its envelope's), a window result has ``<step>:<window start µs>:<key JSON>``; a completion's time-out record
  is compared without its id, which the docs do not give;
- ``min`` and ``max`` over numbers beside text (docs/state.md: numbers by value, text that reads as a number by
  that number after an equal number, other text after every number in text order; the value as it came);
- ``spawn``, running one of ``SPAWNED``'s programs, whose output the reference works out by reading them
  (``spawned``): under ``into`` or replacing the event, no output (the event as it was), a non-zero exit, output
  that is no JSON, a list where an object must be (each failing the event: ``StepError``);
- ``complete`` in processing time, with an hour's timeout: nothing times out while a case runs; a local run's end
  times out every open completion, and a Spark ``--once`` run leaves them open (its timers fire by its clock only:
  docs/spark.md, Differences);
- a continuous Spark job (``Case.continuous``: segments arriving one at a time, an input that never ends):
  ``reference_outputs(..., ends=False)`` gives what the query's last watermark closed;
- text in ``x`` under the declared ``schema`` (``x DOUBLE``): such an event is malformed input on both engines,
  skipped before any step (``fits_the_schema``; it was a defect: Spark cast the text where the local engine failed
  it, ``cases/a-declared-double-field-holding-text-and-a-boolean.yaml``);
- ``entwine`` (the local engine only: Spark refuses it), its timeline worked out from docs/entwine.md by
  ``timeline_model``: one entry per event id in the order events reach the step (a digest of the whole event or of
  ``fields``, the hash chain from 64 zeros), the receipt under ``into``; the timeline the engine wrote is read back
  and compared entry by entry, each signature checked under the owner's key;
- not yet: distinct counts of text beside numbers (the text ``'1'`` and the number 1 are two values locally;
  Spark reads a field of both kinds at one type).

``reference_vs_engines`` compares its records, order aside and numbers by value, with the local engine's and (given
a Spark session) with Spark's.
"""

from __future__ import annotations

import datetime
import json
import math
import operator
import re
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests.fuzz.generate import ARRIVALS, KEYS, STRINGS, WATERMARK, Case, arrivals
from tests.fuzz.oracles import FAILED
from tests.fuzz.timeline_model import OWNER_KEY, appended, owner_pem, receipt, timeline_differences

Event = dict[str, Any]
Truth = bool | None


def _and(a: Truth, b: Truth) -> Truth:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


class Failed:
    """The value of an expression that fails for an event: the error class Spark names (the event goes to its
    step's ``on_error``)."""

    def __init__(self, error: str) -> None:
        self.error = error

    def __repr__(self) -> str:
        return f"Failed({self.error})"


class _Fails(Exception):
    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


def _as_bigint(value: Any) -> Any:
    """docs/expressions.md: text beside an integer is cast to BIGINT (``'7'`` is 7; ``'2.5'`` and ``'oops'``
    fail)."""
    if isinstance(value, str):
        if re.fullmatch(r"\s*[+-]?\d+\s*", value):
            return int(value)
        raise _Fails("CAST_INVALID_INPUT")
    return value


def _as_double(value: Any) -> Any:
    """docs/expressions.md: text beside a DOUBLE or a DECIMAL, and text that ``sum``/``avg`` read, is cast to
    DOUBLE (``'2.5'`` is 2.5; ``'oops'`` fails)."""
    if isinstance(value, str):
        if re.fullmatch(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*", value):
            return float(value)
        raise _Fails("CAST_INVALID_INPUT")
    return value


def _of(field: str, fn: Callable[[Any], Any], cast: Callable[[Any], Any] = lambda v: v) -> Callable[[Event], Any]:
    """``fn`` of a field, NULL when the field is NULL or missing (as SQL's operators and functions give); the
    field's text cast by ``cast`` first, as the literal beside it decides."""
    return lambda e: None if e.get(field) is None else fn(cast(e[field]))


_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {">": operator.gt, "<": operator.lt, "<=": operator.le,
                                                      "=": operator.eq}


def _compare(field: str, op: str, literal: Any, of: Callable[[Any], Any] = lambda v: v) -> Callable[[Event], Truth]:
    """``of(field) op literal``, NULL when the field is (``of`` an arithmetic on it): text in the field cast to
    the literal's type, BIGINT or DOUBLE (text beside text stays text)."""
    cast = (lambda v: v) if isinstance(literal, str) else _as_bigint if isinstance(literal, int) else _as_double
    return _of(field, lambda v: _OPERATORS[op](of(v), literal), cast)


def _remainder(value: Any, divisor: int) -> Any:
    """SQL's ``%``: the remainder takes the dividend's sign (Spark's ``%``, C's ``fmod``; not Python's ``%``), and
    of two integers is an integer (BIGINT % BIGINT is a BIGINT: ``0 % 3`` is 0, not 0.0; an entwine digest tells
    them apart, which the comparison of values by value does not: found by the soak)."""
    if isinstance(value, int):
        remainder = abs(value) % abs(divisor)
        return remainder if value >= 0 else -remainder
    return math.fmod(value, divisor)


CONDITIONS: list[tuple[str, Callable[[Event], Truth]]] = [
    ("x > 0", _compare("x", ">", 0)),
    ("x <= 3.5", _compare("x", "<=", 3.5)),
    ("k = 'a'", _compare("k", "=", "a")),
    ("x IS NULL", lambda e: e.get("x") is None),
    ("k IS NOT NULL", lambda e: e.get("k") is not None),
    ("x > 0 AND k = 'b'", lambda e: _and(_compare("x", ">", 0)(e), _compare("k", "=", "b")(e))),
    ("x % 3 < 0", _compare("x", "<", 0, lambda v: _remainder(v, 3))),
    ("x % -2 = 1", _compare("x", "=", 1, lambda v: _remainder(v, -2))),
    ("x + 2 > 3", _compare("x", ">", 3, lambda v: v + 2)),
    ("x - 1 <= 0", _compare("x", "<=", 0, lambda v: v - 1)),
]
"""The conditions a reference case's filters draw: their SQL and their meaning (NULL where SQL gives NULL)."""

VALUES: list[tuple[str, Callable[[Event], Any]]] = [
    ("x * 2", _of("x", lambda v: v * 2, _as_bigint)),
    ("x - 1", _of("x", lambda v: v - 1, _as_bigint)),
    ("x + 1", _of("x", lambda v: v + 1, _as_bigint)),
    ("x % 3", _of("x", lambda v: _remainder(v, 3), _as_bigint)),
    # coalesce gives its values one type: text among number literals is cast to BIGINT (docs/expressions.md)
    ("coalesce(x, 0)", lambda e: 0 if e.get("x") is None else _as_bigint(e["x"])),
    ("k IS NULL", lambda e: e.get("k") is None),
    ("concat(k, '-')", _of("k", lambda v: v + "-")),
    ("upper(s)", _of("s", str.upper)),
    ("lower(k)", _of("k", str.lower)),
    ("k", lambda e: e.get("k")),
    ("length(s)", _of("s", len)),
    ("true", lambda e: True),
]
"""The values ``annotate``, ``transform`` and ``tee`` set: their SQL and their meaning."""

MEANINGS: dict[str, Callable[[Event], Any]] = {**dict(CONDITIONS), **dict(VALUES)}

NUMERIC_VALUES = ["x * 2", "x - 1", "x + 1", "x % 3", "coalesce(x, 0)", "length(s)"]
"""The values that may replace ``x`` (which the conditions and aggregates read as a number)."""

AGGREGATES = ["count()", "count(x)", "sum(x)", "avg(x)", "min(x)", "max(x)", "count_distinct(x)"]
AGGREGATES_OF_TEXT = ["count()", "count(x)", "sum(x)", "avg(x)", "min(x)", "max(x)"]
"""The aggregates a case with text in ``x`` draws: docs/state.md says what they make of text (``sum`` and ``avg``
read it as a DOUBLE; ``min`` and ``max`` order it beside numbers); distinct counts of text beside numbers, not."""

TEXTS_IN_X = ["7", "-2", "2.5", "oops", "-9", "10"]  # "-9" and "10": text below and above every number
"""Text in ``x``: a number's text (cast beside a number: ``'2.5'`` fails beside an integer, not beside a DOUBLE) or
none (fails beside any number)."""


@st.composite
def clean_event(draw: st.DrawFn, t: int, text_in_x: bool = False) -> Event:
    """An event at ``t``: a key from a small set or NULL, a number or NULL in ``x`` (or, ``text_in_x``, text
    there: ``TEXTS_IN_X``), sometimes text in ``s``."""
    e: Event = {"t": t}
    if draw(st.integers(0, 9)):
        e["k"] = draw(st.one_of(st.sampled_from(KEYS[:3]), st.none()))
    if draw(st.integers(0, 5)):
        numbers = st.one_of(st.integers(-5, 5), st.sampled_from([0.5, -2.25, 3.5, 1.0]), st.none())
        # with text_in_x, text half the time: a group then often holds text and numbers both (min/max's order)
        e["x"] = draw(st.one_of(numbers, st.sampled_from(TEXTS_IN_X)) if text_in_x else numbers)
    if draw(st.booleans()):
        e["s"] = draw(st.sampled_from(STRINGS))
    return e


ON_ERRORS = st.sampled_from([{"on_error": "skip"}, {}])
"""A step's ``on_error``: ``skip``, or the default (``fail``: a clean event never fails, and on Spark a step that
cannot fail compiles without the guard ``skip`` needs, to a plain ``WHERE`` for a filter over typed fields)."""

DEAD = "dead"
ON_ERRORS_OF_TEXT = st.sampled_from([{"on_error": "skip"}, {"on_error": DEAD}, {}])
"""A step's ``on_error`` where events may fail: dropped, to the sink ``dead`` as dead letters, or the default
``fail`` (docs/pipeline-file.md: the event is reported and the run exits 1; the local engine goes on with the
others, and on Spark the query stops, so such a case is compared with the local engine only)."""


@st.composite
def reference_cases(draw: st.DrawFn) -> Case:
    """A pipeline the reference covers (this module's docstring) over clean events."""
    shape = draw(st.integers(0, 7))
    if shape < 2:
        return draw(late_cases())
    in_order = shape > 3  # else a quarter: events out of order through the whole chain (the local engine only)
    n = draw(st.integers(1, 12))
    times = sorted(set(draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))))
    text_in_x = not draw(st.integers(0, 2))  # a third: text in x, failing some steps (skipped or dead-lettered)
    events = [draw(clean_event(t, text_in_x)) for t in times]
    for _ in range(draw(st.integers(0, 3))):  # a redelivered copy a ``within`` away, or a second less or more
        e = draw(st.sampled_from(events))
        t = e["t"] + draw(st.sampled_from([3, 5, 20])) + draw(st.sampled_from([-1, 0, 0, 1]))
        if t not in {other["t"] for other in events}:
            events = sorted([*events, {**e, "t": t}], key=lambda other: other["t"])
    if not in_order:
        events = draw(st.permutations(events))
    # half the typed in-order cases run on Spark as a continuous job: with short delays, for its watermark to close
    # windows and completions before the input stops (their types declared: it starts on the first segment alone)
    schema = draw(st.sampled_from(["", SCHEMA]))  # with text in x: events that do not fit it are malformed
    continuous = in_order and schema == SCHEMA and draw(st.booleans())
    watermarks = st.sampled_from([WATERMARK] if in_order and not continuous else ["0s", "2s", "5s"])
    kinds = draw(st.lists(st.sampled_from(STEPS), max_size=3))
    if continuous:  # an entwine step is the edge's alone: Spark refuses it (docs/entwine.md)
        kinds = [k for k in kinds if k != "entwine"]
    last = draw(st.sampled_from(["window", "complete", None]))
    if last or not kinds:
        kinds.append(last or "window")
    steps: list[dict[str, Any]] = []
    sinks: list[str] = []
    conditions = st.sampled_from([text for text, _ in CONDITIONS])
    for i, kind in enumerate(kinds):
        # a spawned program fails some events whatever x holds
        on_errors = ON_ERRORS_OF_TEXT if text_in_x or kind == "spawn" else ON_ERRORS
        config: dict[str, Any] = {"id": f"{kind}{i}", **draw(on_errors)}
        if config.get("on_error") == DEAD:
            sinks.append(DEAD)
        if kind != "window" and not draw(st.integers(0, 3)):
            config["when"] = draw(conditions)
        if kind in ("filter", "gate"):
            config["where"] = draw(conditions)
        elif kind == "annotate":
            config["set"] = draw(_settings(i))
        elif kind == "transform":
            config["ops"] = [{"set": draw(_settings(i))},
                             draw(st.sampled_from([{"rename": {"s": f"s{i}"}}, {"drop": ["s"]},
                                                   {"keep": ["k", "t", "x"]}]))]
        elif kind == "tee":
            sinks.append("copies")
            config["to"] = "copies"
            if draw(st.booleans()):
                config["set"] = draw(_settings(i))
            if draw(st.booleans()):
                config["keep"] = draw(st.sampled_from([["k", "x"], ["t"], ["s", f"f{i}", f"n{i}"], ["missing"]]))
        elif kind == "spawn":
            program = draw(st.sampled_from(sorted(SPAWNED)))
            config["argv"] = spawn_argv(program)
            if program == "into":
                config["into"] = f"out{i}"
        elif kind == "entwine":
            config.update(timeline=f"timeline{i}", key=OWNER_KEY)
            fields = draw(st.sampled_from([None, ["k", "x"], ["x", "missing"], ["t"]]))
            if fields:
                config["fields"] = fields
            if draw(st.integers(0, 3)):
                config["into"] = f"r{i}"
        elif kind == "lookup":
            config.update(table=TABLE, key=draw(st.sampled_from(["k", "lower(k)"])), match="k")
            if draw(st.booleans()):
                config["fields"] = ["region"]
            if draw(st.booleans()):
                config["into"] = f"info{i}"
            if draw(st.booleans()):
                config["missing"] = "drop"
        elif kind == "dedupe":
            config.update(key=draw(st.sampled_from(["k"] if text_in_x else ["k", "x"])),
                          within=draw(st.sampled_from(["3s", "5s", "20s"])),
                          watermark=draw(watermarks))
        elif kind == "complete":
            parts = draw(st.lists(st.sampled_from([text for text, _ in CONDITIONS]), min_size=2, max_size=3,
                                  unique=True))
            config.update(key="k", parts={f"p{j}": c for j, c in enumerate(parts)}, into="done",
                          timeout=draw(st.sampled_from(["3s", "5s", "10s"])),
                          watermark=draw(st.sampled_from(["0s", "2s"])))
            if not continuous and not draw(st.integers(0, 3)):  # a quarter in processing time (a continuous
                # Spark job with its timers runs a micro-batch every second: it never runs out of work)
                del config["watermark"]
                config.update(time="processing", timeout="1h")
            if draw(st.booleans()):
                config["capture"] = {part: fields for part, fields in zip(
                    config["parts"], draw(st.lists(st.sampled_from([["x"], ["s", "t"], ["nope"], ["x", "k"]]),
                                                   min_size=1, max_size=len(parts))), strict=False)}
        else:
            chosen = draw(st.lists(st.sampled_from(AGGREGATES_OF_TEXT if text_in_x else AGGREGATES), min_size=1,
                                   max_size=3, unique=True))
            config.update(key=draw(st.sampled_from([["k"], []])), aggs={f"a{j}": a for j, a in enumerate(chosen)})
            if kind == "aggregate":
                config["into"] = f"st{i}"
            else:
                config.update(draw(window_shapes()))
                config["watermark"] = draw(watermarks)
        steps.append({kind: config})
    envelopes = draw(st.lists(st.integers(0, len(events) - 1), unique=True, max_size=len(events)))
    files = draw(st.integers(1, 3))
    if continuous:
        ARRIVALS["continuous: a segment at a time"] += 1
        return Case(steps, events, sorted(set(sinks)), sorted(envelopes), files, draw(st.lists(
            st.integers(1, max(1, len(events) - 1)), max_size=3, unique=True)) if len(events) > 1 else [],
                    schema=SCHEMA, tables=_tables(kinds), continuous=True)
    return Case(steps, events, sorted(set(sinks)), sorted(envelopes), files, *draw(arrivals(len(events))),
                schema=schema, tables=_tables(kinds))


def _tables(kinds: list[str]) -> dict[str, Any]:
    """The files beside a case's pipeline: the lookup table, the timeline owner's key."""
    return {**({TABLE: REGIONS} if "lookup" in kinds else {}), **({OWNER_KEY: owner_pem()} if "entwine" in kinds
                                                                 else {})}


TABLE = "regions.json"
REGIONS = [{"k": "a", "region": "north", "w": 2}, {"k": "b", "region": "Süd", "w": None},
           {"k": "c", "region": "", "w": 1.5}]
"""The lookup table a reference case's ``lookup`` steps join (the key ``'ä'`` and NULL have no row)."""

STEPS = ["filter", "gate", "annotate", "transform", "tee", "lookup", "spawn", "entwine", "dedupe", "aggregate"]
"""The steps a chain draws before its last (a window, a completion or none)."""


def _settings(i: int) -> st.SearchStrategy[dict[str, str]]:
    """What an ``annotate``, a ``transform``'s ``set`` or a ``tee`` sets: a new field, a nested one, or ``x``."""
    return st.one_of(
        st.sampled_from([text for text, _ in VALUES]).map(lambda v: {f"f{i}": v}),
        st.sampled_from([text for text, _ in VALUES]).map(lambda v: {f"n{i}.v": v, "x": "x * 2"}),
        st.sampled_from(NUMERIC_VALUES).map(lambda v: {"x": v}),
    )


SCHEMA = "t BIGINT, k STRING, x DOUBLE, s STRING"
"""The clean events' fields as a source's ``schema``: Spark reads them typed, and compiles what it can without
the guard an untyped field needs (a filter over typed fields is one ``WHERE``)."""


def window_shapes() -> st.SearchStrategy[dict[str, str]]:
    """A window's shape: tumbling, sliding (``every`` a divisor of its size, or not) or session."""
    return st.one_of(st.sampled_from(["5s", "10s", "30s"]).map(lambda size: {"tumbling": size}),
                     st.tuples(st.sampled_from(["10s", "30s"]), st.sampled_from(["5s", "10s", "4s"])).map(
                         lambda pair: {"sliding": pair[0], "every": pair[1]}),
                     st.sampled_from(["3s", "5s", "10s"]).map(lambda gap: {"session": gap}))


@st.composite
def late_cases(draw: st.DrawFn) -> Case:
    """Filters, then a window with a short watermark delay, over events out of order: some are late."""
    n = draw(st.integers(2, 12))
    times = draw(st.lists(st.integers(0, 40), min_size=n, max_size=n, unique=True))
    events = [draw(clean_event(t)) for t in times]
    steps: list[dict[str, Any]] = []
    if draw(st.booleans()):
        steps.append({"filter": {"id": "filter0", **draw(ON_ERRORS),
                                 "where": draw(st.sampled_from([text for text, _ in CONDITIONS]))}})
    chosen = draw(st.lists(st.sampled_from(AGGREGATES), min_size=1, max_size=3, unique=True))
    steps.append({"window": {"id": f"window{len(steps)}", **draw(ON_ERRORS),
                             "key": draw(st.sampled_from([["k"], []])),
                             "aggs": {f"a{j}": a for j, a in enumerate(chosen)}, **draw(window_shapes()),
                             "watermark": draw(st.sampled_from(["0s", "2s", "5s"]))}})
    envelopes = draw(st.lists(st.integers(0, len(events) - 1), unique=True, max_size=len(events)))
    return Case(steps, events, [], sorted(envelopes), draw(st.integers(1, 3)), *draw(arrivals(len(events))),
                schema=draw(st.sampled_from(["", SCHEMA])))


# ---------------------------------------------------------------- the steps


def _program(config: dict[str, Any]) -> str:
    """The ``SPAWNED`` program a ``spawn`` step runs."""
    return next(p for p in SPAWNED if config["argv"] == spawn_argv(p))


def _seconds(duration: str) -> int:
    """A duration the cases write (``5s``, ``1h``) in seconds."""
    return int(duration[:-1]) * {"s": 1, "m": 60, "h": 3600}[duration[-1]]


Evaluate = Callable[[str, list[Event]], list[Any]]
"""An expression's value for each of a list of events (``evaluate_here``, or ``spark_evaluator``'s)."""


def evaluate_here(text: str, events: list[Event]) -> list[Any]:
    """The reference's own evaluator: the meanings ``CONDITIONS`` and ``VALUES`` give (``Failed`` where one
    fails)."""
    meaning = MEANINGS[text]

    def value(e: Event) -> Any:
        try:
            return meaning(e)
        except _Fails as exc:
            return Failed(exc.error)

    return [value(e) for e in events]


def spark_evaluator(spark: Any) -> Evaluate:
    """Expressions evaluated by Spark's batch SQL over the events as typed rows (``k`` STRING, ``x`` DOUBLE, ``s``
    STRING: every field a condition or a value reads), one query per expression and list of events."""
    known: dict[tuple[str, tuple[Any, ...]], list[Any]] = {}

    def evaluate(text: str, events: list[Event]) -> list[Any]:
        if not events:
            return []
        rows = tuple((i, e.get("k"), None if e.get("x") is None else float(e["x"]), e.get("s"))
                     for i, e in enumerate(events) if not isinstance(e.get("x"), str))
        if (text, rows) not in known:
            frame = spark.createDataFrame(list(rows), "i BIGINT, k STRING, x DOUBLE, s STRING")
            known[text, rows] = [r[0] for r in frame.orderBy("i").selectExpr(f"{text} AS v").collect()]
        values = iter(known[text, rows])
        return [text_row(text, e) if isinstance(e.get("x"), str) else next(values) for e in events]

    def text_row(text: str, e: Event) -> Any:
        """An event with text in ``x``: a query of its own over a row where ``x`` is a STRING (one that fails
        fails alone), its error class read from Spark's message."""
        row = (e.get("k"), e["x"], e.get("s"))
        if (text, row) not in known:
            frame = spark.createDataFrame([row], "k STRING, x STRING, s STRING")
            try:
                known[text, row] = [frame.selectExpr(f"{text} AS v").collect()[0][0]]
            except Exception as exc:  # Spark's error of the expression: the event fails
                found = re.search(r"\[([A-Z_]+)(\.[A-Z_]+)?\]", str(exc))
                known[text, row] = [Failed(found.group(1) if found else type(exc).__name__)]
        return known[text, row][0]
    return evaluate


def run_filter(events: list[Event], truths: list[Truth]) -> list[Event]:
    """Keeps the events whose condition is true (NULL drops, as SQL's WHERE)."""
    return [e for e, truth in zip(events, truths, strict=True) if truth is True]


def run_set(events: list[Event], settings: dict[str, str], evaluate: Evaluate) -> list[Event]:
    """``annotate``'s ``set``: each path gets its value, every value computed from the event as it was; a dotted
    path makes the objects on its way (replacing what is not an object there)."""
    values = {path: evaluate(text, events) for path, text in settings.items()}
    out = []
    for i, e in enumerate(events):
        changed = dict(e)
        for path, column in values.items():
            *parents, last = path.split(".")
            target = changed
            for part in parents:
                inner = target.get(part)
                target[part] = dict(inner) if isinstance(inner, dict) else {}
                target = target[part]
            target[last] = column[i]
        out.append(changed)
    return out


def run_transform(events: list[Event], ops: list[dict[str, Any]], evaluate: Evaluate) -> list[Event]:
    """``transform``: its operations in order, each on what the one before gave."""
    for op in ops:
        [(name, arg)] = op.items()
        if name == "set":
            events = run_set(events, arg, evaluate)
        elif name == "rename":  # a field that is not there is not renamed
            events = [{arg.get(k, k): v for k, v in e.items()} for e in events]
        elif name == "drop":
            events = [{k: v for k, v in e.items() if k not in arg} for e in events]
        else:  # keep
            events = [{k: v for k, v in e.items() if k in arg or k.startswith("__")} for e in events]
    return events


def run_lookup(events: list[Event], keys: list[Any], config: dict[str, Any], rows: list[dict[str, Any]]) -> list[Event]:
    """``lookup``: the table's row whose ``match`` column equals the key (as text); its columns (``fields``, or all
    but the key) merged into the event or, with ``into``, an object there. An event with no row (a NULL key
    included) is dropped with ``missing: drop``, and otherwise kept with those columns NULL (``into`` NULL)."""
    match = config["match"]
    table = {str(row[match]): row for row in rows}
    columns = config.get("fields") or [c for c in rows[0] if c != match]
    out = []
    for e, key in zip(events, keys, strict=True):
        row = None if key is None else table.get(str(key))
        if row is None and config.get("missing") == "drop":
            continue
        selected = None if row is None else {c: row.get(c) for c in columns}
        if "into" in config:
            out.append({**e, config["into"]: selected})
        else:
            out.append({**e, **(selected or dict.fromkeys(columns))})
    return out


def when_applies(events: list[Event], when: str | None, step: Callable[[list[Event]], list[Event]],
                 evaluate: Evaluate) -> list[Event]:
    """A step with ``when`` takes the events where it is TRUE; the others pass unchanged, in their place."""
    if when is None:
        return step(events)
    tagged = [{**e, INDEX: i} for i, e in enumerate(events)]
    applies = [truth is True for truth in evaluate(when, tagged)]
    results: dict[int, list[Event]] = {}
    extra: list[Event] = []
    for r in step([e for e, yes in zip(tagged, applies, strict=True) if yes]):
        if INDEX in r:
            results.setdefault(r[INDEX], []).append(r)
        else:
            extra.append(r)  # a completion's time-out: not in any event's place
    out: list[Event] = []
    for i, e in enumerate(tagged):
        out += results.get(i, []) if applies[i] else [e]
    return [{k: v for k, v in e.items() if k != INDEX} for e in out + extra]


INDEX = "__index"
"""Where ``when_applies`` keeps an event's place while its step runs."""


def run_dedupe(events: list[Event], key: str, within: int, delay: int = 0) -> list[Event]:
    """Drops an event whose key was kept less than ``within`` seconds of event time away (before or after it); a
    NULL key is never a duplicate. Keys compare as SQL's GROUP BY does (1 and 1.0 are one key). A kept time is
    forgotten once the watermark (the largest event time the step has seen, minus ``delay``) is ``within`` past
    it: an event out of order that comes after that is kept again."""
    kept_times: dict[Any, list[int]] = {}
    out = []
    largest: int | None = None
    for e in events:
        largest = e[TIME] if largest is None else max(largest, e[TIME])
        watermark = largest - delay
        for value, times in kept_times.items():
            kept_times[value] = [t for t in times if watermark - t < within]
        value = e.get(key)
        if value is not None and any(abs(e[TIME] - t) < within for t in kept_times.get(value, [])):
            continue
        if value is not None:
            kept_times.setdefault(value, []).append(e[TIME])
        out.append(e)
    return out


def _aggregate(values: list[Any], count_rows: int, spec: str) -> Any:
    """One aggregate over a group: ``values`` the group's ``x`` (NULLs included), ``count_rows`` its rows."""
    fn = spec.split("(")[0]
    xs = [v for v in values if v is not None]
    if spec == "count()":
        return count_rows
    if fn == "count":
        return len(xs)
    if fn == "count_distinct":
        return len(set(xs))
    if not xs:
        return None
    if fn in ("sum", "avg"):  # text is read as a DOUBLE (an event whose text is no number failed the step)
        xs = [_as_double(v) for v in xs]
    if fn == "sum":
        return sum(xs)
    if fn == "avg":
        return sum(xs) / len(xs)
    ranked = sorted(xs, key=_min_max_rank)
    return ranked[0] if fn == "min" else ranked[-1]


def _min_max_rank(v: Any) -> tuple[int, float, int, str]:
    """docs/state.md's order for ``min`` and ``max``: numbers by value; text that reads as a number (a sign,
    digits, a fraction, an exponent) by that number, just after the number itself; other text last, as text."""
    if not isinstance(v, str):
        return (0, float(v), 0, "")
    if re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", v, flags=re.ASCII):
        return (0, float(v), 1, v)
    return (2, 0.0, 0, v)


def run_aggregate(events: list[Event], keys: list[str], aggs: dict[str, str], into: str) -> list[Event]:
    """Each event leaves with its group's aggregates, itself counted, under ``into``."""
    groups: dict[tuple[Any, ...], list[Event]] = {}
    out = []
    for e in events:
        group = groups.setdefault(tuple(e.get(k) for k in keys), [])
        group.append(e)
        xs = [g.get("x") for g in group]
        out.append({**e, into: {name: _aggregate(xs, len(group), spec) for name, spec in aggs.items()}})
    return out


def run_complete(events: list[Event], key: str, parts: dict[str, str], timeout: int, delay: int,
                 into: str, evaluate: Evaluate = evaluate_here, capture: dict[str, list[str]] | None = None,
                 closed_by: float = math.inf, processing: bool = False) -> list[Event]:
    """docs/state.md, ``complete``: an event with a key and at least one part (a condition that is true) joins
    the key's open completion, or opens one whose deadline is its time plus ``timeout``. It leaves with
    ``{status, key, seen, missing}`` under ``into`` (parts in the order they are declared), and with a
    ``capture`` ``parts``: each part seen that ``capture`` names, with its fields as ``capture`` writes them, read
    from the part's latest event (NULL where it has none): ``completed`` when no part is missing (the completion
    closes), ``triggered`` otherwise. When event time reaches a new largest value, every open completion whose
    deadline is at or before the watermark (that time minus ``delay``) times out first: a record of its own,
    ``{into: {status: timed_out, ...}}``. At the end of the input every open completion times out; where the
    input does not end (a continuous Spark job), those whose deadline is at or before ``closed_by`` (the query's
    last watermark). In processing time (``processing``) the clock does not reach a deadline while the case runs
    (its ``timeout`` is an hour): nothing times out before the end."""
    names = list(parts)
    truths = {n: evaluate(parts[n], events) for n in names}
    open_: dict[Any, tuple[int, set[str]]] = {}  # key -> (deadline, parts seen)
    captured: dict[Any, dict[str, dict[str, Any]]] = {}  # key -> part -> its captured fields

    def status(name: str, k: Any, seen: set[str]) -> dict[str, Any]:
        record = {"status": name, "key": k, "seen": [n for n in names if n in seen],
                  "missing": [n for n in names if n not in seen]}
        if capture:
            record["parts"] = {n: captured[k][n] for n in names if n in seen and n in capture}
        return record

    def time_out(watermark: float) -> list[Event]:
        due = [k for k, (deadline, _) in open_.items() if deadline <= watermark]
        return [{into: status("timed_out", k, open_.pop(k)[1])} for k in due]

    out: list[Event] = []
    largest: int | None = None
    for i, e in enumerate(events):
        if not processing and (largest is None or e[TIME] > largest):
            largest = e[TIME]
            out += time_out(largest - delay)
        k = e.get(key)
        matched = {n for n in names if truths[n][i] is True}
        if k is None or not matched:
            out.append(e)
            continue
        if k not in open_:
            captured[k] = {}
        _, seen = open_.setdefault(k, (e[TIME] + timeout, set()))
        seen |= matched
        for n in matched:
            captured[k][n] = {field: e.get(field) for field in (capture or {}).get(n, [])}
        if len(seen) == len(names):
            del open_[k]
            out.append({**e, into: status("completed", k, seen)})
        else:
            out.append({**e, into: status("triggered", k, seen)})
    return out + time_out(closed_by)


def _iso(seconds: int) -> str:
    """A window bound as a result writes it (a sliding window's first ones start before the epoch)."""
    return (datetime.datetime(1970, 1, 1) + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _watermarks(events: list[Event], delay: int, batches: list[int] | None) -> list[float]:
    """The watermark each event meets: the largest event time of the events before it minus ``delay`` (the local
    engine, after every event), or, given ``batches`` (each event's micro-batch), of the micro-batches before its
    own (Spark); ``-inf`` before any."""
    out = []
    for i in range(len(events)):
        before = [o[TIME] for j, o in enumerate(events[:i]) if batches is None or batches[j] < batches[i]]
        out.append(max(before) - delay if before else -math.inf)
    return out


def on_time(events: list[Event], shape: dict[str, str], delay: int, batches: list[int] | None) -> list[Event]:
    """docs/state.md: an event is late when the end of its window (every window, for a sliding one) is at or before
    the watermark it meets (``_watermarks``). Each event that is not late, with the starts of its windows that
    are still open (``WINDOWS``): a sliding window whose end the watermark passed has been given and dropped, so an
    event takes only the later ones."""
    size = _seconds(shape.get("tumbling") or shape["sliding"])
    every = _seconds(shape.get("every") or shape.get("tumbling") or shape["sliding"])
    taken = []
    for e, watermark in zip(events, _watermarks(events, delay, batches), strict=True):
        starts = [start for start in _window_starts(e[TIME], size, every) if start + size > watermark]
        if starts:
            taken.append({**e, WINDOWS: starts})
    return taken


WINDOWS = "__windows"
"""The starts of the windows an event is taken into (``on_time``)."""


def _window_starts(t: int, size: int, every: int) -> list[int]:
    """The starts of the windows of ``size`` every ``every`` (aligned to the epoch) that hold time ``t``."""
    start = t - t % every
    starts = []
    while start > t - size:
        starts.append(start)
        start -= every
    return starts


def sessions(events: list[Event], keys: list[str], gap: int, delay: int = 0,
             batches: list[int] | None = None) -> list[tuple[tuple[Any, ...], int, int, list[Event]]]:
    """docs/state.md's sessions, as ``(key, start, end, events)``: a session runs from its first event to ``gap``
    after its last, and a key's sessions that overlap or touch are one. Events come in arrival order, one at a time
    (the local engine) or a micro-batch at a time (``batches``: Spark); a session whose end the watermark reached
    is given and dropped, so a later event that would have touched it starts a session of its own; an event whose
    own session ``[t, t + gap)`` ends at or before the watermark it meets is late."""
    watermarks = _watermarks(events, delay, batches)
    units = [[i] for i in range(len(events))] if batches is None else [
        [i for i, b in enumerate(batches) if b == n] for n in sorted(set(batches))]
    held: dict[tuple[Any, ...], list[tuple[int, int, list[Event]]]] = {}
    given: list[tuple[tuple[Any, ...], int, int, list[Event]]] = []
    seen = -math.inf
    for unit in units:
        for i in unit:
            e = events[i]
            if e[TIME] + gap <= watermarks[i]:
                continue  # late
            key = tuple(e.get(k) for k in keys)
            start, end, members = e[TIME], e[TIME] + gap, [e]
            apart = []
            for other in held.get(key, []):
                if other[0] <= end and start <= other[1]:  # overlaps or touches: one session
                    start, end, members = min(start, other[0]), max(end, other[1]), [*other[2], *members]
                else:
                    apart.append(other)
            held[key] = [*apart, (start, end, members)]
        seen = max([seen, *(events[i][TIME] for i in unit)])
        # the watermark after the unit: the local engine's moves with each event; Spark drops state at the end of
        # a micro-batch by that micro-batch's own watermark (the one its events met)
        after = seen - delay if batches is None else watermarks[unit[0]]
        for key, open_ in held.items():
            given += [(key, *s) for s in open_ if s[1] <= after]
            held[key] = [s for s in open_ if s[1] > after]
    return given + [(key, *s) for key, open_ in held.items() for s in open_]


def run_window(events: list[Event], keys: list[str], shape: dict[str, str], aggs: dict[str, str], step: str = "w",
               closed_by: float = math.inf, delay: int = 0, batches: list[int] | None = None) -> list[Event]:
    """docs/state.md, ``window``: one record per key and window holding events, with the id docs/state.md gives it
    (``<step>:<window start µs>:<key JSON>``). Windows are aligned to the epoch: a tumbling window of size S holds
    ``start <= t < start + S``, ``start`` a multiple of S; a sliding one of size S ``every`` E the same with
    ``start`` a multiple of E (an event in each of them); a session runs from its first event to ``session`` (the
    gap) after its last, and a key's sessions that overlap or touch are one. At the end of the input every window
    closes; where the input does not end, those whose end is at or before ``closed_by``. Tumbling and sliding
    windows take each event into the windows ``on_time`` gave it (all of them, where it did not run); sessions
    close as the watermark (``delay``, ``batches``) reaches their end (``sessions``)."""
    groups: dict[tuple[tuple[Any, ...], int, int], list[Event]] = {}
    if "session" in shape:
        for key, first, end, held in sessions(events, keys, _seconds(shape["session"]), delay, batches):
            groups[key, first, end] = held
    else:
        size = _seconds(shape.get("tumbling") or shape["sliding"])
        every = _seconds(shape.get("every") or shape.get("tumbling") or shape["sliding"])
        for e in events:
            for start in e.get(WINDOWS, _window_starts(e[TIME], size, every)):
                groups.setdefault((tuple(e.get(k) for k in keys), start, start + size), []).append(e)
    out = []
    for (key, start, end), group in groups.items():
        if end > closed_by:
            continue
        record: Event = dict(zip(keys, key, strict=True))
        record.update(window_start=_iso(start), window_end=_iso(end))
        record[ID] = f"{step}:{start * 1_000_000}:{json.dumps(list(key), separators=(',', ':'), ensure_ascii=False)}"
        xs = [g.get("x") for g in group]
        record.update({name: _aggregate(xs, len(group), spec) for name, spec in aggs.items()})
        out.append(record)
    return out


BATCH = "__micro_batch"
"""Where the reference keeps an event's micro-batch while it runs (never in what it gives)."""


def step_failures(kind: str, config: dict[str, Any], events: list[Event], evaluate: Evaluate) -> list[str | None]:
    """The error class each event fails the step with (None: it does not fail). The step evaluates its ``when``
    first (an event it is not TRUE for passes by, nothing else evaluated), then its own expressions on the event
    as it came; a ``transform``'s operations in order, each on what the one before made; ``sum`` and ``avg`` read
    ``x`` as a DOUBLE."""
    errors: list[str | None] = [None] * len(events)

    def mark(indexes: list[int], texts: list[str], on: list[Event]) -> list[int]:
        """The indexes among ``indexes`` that do not fail any of ``texts`` (evaluated over ``on``)."""
        for text in texts:
            for i, value in zip(indexes, evaluate(text, on), strict=True):
                if isinstance(value, Failed) and errors[i] is None:
                    errors[i] = value.error
        return [i for i in indexes if errors[i] is None]

    live = list(range(len(events)))
    if config.get("when"):
        truths = evaluate(config["when"], events)
        live = [i for i in mark(live, [config["when"]], events) if truths[i] is True]
    if kind in ("filter", "gate"):
        mark(live, [config["where"]], [events[i] for i in live])
    elif kind in ("annotate", "tee"):
        mark(live, list(config.get("set", {}).values()), [events[i] for i in live])
    elif kind == "lookup":
        mark(live, [config["key"]], [events[i] for i in live])
    elif kind == "spawn":  # docs/pipeline-file.md: it fails the event (a StepError)
        program = _program(config)
        for i in live:
            if spawn_fails(program, config.get("into"), events[i]):
                errors[i] = "StepError"
    elif kind == "complete":  # an event without a key passes unchanged: its parts are not evaluated
        keys = evaluate(config["key"], [events[i] for i in live])
        keyed = [i for i, key in zip(live, keys, strict=True) if key is not None]
        mark(keyed, list(config["parts"].values()), [events[i] for i in keyed])
    elif kind == "transform":
        now = {i: events[i] for i in live}
        for op in config["ops"]:
            live = mark(live, list(op.get("set", {}).values()), [now[i] for i in live])
            for i, changed in zip(live, run_transform([now[i] for i in live], [op], evaluate), strict=True):
                now[i] = changed
    elif kind in ("aggregate", "window") and any(a in ("sum(x)", "avg(x)") for a in config["aggs"].values()):
        for i in live:
            try:
                _as_double(events[i].get("x"))
            except _Fails as exc:
                errors[i] = exc.error
    return errors


SPAWNED = {
    "into": """import json, sys
e = json.loads(sys.stdin.buffer.read())
k, x = e.get("k"), e.get("x")
if k == "b":
    sys.exit(3)
if k is None:
    sys.exit(0)
print("oops" if isinstance(x, str) else json.dumps({"k": k, "x2": None if x is None else x * 2}))
""",
    "replace": """import json, sys
e = json.loads(sys.stdin.buffer.read())
k = e.get("k")
if k is not None:
    print(json.dumps([k]) if k == "a" else json.dumps({"k": k, "x": e.get("x"), "from": "spawn"}))
""",
}
"""The programs a reference case's ``spawn`` runs (``python3 -I -c <program>``), by the way it writes what they
print: under ``into``, or replacing the event."""


def spawn_argv(program: str) -> list[str]:
    return ["python3", "-I", "-c", SPAWNED[program]]


def spawned(program: str, e: Event) -> tuple[str, Any]:
    """What ``SPAWNED[program]`` prints for ``e``, worked out by reading it rather than by running it: ``("fail",
    None)`` for a non-zero exit or output that is no JSON, ``("nothing", None)`` for no output, else ``("value",
    the JSON value)``. The programs read ``k`` and ``x`` only (the reference's own ``__`` fields do not reach them)."""
    k, x = e.get("k"), e.get("x")
    if program == "into":
        if k == "b":
            return "fail", None
        if k is None:
            return "nothing", None
        return ("fail", None) if isinstance(x, str) else ("value", {"k": k, "x2": None if x is None else x * 2})
    if k is None:
        return "nothing", None
    return "value", [k] if k == "a" else {"k": k, "x": x, "from": "spawn"}


def run_spawn(events: list[Event], program: str, into: str | None) -> list[Event]:
    """docs/pipeline-file.md, ``spawn``: the program gets the event as JSON; what it prints goes under ``into``
    or, without one, replaces the event (which keeps its id and time); no output leaves the event as it was. (An
    event the program fails, or whose output cannot replace it, failed the step: ``step_failures``.)"""
    out = []
    for e in events:
        outcome, value = spawned(program, e)
        if outcome == "nothing":
            out.append(e)
        elif into is not None:
            out.append({**e, into: value})
        else:
            out.append({**value, **{k: v for k, v in e.items() if k.startswith("__")}})
    return out


def spawn_fails(program: str, into: str | None, e: Event) -> bool:
    """The program exits non-zero or prints no JSON, or (without ``into``) prints a value that is no object."""
    outcome, value = spawned(program, e)
    return outcome == "fail" or (outcome == "value" and into is None and not isinstance(value, dict))


def run_entwine(events: list[Event], config: dict[str, Any], entries: list[Event]) -> list[Event]:
    """docs/entwine.md: each event's entry appended to the timeline (``timeline_model.appended``: one per event
    id), in the order the events reach the step; with ``into``, its receipt onto the event."""
    out = []
    for e in events:
        entry = appended(entries, e[ID], {k: v for k, v in e.items() if not k.startswith("__")}, config.get("fields"))
        out.append({**e, config["into"]: receipt(entry)} if config.get("into") else e)
    return out


def dead_letter(e: Event, step: str, error: str) -> Event:
    """What a step's ``on_error`` sink gets for an event that failed it: the event as it came to the step."""
    return {"event": {k: v for k, v in e.items() if k not in (BATCH, TIME, INDEX, ID)}, "step": step,
            "error": {"type": error}, TIME: e[TIME]}


def reference(case: Case, per_micro_batch: bool = False, evaluate: Evaluate = evaluate_here) -> list[Event]:
    """The pipeline's results over the case's events: as the local engine promises them, or as Spark does, reading
    the spool's segments one per micro-batch (``per_micro_batch``) or all in one."""
    return [{k: v for k, v in r.items() if k != ID} for r in reference_outputs(case, per_micro_batch, evaluate)[""]]


def reference_outputs(case: Case, per_micro_batch: bool = False, evaluate: Evaluate = evaluate_here,
                      ends: bool = True) -> dict[str, list[Event]]:
    """``reference``'s results under ``""``, and what ``tee`` steps sent to each sink under its id; expressions
    evaluated by ``evaluate``. Records keep their id under ``ID`` where docs give it (None: a completion's time-out,
    whose id they do not).

    Without ``ends`` the input does not end (a continuous Spark job, ``Case.continuous``): a last window or
    completion gives only what the query's last watermark closed. Spark keeps one watermark per query
    (docs/spark.md, Chained stateful steps): the largest, over the steps with a watermark, of the newest event
    time that reached the step, less its delay. Rows on their way to a sink count where they pass the step (a
    ``tee``'s copy, a dead letter), and so do events a step then fails, except where a window skips them (it
    takes failing events out before it reads time; a keyed step's own code fails them)."""
    events = [dict(e, **{TIME: e["t"]}) for e in case.events]
    for n, (first, end) in enumerate(case.segments()):
        for line, (i, e) in enumerate(zip(range(first, end), events[first:end], strict=True), 1):
            e[BATCH] = n if case.micro_batches or case.continuous else 0  # else Spark reads every segment in one
            # docs/pipeline-file.md, Events: <source id>:<file>:<line>, or the envelope's own id
            e[ID] = f"up:{i}" if i in case.envelopes else f"spool:part-{n + 1}.ndjson:{line}"
    # docs/pipeline-file.md, Sources: an event whose declared field holds a value of another kind is malformed
    # input on both engines (reported and skipped before any step)
    events = [e for e in events if fits_the_schema(e, case.schema)]
    sinks: dict[str, list[Event]] = {}
    timelines: dict[str, list[Event]] = {}
    query_watermark = -math.inf
    for step in case.steps:
        kind, config = next(iter(step.items()))
        errors = step_failures(kind, config, events, evaluate)
        if kind in ("dedupe", "window") or (kind == "complete" and config.get("time") != "processing"):
            skipped = kind == "window" and config.get("on_error", "fail") == "skip"
            times = [e[TIME] for e, error in zip(events, errors, strict=True) if not (skipped and error)]
            times += [r[TIME] for records in sinks.values() for r in records]
            if times:
                query_watermark = max(query_watermark, max(times) - _seconds(config["watermark"]))
        closed_by = math.inf if ends else query_watermark
        run: Callable[[list[Event]], list[Event]]
        if kind in ("filter", "gate"):  # a gate stops the pipeline for the others: its results are a filter's
            run = lambda es, c=config: run_filter(es, evaluate(c["where"], es))  # noqa: E731
        elif kind == "annotate":
            run = lambda es, c=config: run_set(es, c["set"], evaluate)  # noqa: E731
        elif kind == "transform":
            run = lambda es, c=config: run_transform(es, c["ops"], evaluate)  # noqa: E731
        elif kind == "tee":
            def run(es: list[Event], c: dict[str, Any] = config) -> list[Event]:
                """The copy: ``set`` applied, then only the top-level fields ``keep`` names that it has."""
                copies = run_set(es, c.get("set", {}), evaluate)
                if "keep" in c:
                    copies = [{k: v for k, v in e.items() if k in c["keep"] or k.startswith("__")} for e in copies]
                sinks.setdefault(c["to"], []).extend(copies)
                return es
        elif kind == "lookup":
            run = lambda es, c=config: run_lookup(es, evaluate(c["key"], es), c, case.tables[c["table"]])  # noqa: E731
        elif kind == "spawn":
            run = lambda es, c=config: run_spawn(es, _program(c), c.get("into"))  # noqa: E731
        elif kind == "entwine":
            run = lambda es, c=config: run_entwine(es, c, timelines.setdefault(c["timeline"], []))  # noqa: E731
        elif kind == "dedupe":
            run = lambda es, c=config: run_dedupe(es, c["key"], _seconds(c["within"]),  # noqa: E731
                                                  _seconds(c["watermark"]))
        elif kind == "aggregate":
            run = lambda es, c=config: run_aggregate(es, c["key"], c["aggs"], c["into"])  # noqa: E731
        elif kind == "complete":
            def run(es: list[Event], c: dict[str, Any] = config, closed: float = closed_by) -> list[Event]:
                processing = c.get("time") == "processing"
                if processing:  # Spark's processing-time timers fire by its clock only: a --once run leaves the
                    # completions open in the checkpoint (docs/spark.md, Differences); a local run's end times out
                    closed = -math.inf if per_micro_batch else math.inf
                return run_complete(es, c["key"], c["parts"], _seconds(c["timeout"]),
                                    _seconds(c.get("watermark", "0s")), c["into"], evaluate, c.get("capture"),
                                    closed, processing)
        else:
            def run(es: list[Event], c: dict[str, Any] = config, closed: float = closed_by) -> list[Event]:
                batches = [e[BATCH] for e in es] if per_micro_batch else None
                if "session" not in c:
                    es = on_time(es, c, _seconds(c["watermark"]), batches)
                return run_window(es, c["key"], c, c["aggs"], c["id"], closed, _seconds(c["watermark"]), batches)
        if any(errors):  # the failed events go to the step's on_error: dropped (skip), reported (fail) or to a sink
            target = config.get("on_error", "fail")
            if target != "skip":
                sinks.setdefault(FAILED if target == "fail" else target, []).extend(
                    dead_letter(e, config["id"], error) for e, error in zip(events, errors, strict=True) if error)
            events = [e for e, error in zip(events, errors, strict=True) if error is None]
        events = when_applies(events, config.get("when"), run, evaluate)
    hidden = (BATCH, TIME, INDEX)
    return {route: [{k: v for k, v in e.items() if k not in hidden} for e in records]
            for route, records in {"": events, **sinks}.items()} | {
                TIMELINE + name: entries for name, entries in timelines.items()}


TIMELINE = "timeline:"
"""``reference_outputs``' key for an ``entwine`` step's timeline (its directory follows): the entries the docs give
it, in order."""


def fits_the_schema(event: Event, schema: str) -> bool:
    """Whether each field ``schema`` declares (``"t BIGINT, k STRING, x DOUBLE"``) holds NULL, nothing, or a value
    of its type's kind: an integer for BIGINT, a number for DOUBLE, text for STRING."""
    for column in filter(None, (c.strip() for c in schema.split(","))):
        name, kind = column.split()
        value = event.get(name)
        if value is None:
            continue
        if kind.upper() == "STRING" and not isinstance(value, str):
            return False
        if kind.upper() in ("BIGINT", "DOUBLE") and (isinstance(value, bool) or not isinstance(value, int | float)):
            return False
        if kind.upper() == "BIGINT" and not isinstance(value, int):
            return False
    return True


TIME = "__time"
"""An event's time (its ``t`` as it came: a transform may drop or replace ``t``, and its time stays)."""
ID = "__id"
"""A record's id: an event's from where it was read, a window result's from its step, window and key."""


def documented_id(record_id: str | None, record: Event) -> str | None:
    """The id a result is compared by: its own, except a completion's time-out record's (``{<into>: {status:
    timed_out, ...}}``), whose id docs/state.md does not give."""
    values = list(record.values())
    if len(values) == 1 and isinstance(values[0], dict) and values[0].get("status") == "timed_out":
        return None
    return record_id


# ---------------------------------------------------------------- against the engines


def reference_applies(case: Case) -> bool:
    """The case is one ``reference_cases`` could draw (a kept fixture, say): its steps, their settings and clean
    events."""
    kinds = [next(iter(s)) for s in case.steps]
    if (not set(case.sinks) <= {"copies", DEAD} or case.schema not in ("", SCHEMA)
            or any(k in ("window", "complete") for k in kinds[:-1])
            or any(k not in (*STEPS, "window", "complete") for k in kinds)):
        return False
    return all(_step_applies(kind, config) for kind, config in (next(iter(s.items())) for s in case.steps)) and (
        _events_apply(case, text_in_x=_takes_text_in_x(case)))


def _takes_text_in_x(case: Case) -> bool:
    """The case may have text in ``x`` (``reference_cases``' ``text_in_x``): it dedupes by ``k`` and
    aggregates ``AGGREGATES_OF_TEXT``."""
    configs = [next(iter(s.items())) for s in case.steps]
    return (all(c.get("on_error", "fail") in ("skip", DEAD, "fail") for _, c in configs)
            and all((kind != "dedupe" or c["key"] == "k")
                    and all(a in AGGREGATES_OF_TEXT for a in c.get("aggs", {}).values()) for kind, c in configs))


def _step_applies(kind: str, config: dict[str, Any]) -> bool:
    conditions, values = dict(CONDITIONS), dict(VALUES)
    if config.get("on_error", "fail") not in ("skip", "fail", DEAD) or config.get("when", "x > 0") not in conditions:
        return False
    if kind in ("filter", "gate"):
        return bool(config["where"] in conditions)
    if kind in ("annotate", "tee"):
        return all(v in values for v in config.get("set", {}).values()) and config.get("to", "copies") == "copies"
    if kind == "transform":
        return all(next(iter(op)) in ("rename", "drop", "keep") or all(v in values for v in op["set"].values())
                   for op in config["ops"])
    if kind == "lookup":
        return bool(config["key"] in values and config.get("missing", "null") in ("null", "drop"))
    if kind == "entwine":
        return (config["key"] == OWNER_KEY and not config.get("anchors") and config["timeline"].startswith("timeline")
                and config.get("fields") in (None, ["k", "x"], ["x", "missing"], ["t"]))
    if kind == "spawn":
        return config.get("wait", True) and any(config["argv"] == spawn_argv(p) for p in SPAWNED) and (
            config.get("into") is not None) == (_program(config) == "into")
    if kind == "dedupe":
        return bool(config["key"] in ("k", "x"))
    if kind in ("aggregate", "window"):
        return (all(a in AGGREGATES for a in config["aggs"].values()) and all(k == "k" for k in config["key"])
                and (kind == "aggregate" or (_window_shape(config) and "when" not in config)))
    return bool(kind == "complete" and config["key"] == "k" and all(c in conditions for c in config["parts"].values())
                and (config.get("time", "event") == "event" or _seconds(config["timeout"]) >= 3600))


def _window_shape(config: dict[str, Any]) -> bool:
    """A tumbling, sliding or session window (``window_shapes``)."""
    shapes = [s for s in ("tumbling", "sliding", "session") if s in config]
    return shapes in (["tumbling"], ["sliding"], ["session"]) and ("every" in config) == (shapes == ["sliding"])


def _events_apply(case: Case, text_in_x: bool) -> bool:
    """Clean events (with ``text_in_x``, text of ``TEXTS_IN_X`` in ``x`` too), distinct integer times."""
    times = [e.get("t") for e in case.events]
    clean = all(((isinstance(e.get("x"), int | float | type(None)) and not isinstance(e.get("x"), bool))
                 or (text_in_x and e.get("x") in TEXTS_IN_X))
                and isinstance(e.get("k"), str | type(None)) for e in case.events)
    return clean and all(isinstance(t, int) for t in times) and len(set(times)) == len(times)


def spark_keeps_the_order(case: Case) -> bool:
    """Events in time order, or out of order through filters to a window: Spark takes a key's events by event time
    within a micro-batch, so out-of-order events reach a ``dedupe``, ``aggregate`` or ``complete`` in another order
    there than locally (docs/spark.md, Order); such cases are compared with the local engine only."""
    kinds = [next(iter(s)) for s in case.steps]
    times = [e["t"] for e in case.events]
    return times == sorted(times) or all(k in ("filter", "window") for k in kinds)


def reference_vs_engines(case: Case, spark: Any = None) -> list[str]:
    """The reference's records against the local engine's and, with ``spark``, Spark's (order aside). Given a
    Spark session, the reference's expressions are evaluated by Spark's batch SQL over typed rows, and its own
    evaluator is held to that too."""
    from tests.fuzz.oracles import _differences, _keyed, _local_outputs, _spark_outputs, _spool

    routes = ["", *case.sinks, FAILED]
    edge_only = any("entwine" in s for s in case.steps)  # Spark refuses entwine (docs/entwine.md)
    # an entwine case is the local engine's alone, and its digests tell 0 from 0.0: its values are the reference
    # evaluator's own, which keeps each value's kind as it came (Spark's batch SQL reads a declared DOUBLE as one)
    evaluate = evaluate_here if spark is None or edge_only else spark_evaluator(spark)

    def expected(per_micro_batch: bool, by: Evaluate = evaluate) -> dict[str, Counter[str]]:
        # the local engine's input ends (a command's run); a continuous Spark job's does not
        outputs = reference_outputs(case, per_micro_batch, by, ends=not (per_micro_batch and case.continuous))
        if not per_micro_batch:
            timelines.update({route[len(TIMELINE):]: v for route, v in outputs.items() if route.startswith(TIMELINE)})
        return {route: _keyed(route, [(r.get(ID), {k: v for k, v in r.items() if k != ID})
                                      for r in outputs.get(route, [])], documented_id) for route in routes}

    timelines: dict[str, list[Event]] = {}

    def got(outputs: dict[str, Counter[str]]) -> dict[str, Counter[str]]:
        return {route: outputs.get(route, Counter()) for route in routes}

    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="edgewise-reference-") as tmp:
        directory = Path(tmp)
        _spool(case, directory)
        wanted = expected(False)
        problems += _differences(wanted, got(_local_outputs(case, directory, documented_id)), "reference",
                                 "local engine")
        for name, entries in timelines.items():
            problems += timeline_differences(entries, directory / name)
        if spark is not None and spark_keeps_the_order(case) and not wanted[FAILED] and not edge_only:
            problems += _differences(expected(False, evaluate_here), wanted, "the reference's evaluator",
                                     "Spark's batch SQL")
            remote = _spark_outputs(spark, case, directory, documented_id)
            problems += _differences(expected(True), got(remote), "reference", "spark")
    return problems
