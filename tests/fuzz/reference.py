"""A reference interpreter for pipelines of ``filter``, ``dedupe``, ``aggregate``, ``window`` and ``complete``
(issue 39).

Written from docs/state.md and docs/pipeline-file.md, not from the engine's code, and deliberately plain: the whole
input in memory, each step a function from the list of events it receives to the list it passes on, no
incremental state, no batching, no guard. Its conditions are evaluated by a small evaluator of its own (three-valued
logic over the few forms ``reference_cases`` draws, with SQL's ``%``, ``+`` and ``-``), not by the engine's
compiler.

What it covers, and what it leaves to the other oracles:

- chains of any length of ``filter``, ``dedupe`` and ``aggregate`` in any order, ending in at most one tumbling
  ``window`` or one event-time ``complete`` (last: what follows a window sees its results in the order the
  engine closes windows, which is not part of the documented semantics, and a completion's time-out record has
  no fields for the steps after it to read);
- clean events (numbers or NULL in ``x``, keys from a small set or NULL, no failing values), in event-time order
  with distinct times and a watermark delay larger than their spread: no event is late, so the watermark moving
  per event (locally) or per micro-batch (Spark) gives the same results, whatever the segments the spool is cut
  into (random cut points) and whether Spark reads them in one micro-batch or one per micro-batch;
- ``complete``'s time-outs, which need no late event: a completion times out when event time passes its deadline
  (with events in time order, Spark's watermark per micro-batch and the step's own largest event time give the
  same deadlines as the local engine's watermark per event);
- lateness, in ``filter`` chains ending in a tumbling ``window`` over events out of order: docs/state.md's rule
  (an event is late when its window's end is at or before the watermark; the watermark is the largest event time
  the window has seen minus its delay) with the watermark moving after each event for the local engine and once
  per micro-batch for Spark, given the micro-batch boundaries (the spool's segments, one per micro-batch, or all
  in one);
- not yet: ``lookup``, ``tee``, transforms, ``capture`` and processing time in ``complete``, failing values,
  lateness after ``dedupe`` or ``aggregate`` (out-of-order events reach them in an order Spark does not keep:
  docs/spark.md, Order).

``reference_vs_engines`` compares its records, order aside and numbers by value, with the local engine's and (given
a Spark session) with Spark's.
"""

from __future__ import annotations

import math
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests.fuzz.generate import KEYS, STRINGS, WATERMARK, Case, arrivals

Event = dict[str, Any]
Truth = bool | None


def _and(a: Truth, b: Truth) -> Truth:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _compare(field: str, op: str, literal: Any, of: Callable[[Any], Any] = lambda v: v) -> Callable[[Event], Truth]:
    """``of(field) op literal``, NULL when the field is (``of`` an arithmetic on it)."""
    def test(e: Event) -> Truth:
        value = e.get(field)
        if value is None:
            return None
        value = of(value)
        return {">": value > literal, "<": value < literal, "<=": value <= literal, "=": value == literal}[op]
    return test


def _remainder(value: Any, divisor: int) -> Any:
    """SQL's ``%``: the remainder takes the dividend's sign (Spark's ``%``, C's ``fmod``; not Python's ``%``)."""
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

AGGREGATES = ["count()", "count(x)", "sum(x)", "avg(x)", "min(x)", "max(x)", "count_distinct(x)"]


@st.composite
def clean_event(draw: st.DrawFn, t: int) -> Event:
    """An event at ``t``: a key from a small set or NULL, a number or NULL in ``x``, sometimes text in ``s``."""
    e: Event = {"t": t}
    if draw(st.integers(0, 9)):
        e["k"] = draw(st.one_of(st.sampled_from(KEYS[:3]), st.none()))
    if draw(st.integers(0, 5)):
        e["x"] = draw(st.one_of(st.integers(-5, 5), st.sampled_from([0.5, -2.25, 3.5, 1.0]), st.none()))
    if draw(st.booleans()):
        e["s"] = draw(st.sampled_from(STRINGS))
    return e


ON_ERRORS = st.sampled_from([{"on_error": "skip"}, {}])
"""A step's ``on_error``: ``skip``, or the default (``fail``: a clean event never fails, and on Spark a step that
cannot fail compiles without the guard ``skip`` needs, to a plain ``WHERE`` for a filter over typed fields)."""


@st.composite
def reference_cases(draw: st.DrawFn) -> Case:
    """A pipeline the reference covers (this module's docstring) over clean events."""
    if not draw(st.integers(0, 3)):
        return draw(late_cases())
    n = draw(st.integers(1, 12))
    times = sorted(set(draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))))
    events = [draw(clean_event(t)) for t in times]
    for _ in range(draw(st.integers(0, 3))):  # a redelivered copy a ``within`` away, or a second less or more
        e = draw(st.sampled_from(events))
        t = e["t"] + draw(st.sampled_from([3, 5, 20])) + draw(st.sampled_from([-1, 0, 0, 1]))
        if t not in {other["t"] for other in events}:
            events = sorted([*events, {**e, "t": t}], key=lambda other: other["t"])
    kinds = draw(st.lists(st.sampled_from(["filter", "dedupe", "aggregate"]), max_size=3))
    last = draw(st.sampled_from(["window", "complete", None]))
    if last or not kinds:
        kinds.append(last or "window")
    steps: list[dict[str, Any]] = []
    for i, kind in enumerate(kinds):
        config: dict[str, Any] = {"id": f"{kind}{i}", **draw(ON_ERRORS)}
        if kind == "filter":
            config["where"] = draw(st.sampled_from([text for text, _ in CONDITIONS]))
        elif kind == "dedupe":
            config.update(key=draw(st.sampled_from(["k", "x"])), within=draw(st.sampled_from(["3s", "5s", "20s"])),
                          watermark=WATERMARK)
        elif kind == "complete":
            parts = draw(st.lists(st.sampled_from([text for text, _ in CONDITIONS]), min_size=2, max_size=3,
                                  unique=True))
            config.update(key="k", parts={f"p{j}": c for j, c in enumerate(parts)}, into="done",
                          timeout=draw(st.sampled_from(["3s", "5s", "10s"])),
                          watermark=draw(st.sampled_from(["0s", "2s"])))
        else:
            chosen = draw(st.lists(st.sampled_from(AGGREGATES), min_size=1, max_size=3, unique=True))
            config.update(key=draw(st.sampled_from([["k"], []])), aggs={f"a{j}": a for j, a in enumerate(chosen)})
            if kind == "aggregate":
                config["into"] = f"st{i}"
            else:
                config.update(tumbling=draw(st.sampled_from(["5s", "10s", "30s"])), watermark=WATERMARK)
        steps.append({kind: config})
    envelopes = draw(st.lists(st.integers(0, len(events) - 1), unique=True, max_size=len(events)))
    return Case(steps, events, [], sorted(envelopes), draw(st.integers(1, 3)), *draw(arrivals(len(events))),
                schema=draw(st.sampled_from(["", SCHEMA])))


SCHEMA = "t BIGINT, k STRING, x DOUBLE, s STRING"
"""The clean events' fields as a source's ``schema``: Spark reads them typed, and compiles what it can without
the guard an untyped field needs (a filter over typed fields is one ``WHERE``)."""


@st.composite
def late_cases(draw: st.DrawFn) -> Case:
    """Filters, then a tumbling window with a short watermark delay, over events out of order: some are late."""
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
                             "aggs": {f"a{j}": a for j, a in enumerate(chosen)},
                             "tumbling": draw(st.sampled_from(["5s", "10s"])),
                             "watermark": draw(st.sampled_from(["0s", "2s", "5s"]))}})
    envelopes = draw(st.lists(st.integers(0, len(events) - 1), unique=True, max_size=len(events)))
    return Case(steps, events, [], sorted(envelopes), draw(st.integers(1, 3)), *draw(arrivals(len(events))),
                schema=draw(st.sampled_from(["", SCHEMA])))


# ---------------------------------------------------------------- the steps


def _seconds(duration: str) -> int:
    return int(duration.rstrip("s"))


def run_filter(events: list[Event], meaning: Callable[[Event], Truth]) -> list[Event]:
    """Keeps the events whose condition is true (NULL drops, as SQL's WHERE)."""
    return [e for e in events if meaning(e) is True]


def run_dedupe(events: list[Event], key: str, within: int) -> list[Event]:
    """Drops an event whose key was kept less than ``within`` seconds of event time away; a NULL key is never a
    duplicate. Keys compare as SQL's GROUP BY does (1 and 1.0 are one key)."""
    kept_times: dict[Any, list[int]] = {}
    out = []
    for e in events:
        value = e.get(key)
        if value is not None and any(abs(e["t"] - t) < within for t in kept_times.get(value, [])):
            continue
        if value is not None:
            kept_times.setdefault(value, []).append(e["t"])
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
    if fn == "sum":
        return sum(xs)
    if fn == "avg":
        return sum(xs) / len(xs)
    return min(xs) if fn == "min" else max(xs)


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
                 into: str) -> list[Event]:
    """docs/state.md, ``complete``: an event with a key and at least one part (a condition that is true) joins
    the key's open completion, or opens one whose deadline is its time plus ``timeout``. It leaves with
    ``{status, key, seen, missing}`` under ``into`` (parts in the order they are declared; ``parts`` only with
    ``capture``, which the reference does not draw): ``completed`` when no part is missing (the completion
    closes), ``triggered`` otherwise. When event time reaches a new largest value, every open completion whose
    deadline is at or before the watermark (that time minus ``delay``) times out first: a record of its own,
    ``{into: {status: timed_out, ...}}``. At the end of the input every open completion times out."""
    meanings = dict(CONDITIONS)
    names = list(parts)
    open_: dict[Any, tuple[int, set[str]]] = {}  # key -> (deadline, parts seen)

    def status(name: str, k: Any, seen: set[str]) -> dict[str, Any]:
        return {"status": name, "key": k, "seen": [n for n in names if n in seen],
                "missing": [n for n in names if n not in seen]}

    def time_out(watermark: float) -> list[Event]:
        due = [k for k, (deadline, _) in open_.items() if deadline <= watermark]
        return [{into: status("timed_out", k, open_.pop(k)[1])} for k in due]

    out: list[Event] = []
    largest: int | None = None
    for e in events:
        if largest is None or e["t"] > largest:
            largest = e["t"]
            out += time_out(largest - delay)
        k = e.get(key)
        matched = {n for n in names if meanings[parts[n]](e) is True}
        if k is None or not matched:
            out.append(e)
            continue
        _, seen = open_.setdefault(k, (e["t"] + timeout, set()))
        seen |= matched
        if len(seen) == len(names):
            del open_[k]
            out.append({**e, into: status("completed", k, seen)})
        else:
            out.append({**e, into: status("triggered", k, seen)})
    return out + time_out(math.inf)


def _iso(seconds: int) -> str:
    return f"1970-01-01T00:{seconds // 60:02d}:{seconds % 60:02d}Z"


def on_time(events: list[Event], size: int, delay: int, batches: list[int] | None) -> list[Event]:
    """The events a tumbling window of ``size`` takes: not those whose window ends at or before the watermark, the
    largest event time among the window's events before them minus ``delay``. Without ``batches`` the watermark
    moves after every event (the local engine); with them (each event's micro-batch) it moves between micro-batches
    only, to the largest time of the micro-batches before (Spark)."""
    taken = []
    for i, e in enumerate(events):
        before = [o["t"] for j, o in enumerate(events[:i]) if batches is None or batches[j] < batches[i]]
        start = e["t"] - e["t"] % size
        if not before or start + size > max(before) - delay:
            taken.append(e)
    return taken


def run_window(events: list[Event], keys: list[str], size: int, aggs: dict[str, str]) -> list[Event]:
    """One record per key and tumbling window ``[start, start + size)`` (aligned to the epoch) holding events."""
    groups: dict[tuple[tuple[Any, ...], int], list[Event]] = {}
    for e in events:
        groups.setdefault((tuple(e.get(k) for k in keys), e["t"] - e["t"] % size), []).append(e)
    out = []
    for (key, start), group in groups.items():
        record: Event = dict(zip(keys, key, strict=True))
        record.update(window_start=_iso(start), window_end=_iso(start + size))
        xs = [g.get("x") for g in group]
        record.update({name: _aggregate(xs, len(group), spec) for name, spec in aggs.items()})
        out.append(record)
    return out


BATCH = "__micro_batch"
"""Where the reference keeps an event's micro-batch while it runs (never in what it gives)."""


def reference(case: Case, per_micro_batch: bool = False) -> list[Event]:
    """The pipeline's results over the case's events: as the local engine promises them, or as Spark does, reading
    the spool's segments one per micro-batch (``per_micro_batch``) or all in one."""
    meanings = dict(CONDITIONS)
    events = [dict(e) for e in case.events]
    for n, (first, end) in enumerate(case.segments()):
        for e in events[first:end]:
            e[BATCH] = n if case.micro_batches else 0  # without it, Spark reads every segment in one
    for step in case.steps:
        kind, config = next(iter(step.items()))
        if kind == "filter":
            events = run_filter(events, meanings[config["where"]])
        elif kind == "dedupe":
            events = run_dedupe(events, config["key"], _seconds(config["within"]))
        elif kind == "aggregate":
            events = run_aggregate(events, config["key"], config["aggs"], config["into"])
        elif kind == "complete":
            events = run_complete(events, config["key"], config["parts"], _seconds(config["timeout"]),
                                  _seconds(config["watermark"]), config["into"])
        else:
            size = _seconds(config["tumbling"])
            batches = [e[BATCH] for e in events] if per_micro_batch else None
            taken = on_time(events, size, _seconds(config["watermark"]), batches)
            events = run_window(taken, config["key"], size, config["aggs"])
    return [{k: v for k, v in e.items() if k != BATCH} for e in events]


# ---------------------------------------------------------------- against the engines


def reference_applies(case: Case) -> bool:
    """The case is one ``reference_cases`` could draw (a kept fixture, say): its steps, their settings and clean
    events."""
    kinds = [next(iter(s)) for s in case.steps]
    if (case.sinks or case.schema not in ("", SCHEMA) or any(k in ("window", "complete") for k in kinds[:-1])
            or any(k not in ("filter", "dedupe", "aggregate", "window", "complete") for k in kinds)):
        return False
    for step in case.steps:
        kind, config = next(iter(step.items()))
        if config.get("on_error", "fail") not in ("skip", "fail") or "when" in config:
            return False
        if kind == "filter" and config["where"] not in dict(CONDITIONS):
            return False
        if kind == "dedupe" and config["key"] not in ("k", "x"):
            return False
        if kind in ("aggregate", "window") and (any(a not in AGGREGATES for a in config["aggs"].values())
                                                or any(k != "k" for k in config["key"])):
            return False
        if kind == "window" and "tumbling" not in config:
            return False
        if kind == "complete" and (config["key"] != "k" or config.get("capture") or config.get("time") == "processing"
                                   or any(c not in dict(CONDITIONS) for c in config["parts"].values())):
            return False
    times = [e.get("t") for e in case.events]
    clean = all(isinstance(e.get("x"), int | float | type(None)) and not isinstance(e.get("x"), bool)
                and isinstance(e.get("k"), str | type(None)) for e in case.events)
    # out of order only where the reference judges lateness: filters, then a window
    any_order = all(k == "filter" for k in kinds[:-1]) and kinds[-1] == "window"
    return (clean and all(isinstance(t, int) for t in times) and len(set(times)) == len(times)
            and (any_order or times == sorted(times)))  # type: ignore[type-var]


def reference_vs_engines(case: Case, spark: Any = None) -> list[str]:
    """The reference's records against the local engine's and, with ``spark``, Spark's (order aside)."""
    from tests.fuzz.oracles import _differences, _local_outputs, _spark_outputs, _spool, canonical

    def expected(per_micro_batch: bool) -> dict[str, Counter[str]]:
        return {"": Counter(canonical(r) for r in reference(case, per_micro_batch))}

    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="edgewise-reference-") as tmp:
        directory = Path(tmp)
        _spool(case, directory)
        local = _local_outputs(case, directory)
        problems += _differences(expected(False), {"": local.get("", Counter())}, "reference", "local engine")
        if spark is not None:
            remote = _spark_outputs(spark, case, directory)
            problems += _differences(expected(True), {"": remote.get("", Counter())}, "reference", "spark")
    return problems
