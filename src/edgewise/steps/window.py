"""``window``: event-time windowed aggregation (tumbling, sliding, session) with a watermark.

Semantics follow Spark Structured Streaming, evaluated one event at a time:

* windows are aligned to the epoch (Spark's ``window(ts, size, slide)``); a session window starts at its first
  event and ends ``gap`` after its last, and sessions of one key that overlap or touch merge (``session_window``);
* watermark = the largest event time seen so far minus ``watermark``. An event is *late* when the end of its
  window (for sliding windows, of every window it falls in) plus ``allowed_lateness`` is at or before the
  watermark; late events are dropped (counted) or sent to the ``late`` sink;
* ``emit: final`` gives one result when the watermark reaches a window's end (Spark's append mode); an event
  that still lands in an emitted window within ``allowed_lateness`` gives an updated result with the same
  window; ``emit: updates`` gives a result after every change (Spark's update mode);
* a window's state is dropped once the watermark passes its end plus ``allowed_lateness``.

Differences from Spark, on purpose: Spark advances the watermark once per micro-batch, edgewise after every
event, so events inside one Spark micro-batch are never late for each other but can be here; ``allowed_lateness``
does not exist in Spark (use 0 there, the default). Results are ``{key columns, window_start, window_end, aggs}``
with the event time ``window_end - 1µs`` (Spark's ``window_time``) and the id
``<step>:<window start µs>:<key JSON>`` (``#n`` for the n-th update), so replays after a restart are idempotent.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import operator
from collections import Counter
from collections.abc import Iterable
from typing import Any, ClassVar, Literal

import orjson

from edgewise.declare import Field, model_validator
from edgewise.durations import Duration, format_duration_us
from edgewise.engine.context import RunContext
from edgewise.events import Batch, KeyedRows, Payload
from edgewise.expr import values as V
from edgewise.steps.aggs import AggExpr, Aggregates
from edgewise.steps.group_keys import group_key
from edgewise.steps.state_values import decode_value
from edgewise.steps.stateful import (
    END_OF_TIME,
    FAILURES,
    Failures,
    KeyColumns,
    KeySpec,
    Record,
    StatefulConfig,
    StatefulStep,
    argument_failures,
    fail_some,
    key_text,
    key_texts,
    keys_and_rows,
    records_batch,
)


class WindowConfig(StatefulConfig):
    """Event-time windows per key."""

    key: KeySpec = Field(default_factory=list, description="group by these expressions (a list; a nested path "
                         "names its last part) or a map of column name -> expression; empty: one global group")
    tumbling: Duration | None = Field(default=None, description="fixed, non-overlapping windows of this size")
    sliding: Duration | None = Field(default=None, description="overlapping windows of this size, one starting `every`")
    every: Duration | None = Field(default=None, description="the slide of sliding windows")
    session: Duration | None = Field(default=None, description="session windows: a key's session closes after this gap")
    watermark: Duration = Field(default=0, description="bounded out-of-orderness: watermark = max event time seen - "
                                "this")
    allowed_lateness: Duration = Field(default=0, description="keep windows this long after the watermark passed "
                                       "their end; later data for them gives updated results")
    aggs: dict[str, AggExpr] = Field(min_length=1, description="result column -> aggregate, e.g. "
                                     "{vehicles: count_distinct(veh), avg_speed: avg(spd)}")
    emit: Literal["final", "updates"] = Field(default="final", description="final: one result when the watermark "
                                              "passes the window end; updates: a result after every change")
    late: str = Field(default="drop", description="'drop' (counted) or the id of a sink that receives late events")

    @model_validator(mode="after")
    def _one_kind(self) -> WindowConfig:
        kinds = [k for k in ("tumbling", "sliding", "session") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("a window needs exactly one of tumbling, sliding (with every) or session; found "
                             f"{', '.join(kinds) or 'none'}")
        size = self.tumbling or self.sliding or self.session
        if not size:
            raise ValueError(f"the {kinds[0]} window size must be more than 0")
        if self.sliding is not None:
            if not self.every:
                raise ValueError("a sliding window needs `every` (the slide), e.g. sliding: 10m, every: 1m")
            if self.every > self.sliding:
                raise ValueError("`every` cannot be longer than the sliding window")
        elif self.every is not None:
            raise ValueError("`every` only applies to sliding windows")
        return self

    def sink_references(self) -> list[tuple[str, str]]:
        return [] if self.late == "drop" else [("late", self.late)]


class _Window:
    __slots__ = ("accs", "alive", "end", "key", "revision", "start")

    def __init__(self, start: int, end: int, key: tuple[Any, ...], accs: list[Any], revision: int = 0) -> None:
        self.start = start
        self.end = end
        self.key = key
        self.accs = accs
        self.revision = revision  # results emitted so far
        self.alive = True


class WindowStep(StatefulStep):
    kind: ClassVar[str] = "window"
    Config = WindowConfig
    config: WindowConfig

    def __init__(self, config: WindowConfig) -> None:
        super().__init__(config)
        self.keys = KeyColumns(config.key)
        self.known_texts: dict[Any, str] = {}
        """Keys' texts, for partitioned workers (``partition_texts``)."""
        self.aggs = Aggregates(config.aggs)
        self.size = config.tumbling or config.sliding or config.session or 0
        self.slide = config.every or self.size
        self.sessions = config.session is not None
        self.delay = config.watermark
        self.lateness = config.allowed_lateness
        self.final = config.emit == "final"
        # an event at or after the floor is late under neither watermark, and none of its windows ends by then; a
        # session can still merge with one that ends exactly at the event (1 µs: a floor at the event matters)
        self.floor_slack_us = 1 if self.sessions else 0
        self.reset()

    def reset(self) -> None:
        self.windows: dict[tuple[int, tuple[Any, ...]], _Window] = {}  # tumbling/sliding: (start, key)
        self.by_key: dict[tuple[Any, ...], list[_Window]] = {}  # sessions of each key
        # (time, window start, key text, seq, window): at the end, then at end + lateness. Windows due at the same
        # time fire in (start, key) order, so a restored run emits them in the order an uninterrupted one does
        self.timers: list[tuple[int, int, str, int, _Window]] = []
        self.seq = 0
        self.max_time = -END_OF_TIME
        self.dirty.clear()

    # -- the event path ---------------------------------------------------------------------------------------

    def process(self, batch: Batch, ctx: RunContext) -> Batch:
        # evaluate everything first: an event whose key or argument fails is left out before any state changed
        failures: Failures
        out: list[Record] = []
        keyed = batch.keyed
        if keyed is not None:
            if self.config.tumbling is not None and self._counted_in_order(keyed, batch.event_times, out):
                return self._results(out, ctx)
            keys, values, failures = keyed.keys, keyed.rows, {}
        else:
            keys, values, failures = keys_and_rows(self.keys, self.aggs, batch.payloads)
            if (self.config.tumbling is not None and not failures
                    and self._counted_in_order(KeyedRows(keys, values), batch.event_times, out)):
                return self._results(out, ctx)
        if self.config.tumbling is not None:
            late = self._tumbling(keys, values, batch.event_times, out, failures)
            if late is not None:
                self._late(batch, late, ctx)
            return fail_some(self._results(out, ctx), failures)
        late = []
        times = batch.event_times
        for i, key in enumerate(keys):
            if i in failures:
                late.append(False)
                continue
            t = times[i]
            row = values[i] if values is not None else None
            try:
                accepted = self._add_session(t, key, row, out) if self.sessions else self._add(t, key, row, out)
            except FAILURES as exc:
                failures[i] = exc
                late.append(False)
                continue
            late.append(not accepted)
            if t > self.max_time:
                self.max_time = t
                if self.timers and self.timers[0][0] <= t - self.delay:
                    self._fire(t - self.delay, out)
        if any(late):
            self._late(batch, late, ctx)
        return fail_some(self._results(out, ctx), failures)

    def _tumbling(self, keys: list[tuple[Any, ...]], rows: list[list[Any]] | None, times: list[int],
                  out: list[Record], failures: Failures) -> list[bool] | None:
        """``_add`` + watermark for tumbling windows, inlined: the hot loop of most windowed pipelines. Returns
        the late mask, or ``None`` when nothing was late. Events in ``failures`` are passed over; an event whose
        aggregates fail to update is added to them (and changes nothing)."""
        size, delay, final = self.size, self.delay, self.final
        windows = self.windows
        dirty_add = self.tracked_add
        counts = len(self.aggs.specs) if self.aggs.counts_only else 0  # count() only: accumulators are counters
        added = self.aggs.added
        late: list[bool] | None = None
        max_time = self.max_time
        # an event is late when its window's end plus the lateness is at or before the watermark, that is when
        # its window starts at or before this
        horizon = max_time - delay - self.lateness - size
        for i, key in enumerate(keys):
            if failures and i in failures:
                continue
            t = times[i]
            start = t - t % size
            if start <= horizon:
                if late is None:
                    late = [False] * len(keys)
                late[i] = True
            else:
                slot = (start, key)
                window = windows.get(slot)
                if counts:
                    if window is None:
                        window = self._open(start, start + size, key, self.aggs.init())
                    accs = window.accs
                    if counts == 1:
                        accs[0] += 1
                    else:
                        for j in range(counts):
                            accs[j] += 1
                else:
                    try:
                        accs = added(window.accs if window is not None else self.aggs.init(),
                                     None if rows is None else rows[i])
                    except FAILURES as exc:
                        failures[i] = exc
                        continue
                    if window is None:
                        window = self._open(start, start + size, key, accs)
                    else:
                        window.accs = accs
                if dirty_add is not None:
                    dirty_add(slot)
                if window.revision or not final:
                    out.append(self._result(window))
            if t > max_time:
                max_time = self.max_time = t
                horizon = t - delay - self.lateness - size
                if self.timers and self.timers[0][0] <= t - delay:
                    self._fire(t - delay, out)
        return late

    def _counted_in_order(self, keyed: KeyedRows, times: list[int], out: list[Record]) -> bool:
        """Tumbling windows of ``count()`` only, with final results, over events in time order from the watermark
        on (the common case: a source in order): each window's count goes up by its events at once, and the
        watermark moves once, to the last event. False, having changed nothing, where that does not apply.

        Why the result is the one of event after event: no event is late, as none is before the largest time seen
        so far. A window the watermark closes within the batch gets no later event of the batch, as each of those
        is at or after the time that closed it, so after its end. Windows are made, and their timers set, in the
        order of their first event, as event after event; and the timers fire in the heap's order either way."""
        if (not self.aggs.counts_only or not self.final or not times or times[0] < self.max_time
                or not all(map(operator.le, times, itertools.islice(times, 1, None)))):
            return False
        size, windows, counts = self.size, self.windows, len(self.aggs.specs)
        dirty_add = self.tracked_add
        first, n = 0, len(times)
        while first < n:  # the events of one window start, then of the next
            start = times[first] - times[first] % size
            end = bisect.bisect_left(times, start + size, first)
            counted = (Counter(keyed.keys[first:end]).items() if keyed.values is None
                       else (((value,), events) for value, events in Counter(keyed.values[first:end]).items()))
            for key, added in counted:
                slot = (start, key)
                window = windows.get(slot)
                if window is None:
                    window = self._open(start, start + size, key, self.aggs.init())
                if counts == 1:
                    window.accs[0] += added
                else:
                    accs = window.accs
                    for j in range(counts):
                        accs[j] += added
                if dirty_add is not None:
                    dirty_add(slot)
            first = end
        last = times[-1]
        if last > self.max_time:
            self.max_time = last
            if self.timers and self.timers[0][0] <= last - self.delay:
                self._fire(last - self.delay, out)
        return True

    def _add(self, t: int, key: tuple[Any, ...], row: list[Any] | None, out: list[Record]) -> bool:
        """Add an event to every window it falls in (sliding: several). The new accumulators of all of them are
        computed before any is changed, so an error leaves every window as it was."""
        watermark = self.max_time - self.delay
        updates: list[tuple[int, int, _Window | None, list[Any]]] = []
        start = t - t % self.slide
        while start + self.size > t:
            end = start + self.size
            if end + self.lateness > watermark:
                window = self.windows.get((start, key))
                updates.append((start, end, window, self.aggs.added(
                    window.accs if window is not None else self.aggs.init(), row)))
            start -= self.slide
        for start, end, window, accs in updates:
            slot = (start, key)
            if window is None:
                window = self._open(start, end, key, accs)
            else:
                window.accs = accs
            self.dirty.add(slot)
            if not self.final or window.revision:
                out.append(self._result(window))
        return bool(updates)

    def _add_session(self, t: int, key: tuple[Any, ...], row: list[Any] | None, out: list[Record]) -> bool:
        watermark = self.max_time - self.delay
        start, end = t, t + self.size
        if end + self.lateness <= watermark:
            return False
        sessions = self.by_key.get(key, [])
        # the merged session is computed whole before any session changes: an error leaves them as they were
        merged = _Window(start, end, key, self.aggs.added(self.aggs.init(), row))
        overlapping = [s for s in sessions if s.start <= merged.end and merged.start <= s.end]
        for s in overlapping:
            merged.start, merged.end = min(merged.start, s.start), max(merged.end, s.end)
            merged.accs = self.aggs.merge(merged.accs, s.accs)
            merged.revision = max(merged.revision, s.revision)
        for s in overlapping:
            s.alive = False
        keep = [s for s in sessions if s.alive]
        keep.append(merged)
        keep.sort(key=lambda w: w.start)
        self.by_key[key] = keep
        self._timer(merged.end, merged)
        self.dirty.add(key)
        if not self.final or merged.revision:
            out.append(self._result(merged))
        return True

    def _open(self, start: int, end: int, key: tuple[Any, ...], accs: list[Any]) -> _Window:
        """A new tumbling or sliding window, held and with its timer set."""
        window = self.windows[(start, key)] = _Window(start, end, key, accs)
        self._timer(end, window)
        return window

    def _timer(self, at: int, window: _Window) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (at, window.start, key_text(window.key), self.seq, window))

    def _fire(self, watermark: int, out: list[Record]) -> None:
        """Windows whose end the watermark reached: emit (final mode) and drop those past their lateness."""
        timers = self.timers
        while timers and timers[0][0] <= watermark:
            at, _, _, _, window = heapq.heappop(timers)
            if not window.alive:
                continue
            if at == window.end and self.final and not window.revision:
                out.append(self._result(window))
            if window.end + self.lateness <= watermark:
                self._drop(window)
            elif at == window.end:
                self._timer(window.end + self.lateness, window)

    def _drop(self, window: _Window) -> None:
        window.alive = False
        if self.sessions:
            rest = [s for s in self.by_key.get(window.key, []) if s is not window]
            if rest:
                self.by_key[window.key] = rest
            else:
                self.by_key.pop(window.key, None)
            self.dirty.add(window.key)
        else:
            slot = (window.start, window.key)
            if self.windows.get(slot) is window:
                del self.windows[slot]
            self.dirty.add(slot)

    def _late(self, batch: Batch, late: list[bool], ctx: RunContext) -> None:
        ctx.count(self.id, "late", sum(late))
        if self.config.late != "drop":
            ctx.send(self.config.late, batch.select(late))

    def _result(self, w: _Window) -> Record:
        """The result record of a window as it is now (later changes give later results)."""
        record = self.keys.fields(w.key)
        record["window_start"] = V.timestamp_from_us(w.start)
        record["window_end"] = V.timestamp_from_us(w.end)
        record.update(self.aggs.results(w.accs))
        ident = f"{self.id}:{w.start}:{key_text(w.key)}"
        if w.revision:
            ident += f"#{w.revision}"
        w.revision += 1
        self.dirty.add(w.key if self.sessions else (w.start, w.key))
        return record, ident, w.end - 1

    def _results(self, out: list[Record], ctx: RunContext) -> Batch:
        return records_batch(self.id, out, ctx.clock.now_us())

    def finish(self, ctx: RunContext) -> Batch | None:
        out: list[Record] = []
        self._fire(END_OF_TIME, out)
        return self._results(out, ctx) if out else None

    def idle(self, by_us: int, ctx: RunContext) -> Batch | None:
        if self.max_time == -END_OF_TIME:
            return None  # no event yet: no event time to move on from
        return self.observe(self.max_time + by_us, ctx)

    def observe(self, max_time_us: int, ctx: RunContext) -> Batch | None:
        if max_time_us <= self.max_time:
            return None
        self.max_time = max_time_us
        out: list[Record] = []
        self._fire(max_time_us - self.delay, out)
        return self._results(out, ctx) if out else None

    def partition_texts(self, payloads: list[Payload]) -> list[str | None]:
        return key_texts(self.keys, payloads, self.known_texts)

    def failing(self, payloads: list[Payload]) -> set[int]:
        return argument_failures(self.aggs, payloads)


    # -- state ------------------------------------------------------------------------------------------------

    def changes(self) -> dict[str, bytes | None]:
        changed: dict[str, bytes | None] = {}
        for item in self.dirty:
            if self.sessions:
                sessions = self.by_key.get(item)
                changed[f"s/{key_text(item)}"] = None if not sessions else orjson.dumps(
                    [self._encode(w) for w in sessions])
            else:
                start, key = item
                window = self.windows.get(item)
                changed[f"w/{start}/{key_text(key)}"] = None if window is None else orjson.dumps(self._encode(window))
        self.dirty.clear()
        changed["meta"] = orjson.dumps({"max_time": self.max_time})
        return changed

    def _encode(self, w: _Window) -> list[Any]:
        return [w.start, w.end, key_text(w.key), self.aggs.encode(w.accs), w.revision]

    def _decode(self, data: list[Any]) -> _Window:
        start, end, key, accs, revision = data
        decoded_key = group_key(tuple(decode_value(orjson.loads(key))))
        return _Window(start, end, decoded_key, self.aggs.decode(accs), revision)

    def restore(self, items: Iterable[tuple[str, bytes]]) -> None:
        for name, value in items:
            data = orjson.loads(value)
            if name == "meta":
                self.max_time = data["max_time"]
                continue
            for raw in (data if name.startswith("s/") else [data]):
                window = self._decode(raw)
                if self.sessions:
                    self.by_key.setdefault(window.key, []).append(window)
                else:
                    self.windows[(window.start, window.key)] = window
                due = window.end if not window.revision or not self.final else window.end + self.lateness
                self._timer(due, window)

    def lookup(self, key: str) -> Any:
        found = [self._encode(w) for (_, k), w in self.windows.items() if key_text(k) == key]
        found += [self._encode(w) for k, ws in self.by_key.items() if key_text(k) == key for w in ws]
        return found or None

    def describe(self) -> list[str]:
        c = self.config
        if c.session is not None:
            shape = f"session gap {format_duration_us(c.session)}"
        elif c.sliding is not None:
            shape = f"sliding {format_duration_us(c.sliding)} every {format_duration_us(c.every or 0)}"
        else:
            shape = f"tumbling {format_duration_us(self.size)}"
        lines = [f"{self.head()}: {shape}, watermark {format_duration_us(c.watermark) if c.watermark else '0s'}"
                 f", allowed lateness {format_duration_us(c.allowed_lateness) if c.allowed_lateness else '0s'}, "
                 f"emit {c.emit}, late -> {c.late}",
                 f"key: {self.keys.describe()}"]
        lines += self.aggs.describe()
        lines.append(f"state: store {self.store_name!r}")
        return lines
