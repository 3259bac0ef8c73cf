"""Hypothesis strategies for whole pipelines and messy event streams (issue 13).

Pipelines are random chains of the steps (filter, gate, annotate, transform, lookup, tee, dedupe, aggregate,
window, complete) with random ``when`` and ``on_error``, expressions from a small grammar over the events'
fields, and random aggregate specs. Events mix BIGINT, DOUBLE and numeric strings, NULLs, missing and nested
fields, Unicode, a bad value here and there, duplicates and out-of-order event times; the spool both engines read
splits them over several segments and holds some in the envelope a daemon's file spool writes.

The generated pipelines stay inside what both engines promise to agree on (docs/spark.md): no window after a window
or a ``complete`` (engine/spark/chains.py), every watermark the same, no ``when`` on a window, event times out of
order by less than every watermark delay (Spark moves its watermark once per micro-batch, the local engine after
every event: a late event is a documented difference, not something to fuzz), and in event-time order where a step
depends on the order of a key's events (``dedupe``, ``aggregate``, ``complete``: Spark takes a micro-batch's events
by event time, the local engine by arrival).
``Case.for_spark`` says whether a case stays inside it.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml
from hypothesis import strategies as st

KEYS = ["a", "b", "ä", ""]
STRINGS = ["x", "hello", "ÄÖ", "", "a b", "12", "3.5"]
WATERMARK = "60s"
"""Every generated watermark delay: more than the spread of the events' times, so no event is ever late."""
SPREAD = 40
"""Event times fall within this many seconds."""

# ---------------------------------------------------------------- events

numbers = st.one_of(st.integers(-1000, 1000), st.floats(-1000, 1000, allow_nan=False).map(lambda v: round(v, 2)))
messy_numbers = st.one_of(numbers, numbers.map(str), st.sampled_from(["oops", "", "1e3", " 7 "]), st.none())


@st.composite
def event(draw: st.DrawFn, t: int) -> dict[str, Any]:
    e: dict[str, Any] = {"t": t}
    if draw(st.integers(0, 9)):
        e["k"] = draw(st.one_of(st.sampled_from(KEYS), st.none()))
    if draw(st.integers(0, 5)):
        e["x"] = draw(st.one_of(numbers, numbers, messy_numbers))
    if draw(st.booleans()):
        e["y"] = {"z": draw(st.one_of(st.integers(-5, 5), st.none()))}
    if draw(st.booleans()):
        e["s"] = draw(st.sampled_from(STRINGS))
    return e


@st.composite
def events(draw: st.DrawFn, max_size: int = 12, ordered: bool = False) -> list[dict[str, Any]]:
    """A stream of up to ``max_size`` events; out of order (by less than the watermark) unless ``ordered``."""
    n = draw(st.integers(1, max_size))
    times = sorted(draw(st.lists(st.integers(0, SPREAD), min_size=n, max_size=n)))
    if not ordered and draw(st.booleans()):  # out of order, but less than the watermark
        times = draw(st.permutations(times))
    out = [draw(event(t)) for t in times]
    if len(out) > 2 and draw(st.booleans()):  # an exact duplicate
        out.insert(draw(st.integers(0, len(out))), dict(out[draw(st.integers(0, len(out) - 1))]))
    return sorted(out, key=lambda e: e["t"]) if ordered else out


# ---------------------------------------------------------------- expressions

NUMERIC_FIELDS = ["x", "y.z"]


UNARY_NUMERIC = ["abs", "floor", "ceil", "sign", "negative", "cbrt"]
"""Functions of one number drawn into expressions (each defined for every finite input: no NaN, no infinity)."""
TEXT_FUNCTIONS = ["length(s)", "size(array(s, k))", "instr(s, 'l')", "ascii(s)", "char_length(k)",
                  "locate('a', concat(k, s))", "size(split(s, ' '))"]
"""Numbers computed from text fields."""


def numeric_expressions() -> st.SearchStrategy[str]:
    leaf = st.one_of(st.sampled_from(NUMERIC_FIELDS), st.integers(-3, 10).map(str), st.sampled_from(["1.5", "0.25"]))
    return st.recursive(leaf, lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*"]), inner).map(lambda p: f"({p[0]} {p[1]} {p[2]})"),
        st.tuples(st.sampled_from(UNARY_NUMERIC), inner).map(lambda p: f"{p[0]}({p[1]})"),
        inner.map(lambda e: f"coalesce({e}, 0)"),
        inner.map(lambda e: f"nvl({e}, -1)"),
        inner.map(lambda e: f"round({e}, 1)"),
        inner.map(lambda e: f"try_divide({e}, 4)"),
        inner.map(lambda e: f"pmod({e}, 3)"),
        inner.map(lambda e: f"nullif({e}, 0)"),
        inner.map(lambda e: f"cast({e} AS DOUBLE)"),
        # conditionals over conditions on generated numbers (the guard's SQL once grew tenfold per such level
        # and ran Spark's driver out of heap: tests/expr/test_guard_size.py)
        st.tuples(inner, st.sampled_from([">", "<=", "="]), st.integers(-2, 5), inner, inner)
          .map(lambda p: f"if({p[0]} {p[1]} {p[2]}, {p[3]}, {p[4]})"),
        st.tuples(inner, st.integers(-2, 5), inner, inner)
          .map(lambda p: f"CASE WHEN {p[0]} > {p[1]} THEN {p[2]} WHEN s = 'hello' THEN 0 ELSE {p[3]} END"),
        st.sampled_from(TEXT_FUNCTIONS),
        # text beside numbers in one call: Spark gives the call one type (docs/spark.md, Implicit casts of mixed
        # types); s is text, typed STRING on Spark, and may hold a number's text ('12', '3.5')
        inner.map(lambda e: f"coalesce(s, {e})"),
        inner.map(lambda e: f"if(length(s) > 2, s, {e})"),
        inner.map(lambda e: f"size(array(s, {e}))"),
    ), max_leaves=4)


def string_expressions() -> st.SearchStrategy[str]:
    return st.sampled_from(["s", "k", "concat(k, '-', s)", "upper(s)", "substring(s, 1, 2)", "coalesce(k, 'none')",
                            "cast(x AS STRING)", "trim(s)", "lower(concat_ws('/', k, s))", "replace(s, 'l', 'L')",
                            "lpad(s, 4, '*')", "left(s, 2)", "reverse(s)", "initcap(s)",
                            "regexp_replace(s, '[aeiou]', '_')", "nvl2(k, 'has k', 'no k')", "md5(s)",
                            "if(length(s) > 2, s, k)"])


EDGE_ARGUMENTS = ["NULL", "''", "'ä€𝄞'", "'(['", "'yyyy-MM-dd HH:mm'", "'2021-02-30'", "'%s-%d'", "0", "-1",
                  "2147483648", "9223372036854775807", "1.5", "-0.0", "array()", "array(1, NULL)", "array('b', 'a')",
                  "x", "s", "k", "y.z", "timestamp_seconds(t)"]
"""What any function is called with: NULL, empty and odd text, a bad regex, a format string, an invalid date,
boundary integers, negative zero, empty and NULL-holding arrays, and the generated events' fields."""

ARRIVALS: Counter[str] = Counter()
"""How often each arrival pattern (``arrivals``) was drawn since the process started (the soak prints it)."""

DRAWN_FUNCTIONS: Counter[str] = Counter()
"""How often each function was drawn into a pipeline that loads, since the process started (the soak prints it)."""


def call_text(name: str, count: int, argument: Callable[[int], str]) -> str:
    """``name(...)`` with ``count`` arguments: a lambda where the function takes one (two parameters for
    ``aggregate``'s and ``reduce``'s merge), ``argument(i)`` elsewhere."""
    from edgewise.expr.functions import FUNCTIONS

    lambdas = FUNCTIONS[name].lambda_args
    args = [("(acc, v) -> acc" if name in ("aggregate", "reduce") and i == 2 else "v -> v")
            if i in lambdas else argument(i) for i in range(count)]
    return f"{name}({', '.join(args)})"


@st.composite
def function_calls(draw: st.DrawFn) -> str:
    """A call of any built-in function with edge arguments, one that the pipeline file accepts (a call the
    loader refuses, its arguments' types wrong by their text alone, is drawn as NULL)."""
    from edgewise.config.models import _compile as load_value
    from edgewise.errors import EdgewiseError
    from edgewise.expr.functions import FUNCTIONS

    name = draw(st.sampled_from(sorted(FUNCTIONS)))
    spec = FUNCTIONS[name]
    count = draw(st.integers(spec.min_args, spec.max_args if spec.max_args is not None else spec.min_args + 2))
    call = call_text(name, count, lambda i: draw(st.sampled_from(EDGE_ARGUMENTS)))
    try:
        load_value(call)  # what the loader does with a step's value
    except EdgewiseError:
        return "NULL"
    DRAWN_FUNCTIONS[name] += 1
    return call


def conditions() -> st.SearchStrategy[str]:
    atom = st.one_of(
        st.tuples(numeric_expressions(), st.sampled_from([">", "<", "=", "<=", "!="]),
                  st.integers(-5, 20)).map(lambda p: f"{p[0]} {p[1]} {p[2]}"),
        st.sampled_from(["k = 'a'", "k IS NULL", "x IS NOT NULL", "s LIKE 'h%'", "k IN ('a', 'ä')",
                         "y.z > 0", "s = '12'", "x > '5'", "startswith(s, 'h')", "contains(s, 'l')",
                         "isnull(y.z)", "s RLIKE '^[0-9.]+$'", "y.z BETWEEN -2 AND 2", "length(k) = 1",
                         "equal_null(k, 'b')",
                         # lists mixing text and numbers (Spark gives a list one type: docs/spark.md)
                         "s IN ('12', 3)", "x IN ('oops', 1, y.z)", "array_contains(array(s, 1), 12)"]),
    )
    return st.recursive(atom, lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(lambda p: f"({p[0]} {p[1]} {p[2]})"),
        inner.map(lambda c: f"NOT ({c})"),
    ), max_leaves=3)


# ---------------------------------------------------------------- steps

AGGREGATES = ["count()", "count(x)", "sum(x)", "min(x)", "max(x)", "avg(x)", "count_distinct(k)", "sum(y.z)",
              "avg(x * 1.5)"]


@dataclass
class Case:
    """A generated pipeline file and its input."""

    steps: list[dict[str, Any]]
    events: list[dict[str, Any]]
    sinks: list[str] = field(default_factory=list)
    envelopes: list[int] = field(default_factory=list)
    """Events (by index) the spool holds in the envelope ``edgewise serve``'s file spool writes."""
    files: int = 1
    """Spool segments the events are split over, in order (``part-1.ndjson``, ...)."""
    cuts: list[int] = field(default_factory=list)
    """Where segments start (event indexes, random cut points); empty: ``files`` equal parts."""
    micro_batches: bool = False
    """Spark reads one segment per micro-batch (``--max-files-per-trigger 1``), not all in one."""
    equal_times: bool = False
    """Every segment has the same modification time (a daemon's spool can write several within its clock's
    resolution): only their names give their order."""
    schema: str = ""
    """The source's ``schema`` (a DDL string of the events' fields, which Spark reads them as; empty: none)."""
    tables: dict[str, Any] = field(default_factory=dict)
    """Files beside the pipeline file (lookup tables, a key): file name -> JSON content, or text (``write_tables``)."""
    continuous: bool = False
    """Spark runs the case as a continuous job (no ``--once``): it starts on the first segment, the others arrive
    one at a time while it runs, each read in a micro-batch of its own, and the input never ends (no end marker:
    only what the watermark closed comes out)."""

    def write_tables(self, directory: Path) -> None:
        for name, content in self.tables.items():  # text as it is (a key file), anything else as JSON
            (directory / name).write_bytes(content.encode() if isinstance(content, str) else orjson.dumps(content))

    @property
    def has_watermark(self) -> bool:
        return any(next(iter(s)) in ("window", "dedupe", "complete") for s in self.steps)

    @property
    def for_spark(self) -> bool:
        """Inside what both engines promise to agree on: no ``on_error: fail`` (a failing event stops a Spark
        query), no window after a window or a ``complete`` (engine/spark/chains.py), no window with ``when``."""
        kinds = [next(iter(s)) for s in self.steps]
        if _window_after_results_behind_the_watermark(kinds):
            return False
        times = [e["t"] for e in self.events]
        if any(k in ORDER_SENSITIVE for k in kinds) and (times != sorted(times) or self._ties_differ()):
            return False
        return all(s[k].get("on_error", "fail") != "fail" and not (k == "window" and "when" in s[k])
                   for s, k in zip(self.steps, kinds, strict=True))

    def _ties_differ(self) -> bool:
        """Two different events with one event time: Spark takes them by id, the local engine as they arrive (a
        documented difference, docs/spark.md, Order; found by the soak: a running count gave them 9 and 10 in
        either order)."""
        by_time: dict[Any, set[str]] = {}
        for e in self.events:
            by_time.setdefault(e["t"], set()).add(repr(sorted(e.items())))
        return any(len(payloads) > 1 for payloads in by_time.values())

    def pipeline(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "version": 1,
            "event_time": "timestamp_seconds(t)",
            "sources": [{"id": "spool", "type": "file", "path": "in",
                         **({"schema": self.schema} if self.schema else {})}],
            "pipelines": [{"id": "p", "steps": self.steps}],
        }
        if self.sinks:
            doc["sinks"] = [{"id": s, "type": "stdout"} for s in sorted(set(self.sinks))]
        return doc

    def pipeline_text(self) -> str:
        return yaml.safe_dump(self.pipeline(), sort_keys=False, allow_unicode=True)

    def fixture_text(self, name: str) -> str:
        """The case as an ``edgewise test`` fixture (no expectations: the oracles decide)."""
        doc: dict[str, Any] = {"name": name, "pipeline": self.pipeline(), "events": self.events}
        if (self.envelopes or self.files != 1 or self.cuts or self.micro_batches or self.equal_times
                or self.continuous):  # how the spool holds them and Spark reads it (kept cases replay it)
            doc.update(envelopes=self.envelopes, files=self.files, cuts=self.cuts, micro_batches=self.micro_batches,
                       equal_times=self.equal_times, continuous=self.continuous)
        if self.tables:
            doc["tables"] = self.tables
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)

    def spool_files(self) -> dict[str, bytes]:
        """The spool both engines read: the events in order over ``files`` segments, some in envelopes (an
        upstream daemon's id ``up:<n>`` and the event's time in microseconds)."""
        lines = [orjson.dumps({"id": f"up:{i}", "event_time": int(e.get("t", 0)) * 1_000_000, "source": "up",
                               "payload": e} if i in self.envelopes else e) + b"\n"
                 for i, e in enumerate(self.events)]
        return {f"part-{n + 1}.ndjson": b"".join(lines[a:b]) for n, (a, b) in enumerate(self.segments())}

    def segments(self) -> list[tuple[int, int]]:
        """The spool's segments in name order, each as the range of event indexes it holds."""
        n = len(self.events)
        if self.cuts:
            bounds = [0, *sorted(c for c in set(self.cuts) if 0 < c < n), n]
            return list(itertools.pairwise(bounds))
        per_file = -(-n // self.files)
        return [(k * per_file, min(n, (k + 1) * per_file)) for k in range(self.files)]


@st.composite
def step_head(draw: st.DrawFn, step_id: str, kind: str, on_errors: list[str], sinks: list[str]) -> dict[str, Any]:
    """A step's id, its ``on_error`` (a ``dead`` sink added to ``sinks``) and, now and then, a ``when``."""
    config: dict[str, Any] = {"id": step_id}
    on_error = draw(st.sampled_from(on_errors))
    if on_error == "dead":
        sinks.append("dead")
    if on_error != "fail":
        config["on_error"] = on_error
    if kind != "window" and draw(st.integers(0, 3)) == 0:
        config["when"] = draw(conditions())
    return config


@st.composite
def step(draw: st.DrawFn, i: int, kind: str, on_errors: list[str], sinks: list[str],
         calls: bool = False) -> dict[str, Any]:
    config = draw(step_head(f"{kind}{i}", kind, on_errors, sinks))
    if kind in ("filter", "gate"):
        config["where"] = draw(conditions())
    elif kind == "annotate":
        config["set"] = {f"f{i}": draw(st.one_of(numeric_expressions(), string_expressions(), conditions()))}
        if calls:
            config["set"][f"c{i}"] = draw(function_calls())
    elif kind == "transform":
        ops: list[dict[str, Any]] = [{"set": {f"g{i}": draw(numeric_expressions())}}]
        if calls and draw(st.booleans()):
            ops[0]["set"][f"c{i}"] = draw(function_calls())
        ops.append(draw(st.sampled_from([{"rename": {"s": f"s{i}"}}, {"drop": ["y"]}, {"keep": ["k", "t", "x"]},
                                         {"drop": ["y.z"]}])))
        config["ops"] = ops
    elif kind == "tee":
        sinks.append("copies")
        config["to"] = "copies"
        if draw(st.booleans()):
            config["set"] = {"copy": "true"}
    elif kind == "dedupe":
        config["key"] = draw(st.sampled_from(["k", "concat(coalesce(k, '-'), '/', coalesce(s, '-'))", "x"]))
        config["within"] = draw(st.sampled_from(["5s", "20s"]))
        config["watermark"] = WATERMARK
    elif kind == "aggregate":
        config["key"] = draw(st.sampled_from([["k"], [], ["s"]]))
        config["aggs"] = _aggs(draw)
        config["into"] = "st"
    elif kind == "window":
        config["key"] = draw(st.sampled_from([["k"], []]))
        config["tumbling"] = draw(st.sampled_from(["10s", "30s"]))
        config["watermark"] = WATERMARK
        config["aggs"] = _aggs(draw)
    elif kind == "complete":
        config["key"] = "k"
        config["parts"] = {"pos": "x > 0", "neg": "x <= 0"}
        config["timeout"] = "15s"
        config["watermark"] = WATERMARK
        config["into"] = "done"
    return {kind: config}


def _aggs(draw: st.DrawFn) -> dict[str, str]:
    chosen = draw(st.lists(st.sampled_from(AGGREGATES), min_size=1, max_size=3, unique=True))
    return {f"a{j}": text for j, text in enumerate(chosen)}


STATELESS = ["filter", "gate", "annotate", "transform", "tee"]
ORDER_SENSITIVE = ("dedupe", "aggregate", "complete")
STATEFUL = ["dedupe", "aggregate", "window", "complete"]


@st.composite
def cases(draw: st.DrawFn, *, spark: bool = False, max_steps: int = 4) -> Case:
    """A pipeline of up to ``max_steps`` steps over a generated stream; with ``spark`` one both engines must agree
    on (``Case.for_spark``)."""
    on_errors = ["skip", "dead"] if spark else ["fail", "skip", "dead"]
    n = draw(st.integers(1, max_steps))
    kinds = draw(st.lists(st.sampled_from(STATELESS + STATEFUL), min_size=n, max_size=n))
    if spark:  # Spark runs no window after a window or an event-time complete (engine/spark/chains.py; any
        # complete here, whatever its time)
        while (i := _window_after_results_behind_the_watermark(kinds)) is not None:
            kinds[i] = "aggregate"
    sinks: list[str] = []
    # calls of every function with edge arguments where the engine is compared with itself (the crash oracle):
    # the Spark oracle keeps to the expressions both engines are held to agree on
    steps = [draw(step(i, k, on_errors, sinks, calls=not spark)) for i, k in enumerate(kinds)]
    ordered = spark and any(k in ORDER_SENSITIVE for k in kinds)
    stream = draw(events(ordered=ordered))
    if ordered:
        stream = _apart_in_time(stream)
    if spark and any(_compares_values(s) for s in steps):  # a documented difference (docs/spark.md, min and max)
        stream = [{**e, "x": None} if isinstance(e.get("x"), str) else e for e in stream]
    if spark:
        stream = [_fraction_text_beside_a_number(e) for e in stream]
    envelopes = draw(st.lists(st.integers(0, len(stream) - 1), unique=True, max_size=len(stream)))
    return Case(steps, stream, sinks, sorted(envelopes), draw(st.integers(1, 3)), *draw(arrivals(len(stream))))


@st.composite
def arrivals(draw: st.DrawFn, n: int) -> tuple[list[int], bool, bool]:
    """How a stream of ``n`` events arrives: random cut points between spool segments (or none: ``files`` equal
    parts), whether Spark reads a segment per micro-batch, and whether the segments share one modification
    time. Not both of the last two: Spark takes segments that share a time in an order of its own, so a micro-batch
    each would read them out of name order (docs/spark.md, Spool order: a difference the job warns about, pinned
    by ``test_sources_and_sinks.py``); read in one micro-batch, they must give what segments in name order give."""
    cuts = draw(st.lists(st.integers(1, max(1, n - 1)), max_size=3, unique=True)) if n > 1 else []
    micro_batches = draw(st.booleans())
    equal_times = not micro_batches and draw(st.booleans())
    ARRIVALS["random cut points" if cuts else "equal parts"] += 1
    ARRIVALS["a segment per micro-batch" if micro_batches else "all segments in one micro-batch"] += 1
    ARRIVALS["equal modification times" if equal_times else "modification times in name order"] += 1
    return sorted(cuts), micro_batches, equal_times


def _window_after_results_behind_the_watermark(kinds: list[str]) -> int | None:
    """The first window after a window or a ``complete``, whose results or timeouts come out once the watermark
    passed them (Spark's one watermark finds them late for a window after them)."""
    behind = False
    for i, kind in enumerate(kinds):
        if kind == "window" and behind:
            return i
        behind = behind or kind in ("window", "complete")
    return None


def _apart_in_time(stream: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An ordered stream with different events at different times (an exact duplicate keeps its twin's): ties are
    taken by id on Spark and as they arrive locally (``Case._ties_differ``)."""
    out: list[dict[str, Any]] = []
    for e in stream:
        if out and e != out[-1] and e["t"] <= out[-1]["t"]:
            e = {**e, "t": out[-1]["t"] + 1}
        out.append(e)
    return out


def _fraction_text_beside_a_number(e: dict[str, Any]) -> dict[str, Any]:
    """Text in ``x`` that is a number but no integer (``'1e3'``, ``'-786.39'``) comes with a number in ``y.z``: beside
    a NULL, Spark casts it to the NULL's type (``y.z`` is BIGINT), which the local engine cannot know (docs/spark.md,
    Text beside a NULL operand)."""
    x = e.get("x")
    if isinstance(x, str) and not x.strip().lstrip("+-").isdigit() and (e.get("y") or {}).get("z") is None:
        try:
            float(x)
        except ValueError:
            return e  # not a number: it fails beside anything, on both engines
        return {**e, "y": {"z": 1}}
    return e


def _compares_values(step: dict[str, Any]) -> bool:
    """The step takes ``min`` or ``max`` of values: over a field mixing text and numbers Spark reads it as DOUBLE
    and the local engine compares the values as they come."""
    config = next(iter(step.values()))
    return any(a.startswith(("min(", "max(")) for a in config.get("aggs", {}).values())


SIMPLE_AGGREGATES = ["count()", "count(x)", "sum(x)", "avg(x)", "min(x)", "max(x)", "count_distinct(k)", "sum(y.z)"]


@st.composite
def batch_cases(draw: st.DrawFn) -> Case:
    """A lone window or aggregate with ``on_error: skip`` over plain fields: what a batch computation can check
    independently (``oracles.batch_computation``). min/max only where the data hold no text (text and numbers do
    not compare)."""
    stream = draw(events())
    texts = any(isinstance(e.get("x"), str) for e in stream)
    allowed = [a for a in SIMPLE_AGGREGATES if not (texts and a.split("(")[0] in ("min", "max"))]
    chosen = draw(st.lists(st.sampled_from(allowed), min_size=1, max_size=4, unique=True))
    config: dict[str, Any] = {"id": "s0", "on_error": "skip", "key": draw(st.sampled_from([["k"], [], ["s"]])),
                              "aggs": {f"a{j}": text for j, text in enumerate(chosen)}}
    if draw(st.booleans()):
        config.update(tumbling=draw(st.sampled_from(["10s", "30s"])), watermark=WATERMARK)
        return Case([{"window": config}], stream)
    config["into"] = "st"
    return Case([{"aggregate": config}], stream)


# ---------------------------------------------------------------- partitioned workers (issue 41)

PARTITION_KEYS = [*KEYS, "c", "d", "e", "f", "g", "h"]
"""Enough keys that two or three workers each own some (the partitions are a hash of the key)."""


@st.composite
def keyed_step(draw: st.DrawFn, sinks: list[str]) -> dict[str, Any]:
    """One stateful step with a short watermark, so that events out of order are late, time out or are forgotten
    because of other keys' events: what partitioned workers must see exactly as one worker does."""
    kind = draw(st.sampled_from(["window", "window", "window", "dedupe", "complete", "aggregate"]))
    config = draw(step_head(kind, kind, ["fail", "skip", "dead"], sinks))
    watermark = draw(st.sampled_from(["0s", "2s", "5s"]))
    if kind == "window":
        config["key"] = draw(st.sampled_from([["k"], ["k", "s"], {"g": "coalesce(k, s)"}]))
        shape = draw(st.sampled_from(["tumbling", "sliding", "session"]))
        if shape == "tumbling":
            config["tumbling"] = draw(st.sampled_from(["5s", "10s"]))
        elif shape == "sliding":
            config.update(sliding="10s", every="5s")
        else:
            config["session"] = draw(st.sampled_from(["3s", "6s"]))
        config["watermark"] = watermark
        if draw(st.booleans()):
            config["allowed_lateness"] = "3s"
        config["emit"] = draw(st.sampled_from(["final", "updates"]))
        if draw(st.booleans()):
            sinks.append("late")
            config["late"] = "late"
        config["aggs"] = _aggs(draw)
    elif kind == "dedupe":
        config.update(key=draw(st.sampled_from(["k", "concat(coalesce(k, '-'), '/', coalesce(s, '-'))", "x"])),
                      within=draw(st.sampled_from(["3s", "8s"])), watermark=watermark)
    elif kind == "complete":
        config.update(key=draw(st.sampled_from(["k", "s"])), parts={"pos": "x > 0", "neg": "x <= 0"},
                      timeout=draw(st.sampled_from(["4s", "10s"])), watermark=watermark, into="done")
    else:
        config.update(key=draw(st.sampled_from([["k"], ["k", "s"]])), aggs=_aggs(draw), into="st")
    return {kind: config}


@st.composite
def partitioned_cases(draw: st.DrawFn) -> Case:
    """Up to two stateless steps, then one stateful step, then maybe a stateless one, over up to 40 events of
    many keys, out of order by more than the watermark now and then."""
    sinks: list[str] = []
    before = draw(st.lists(st.sampled_from(STATELESS), max_size=2))
    steps = [draw(step(i, kind, ["fail", "skip", "dead"], sinks)) for i, kind in enumerate(before)]
    steps.append(draw(keyed_step(sinks)))
    if draw(st.booleans()):
        steps.append(draw(step(len(steps), "annotate", ["skip"], sinks)))
    n = draw(st.integers(1, 40))
    times = sorted(draw(st.lists(st.integers(0, SPREAD), min_size=n, max_size=n)))
    for _ in range(draw(st.integers(0, 4))):  # a few events moved later in the stream: late, or not
        i, j = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        times.insert(max(i, j), times.pop(min(i, j)))
    stream = []
    for t in times:
        e = draw(event(t))
        if "k" in e and draw(st.integers(0, 3)):
            e["k"] = draw(st.sampled_from(PARTITION_KEYS))
        stream.append(e)
    return Case(steps, stream, sinks)
