"""``dedupe``: drop an event whose key was already seen within ``within`` of event time.

    - dedupe: {id: once, key: "concat(oper, '/', veh, '/', tst)", within: 5m}

The first event of a key is kept and remembered with its event time; a later (or earlier, out of order) event
of the same key whose event time is less than ``within`` away from a remembered time is dropped. A kept time is
forgotten once the watermark (largest event time seen minus ``watermark``) is ``within`` past it, so state stays
bounded; an event kept when the watermark is already that far past it is not remembered at all. A key remembers
every kept time the watermark has not passed: out of order, an event can be kept between two kept times of its
key (``a@8, a@13, a@10`` with ``within: 3s`` and a 5 s watermark: ``a@10`` is 2 s from ``a@8``, a duplicate,
though 3 s from ``a@13``). Events whose key is NULL are never duplicates. On Spark the same step runs per key in
keyed state, with a timer per remembered time at that time + ``within`` on the query's watermark
(``engine/spark/keyed.py``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any, ClassVar

import orjson

from edgewise.config.models import Expr
from edgewise.declare import Field
from edgewise.durations import Duration, format_duration_us
from edgewise.engine.context import RunContext
from edgewise.events import Batch, Payload
from edgewise.expr.compiler import compile_expression
from edgewise.steps.group_keys import match_text, match_texts, queried_texts
from edgewise.steps.stateful import END_OF_TIME, StatefulConfig, StatefulStep


class DedupeConfig(StatefulConfig):
    """Drop repeats of a key within a span of event time."""

    key: Expr = Field(description="expression identifying duplicates, e.g. \"concat(oper, '/', veh, '/', tst)\"")
    within: Duration = Field(description="events of one key closer than this in event time are duplicates")
    watermark: Duration = Field(default=0, description="bounded out-of-orderness; keys are forgotten this much later")


class DedupeStep(StatefulStep):
    kind: ClassVar[str] = "dedupe"
    Config = DedupeConfig
    expires_before_rows: ClassVar[bool] = False  # forget_on_timers
    config: DedupeConfig

    def __init__(self, config: DedupeConfig) -> None:
        super().__init__(config)
        self.key = compile_expression(config.key)
        self.within = config.within
        # an event at or after the floor: a kept time the move forgets is `within` or more before it either way
        self.floor_slack_us = 0
        self.own_time_forgets = True
        """The step forgets by its own largest event time as it goes (locally); False: only when ``expire`` says
        (Spark's timers, ``forget_on_timers``)."""
        self.reset()

    def reset(self) -> None:
        self.seen: dict[str, int] = {}  # key text -> the latest kept event time the watermark has not passed
        self.earlier: dict[str, list[int]] = {}
        """Key text -> its other remembered kept times (events out of order; empty for a stream in order, whose
        earlier kept time the watermark passes before a later one is kept)."""
        self.expiry: list[tuple[int, str]] = []
        self.max_time = -END_OF_TIME
        self.expired_to = -END_OF_TIME
        """The watermark ``expire`` was last given (engines that keep the timers: Spark's, for this call)."""
        self.dirty.clear()

    def process(self, batch: Batch, ctx: RunContext) -> Batch:
        fn = self.key.evaluate
        keys = [fn(p) for p in batch.payloads]  # evaluate first: an error leaves the state untouched
        keep = [True] * len(keys)
        seen, earlier, within, delay = self.seen, self.earlier, self.within, self.config.watermark
        expiry, push, changed = self.expiry, heapq.heappush, self.dirty.add
        # a kept time at or before this is forgotten; the remembered ones are all later (``_expire`` runs whenever
        # the watermark moves)
        own_time = self.own_time_forgets
        forgotten = (self.max_time - delay if own_time else self.expired_to) - within
        for i, (value, t) in enumerate(zip(keys, batch.event_times, strict=True)):
            if value is not None:
                text = match_text(value)
                kept = seen.get(text)
                if (kept is not None and abs(t - kept) < within) or (
                        earlier and text in earlier and any(abs(t - k) < within for k in earlier[text])):
                    keep[i] = False
                elif t > forgotten:  # kept and remembered (an event the watermark passed already is only kept)
                    if kept is None or t > kept:
                        seen[text] = t
                        if kept is not None:
                            earlier.setdefault(text, []).append(kept)
                    else:  # out of order: an earlier time beside the key's latest
                        earlier.setdefault(text, []).append(t)
                    push(expiry, (t + within, text))
                    changed(text)
            if t > self.max_time:
                self.max_time = t
                if own_time:
                    forgotten = t - delay - within
                    self._expire(t - delay)
        dropped = keep.count(False)
        if dropped:
            ctx.count(self.id, "duplicates", dropped)
            return batch.select(keep)
        return batch

    def _expire(self, watermark: int) -> None:
        expiry, seen, earlier, within, pop = self.expiry, self.seen, self.earlier, self.within, heapq.heappop
        while expiry and expiry[0][0] <= watermark:
            until, text = pop(expiry)
            t = until - within
            if seen.get(text) == t:
                del seen[text]
                self.dirty.add(text)
            elif earlier:  # never the latest's time: a key's kept times are distinct
                times = earlier.get(text)
                if times is not None and t in times:
                    times.remove(t)
                    if not times:
                        del earlier[text]
                    self.dirty.add(text)

    def forget_on_timers(self) -> None:
        """On Spark a row reaches the step one micro-batch after the one that moved the watermark past its time
        where an earlier step's timer gave it (a completion's timeout at its deadline): the step has seen later
        event times by then, and Spark's watermark has passed the kept times around the row's. Locally such a
        row comes before the event that moved time on, when nothing around its time is forgotten yet. So on Spark
        the step forgets only by its timers, which fire after the micro-batch's rows: a row then meets every kept
        time the previous micro-batch's watermark left, and all of its own micro-batch's
        (``tests/fuzz/cases/a-completion-timeout-before-a-dedupe.yaml``)."""
        self.own_time_forgets = False

    def expire(self, now_us: int, ctx: RunContext) -> Batch | None:
        """The watermark is at ``now_us``: forget the keys it has passed (for engines that keep the timers
        themselves), and remember no later event it has passed as well. Nothing is emitted."""
        self._expire(now_us)
        self.expired_to = max(self.expired_to, now_us)
        return None

    def idle(self, by_us: int, ctx: RunContext) -> Batch | None:
        if self.max_time != -END_OF_TIME:
            self.observe(self.max_time + by_us, ctx)
        return None

    def observe(self, max_time_us: int, ctx: RunContext) -> Batch | None:
        if max_time_us > self.max_time:
            self.max_time = max_time_us
            self._expire(max_time_us - self.config.watermark)
        return None

    def partition_texts(self, payloads: list[Payload]) -> list[str | None]:
        return match_texts(map(self.key.evaluate, payloads))


    def deadlines(self) -> list[int]:
        """When each remembered kept time may be forgotten (µs of event time)."""
        return [t + self.within for t in self.seen.values()] + [
            t + self.within for times in self.earlier.values() for t in times]

    def changes(self) -> dict[str, bytes | None]:
        """A key's remembered times as ``latest[,earlier...]`` (one number for a stream in order, as before)."""
        changed: dict[str, bytes | None] = {}
        for text in self.dirty:
            t = self.seen.get(text)
            changed[f"k/{text}"] = None if t is None else ",".join(map(str, [t, *self.earlier.get(text, ())])).encode()
        self.dirty.clear()
        changed["meta"] = orjson.dumps({"max_time": self.max_time})
        return changed

    def restore(self, items: Iterable[tuple[str, bytes]]) -> None:
        for name, value in items:
            if name == "meta":
                self.max_time = orjson.loads(value)["max_time"]
            elif name.startswith("k/"):
                text = name[2:]
                latest, *others = map(int, value.split(b","))
                self.seen[text] = latest
                if others:
                    self.earlier[text] = others
                for t in (latest, *others):
                    heapq.heappush(self.expiry, (t + self.within, text))

    def lookup(self, key: str) -> Any:
        return next((self.seen[t] for t in queried_texts(key) if t in self.seen), None)

    def describe(self) -> list[str]:
        return [f"{self.head()}: drop repeats within {format_duration_us(self.within)} of event time",
                f"key: {self.key.sql}", f"state: store {self.store_name!r}"]
