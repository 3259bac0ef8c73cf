"""Public test kit: list sources with crash and pause markers, list sinks, a fake clock, a one-call runner that
restarts after crashes, and order-free comparison.

>>> from edgewise.testing import run_pipeline
>>> out = run_pipeline('''
... version: 1
... pipelines:
...   - id: hot
...     steps:
...       - filter: {id: above-30, where: "temp > 30"}
... ''', [{"temp": 35}, {"temp": 20}])
>>> out["hot"]
[{'temp': 35}]

Markers in the event list: ``CRASH`` stops the run like ``kill -9`` (nothing flushed or committed) and
``run_pipeline`` starts a new engine on the same state store, which resumes from the last commit, as a restarted
process would; ``pause("30s")`` lets 30 seconds of processing time pass with no input (timers fire).

>>> from edgewise.testing import CRASH, pause
>>> out = run_pipeline('''
... version: 1
... pipelines:
...   - id: counts
...     steps:
...       - aggregate: {id: per-room, key: [room], aggs: {n: count()}, into: seen}
... ''', [{"room": "a"}, CRASH, {"room": "a"}, pause("1m"), {"room": "b"}])
>>> [e["seen"]["n"] for e in out["counts"]]
[1, 2, 1]
"""

from __future__ import annotations

import io
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from edgewise.clock import FakeClock
from edgewise.config import BuildContext, load_text_plan
from edgewise.config.models import SinkConfig, SourceConfig
from edgewise.config.plan import Plan
from edgewise.durations import parse_duration_us
from edgewise.engine.local import STDOUT, Crash, Instrument, LocalEngine
from edgewise.events import Batch
from edgewise.jsonio import as_written
from edgewise.sinks.base import RetryableSinkError, Sink
from edgewise.sources.base import Source, SourceContext
from edgewise.sources.lines import make_batch
from edgewise.state import StateStore

__all__ = ["CRASH", "Crash", "FakeClock", "ListSink", "ListSource", "Pause", "RunResult", "assert_records_equal",
           "canonical", "pause", "run", "run_pipeline", "run_sources"]


class _CrashMarker:
    def __repr__(self) -> str:
        return "CRASH"


CRASH: Any = _CrashMarker()
"""Put in a ``ListSource``'s events: the run stops there like ``kill -9`` (once; a restarted run reads on)."""


@dataclass(frozen=True)
class Pause:
    """Processing time passes with no input: the clock advances (a ``FakeClock``) or the source sleeps."""

    seconds: float


def pause(duration: str | float) -> Pause:
    """A pause marker: ``pause("30s")``, ``pause(1.5)`` (a number is seconds here: Python, not a pipeline file)."""
    if isinstance(duration, int | float) and not isinstance(duration, bool) and duration >= 0:
        return Pause(float(duration))
    return Pause(parse_duration_us(duration) / 1_000_000)


class ListSource(Source):
    """Events from a Python list (payload dicts, ``CRASH`` and ``pause(...)`` markers), in batches of at most
    ``batch_size``; a marker ends the batch before it. Event ids are ``<source id>:<n>``, n counting events only.

    Each marker acts once per ``ListSource``: read it again after a crash (as a restarted run does) and it is
    passed over, so the restarted run gets the rest of the input.
    """

    __test__ = False
    kind: ClassVar[str] = "list"
    Config = SourceConfig

    def __init__(self, events: Iterable[dict[str, Any] | Pause | Any], source_id: str = "test") -> None:
        super().__init__(SourceConfig(id=source_id, type="list"), BuildContext("."))
        self.items = list(events)
        self.events = [e for e in self.items if isinstance(e, dict)]
        self._spent: set[int] = set()

    def read(self, ctx: SourceContext) -> Iterator[Batch]:
        size = ctx.batch_size
        chunk: list[dict[str, Any]] = []
        n = 0
        for index, item in enumerate(self.items):
            if isinstance(item, dict):
                chunk.append(item)
                if len(chunk) >= size:
                    yield self._batch(chunk, n, ctx)
                    n += len(chunk)
                    chunk = []
                continue
            if chunk:
                yield self._batch(chunk, n, ctx)
                n += len(chunk)
                chunk = []
            if index in self._spent:
                continue
            self._spent.add(index)
            if isinstance(item, Pause):
                _let_time_pass(ctx, item.seconds)
                yield self._batch([], n, ctx)  # an empty batch: the engine fires its timers
            elif item is CRASH:
                raise Crash(f"crash marker after {n} events")
            else:
                raise TypeError(f"ListSource events are dicts, CRASH or pause(...); found {item!r}")
        if chunk:
            yield self._batch(chunk, n, ctx)

    def _batch(self, chunk: list[dict[str, Any]], start: int, ctx: SourceContext) -> Batch:
        return make_batch(chunk, list(range(start, start + len(chunk))), self.id, f"{self.id}:", ctx)


def _let_time_pass(ctx: SourceContext, seconds: float) -> None:
    advance = getattr(ctx.clock, "advance", None)
    if advance is not None:
        advance(seconds)
    else:
        time.sleep(seconds)


class ListSink(Sink):
    """Keeps what it receives: ``records`` (payloads) and ``ids``. With ``fail_every`` n, every n-th write fails
    as a sink that is briefly down does (``RetryableSinkError``), keeping nothing: the engine must try again."""

    __test__ = False
    kind: ClassVar[str] = "list"
    Config = SinkConfig

    def __init__(self, sink_id: str = "list", fail_every: int = 0) -> None:
        # model_construct: internal ids such as "<stdout>" are not user ids and skip their validation
        super().__init__(SinkConfig.model_construct(id=sink_id, type="list"), BuildContext("."))
        self.records: list[dict[str, Any]] = []
        self.ids: list[str] = []
        self.fail_every = fail_every
        self.writes = 0

    def write(self, batch: Batch) -> None:
        self.writes += 1
        if self.fail_every and self.writes % self.fail_every == 0:
            raise RetryableSinkError(f"sink {self.id}: write {self.writes} fails, as planted (fail_every)")
        self.records.extend(batch.payloads)
        self.ids.extend(batch.ids())

    def unique(self) -> list[dict[str, Any]]:
        """The records as an idempotent sink keeps them: the last one written under each id."""
        return list(dict(zip(self.ids, self.records, strict=True)).values())


def canonical(record: Any) -> bytes:
    """A record's canonical JSON (sorted keys, the engine's number and time encoding), for comparison."""
    import orjson

    return orjson.dumps(as_written(record), option=orjson.OPT_SORT_KEYS)


def assert_records_equal(actual: Iterable[Any], expected: Iterable[Any]) -> None:
    """Assert two collections hold the same records, ignoring order (duplicates count)."""
    a = Counter(canonical(r) for r in actual)
    e = Counter(canonical(r) for r in expected)
    if a != e:
        missing = list((e - a).elements())
        extra = list((a - e).elements())
        lines = ["records differ (order ignored)"]
        lines += [f"  missing:    {m.decode()}" for m in missing[:20]]
        lines += [f"  unexpected: {x.decode()}" for x in extra[:20]]
        raise AssertionError("\n".join(lines))


@dataclass
class RunResult:
    """What ``run`` gives: each pipeline's results and each sink's records (both deduplicated by event id, as an
    idempotent sink keeps them), counters, failures, and how many crashes the run went through."""

    outputs: dict[str, list[dict[str, Any]]]
    sinks: dict[str, ListSink]
    counters: dict[str, int]
    failed: int
    errors: str
    restarts: int
    produced: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)
    """Each pipeline's results as produced: (event id, record), in order, duplicates kept."""
    step_outcomes: dict[tuple[str, str], int] = field(default_factory=dict)
    """(step id, outcome) → count: ``filtered``, ``duplicates``, ``late``, ``failed``, ``skipped``, ..."""
    events_in: int = 0


def run(plan: Plan, events: Iterable[dict[str, Any] | Pause | Any], *, clock: FakeClock | None = None,
        pipelines: list[str] | None = None, batch_size: int = 1024, state_dir: str | None = None,
        open_store: Callable[[str], StateStore] | None = None, flaky_sinks: int = 0) -> RunResult:
    """Run a plan over events with every sink replaced by a ``ListSink``, restarting after each ``CRASH``.

    State is kept in a SQLite file per store name in ``state_dir`` (a fresh temporary directory by default)
    whatever the plan declares, so a test never touches the plan's own store; ``open_store(name)`` replaces that
    (a Redis store, say). Each restart opens the stores anew, so only what was committed survives a crash. The
    source, sinks and clock outlive restarts, as the outside world does. With ``flaky_sinks`` n, every sink's n-th
    write fails once (``ListSink``'s ``fail_every``; 2 or more, so that a retry gets through).
    """
    return run_sources(plan, [ListSource(events)], clock=clock, pipelines=pipelines, batch_size=batch_size,
                       state_dir=state_dir, open_store=open_store, flaky_sinks=flaky_sinks)


def run_sources(plan: Plan, sources: list[Source], *, clock: FakeClock | None = None,
                pipelines: list[str] | None = None, batch_size: int = 1024, state_dir: str | None = None,
                open_store: Callable[[str], StateStore] | None = None,
                instrument: Instrument | None = None, flaky_sinks: int = 0) -> RunResult:
    """``run`` over any sources (files, say): every sink a ``ListSink``, state in a temporary directory."""
    from edgewise.state.sqlite import SqliteStore

    if flaky_sinks == 1:
        raise ValueError("flaky_sinks=1 fails every write: nothing could get through")
    clock = clock or FakeClock()
    sinks: dict[str, Sink] = {sid: ListSink(sid, flaky_sinks) for sid in plan.sinks}
    sinks[STDOUT] = ListSink(STDOUT, flaky_sinks)
    ids: dict[str, dict[str, dict[str, Any]]] = {}
    errors = io.StringIO()
    counters: Counter[str] = Counter()
    outcomes: Counter[tuple[str, str]] = Counter()
    produced: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    failed = restarts = events_in = 0
    names = {"default"} | set(plan.stores) | {s.store_name for s in plan.stateful_steps()}
    with tempfile.TemporaryDirectory(prefix="edgewise-test-") as tmp:
        directory = state_dir or tmp

        def collect(pipeline_id: str, batch: Batch) -> None:
            ids.setdefault(pipeline_id, {}).update(zip(batch.ids(), batch.payloads, strict=True))
            produced.setdefault(pipeline_id, []).extend(zip(batch.ids(), batch.payloads, strict=True))

        def sqlite(name: str) -> StateStore:
            return SqliteStore(os.path.join(directory, f"{name}.db"))

        while True:
            stores = {n: (open_store or sqlite)(n) for n in names}
            engine = LocalEngine(plan, clock=clock, stdout=io.BytesIO(), sinks=sinks, pipelines=pipelines,
                                 errors=errors, sleep=lambda s: None, batch_size=batch_size, stores=stores,
                                 commit_interval=0, collect=collect, instrument=instrument)
            try:
                engine.run(sources)
            except Crash:
                restarts += 1
                continue
            finally:
                for store in stores.values():
                    store.close()
                failed += engine.stats.failed
                events_in += engine.stats.events_in
                outcomes.update(engine.stats.steps)
                for (step_id, what), n in engine.stats.steps.items():
                    counters[f"{step_id}.{what}"] += n
            break
    outputs = {pid: list(ids.get(pid, {}).values()) for pid, _, _ in engine.pipelines}
    kept = {sid: s for sid, s in sinks.items() if sid != STDOUT and isinstance(s, ListSink)}
    return RunResult(outputs, kept, dict(counters), failed, errors.getvalue(), restarts, produced, dict(outcomes),
                     events_in)


def run_pipeline(pipeline: str | Plan, events: Iterable[dict[str, Any] | Pause | Any], *,
                 clock: FakeClock | None = None, base_dir: str = ".") -> dict[str, list[dict[str, Any]]]:
    """Run a pipeline file's text (or a loaded plan) over events; results by pipeline id and, for each sink, under
    ``sink:<id>``. Every sink is replaced by a ``ListSink``: nothing is written anywhere. See ``run``."""
    plan = pipeline if isinstance(pipeline, Plan) else load_text_plan(pipeline, "<test>", base_dir)
    result = run(plan, events, clock=clock)
    outputs = dict(result.outputs)
    for sid, sink in result.sinks.items():
        outputs[f"sink:{sid}"] = sink.unique()
    return outputs
