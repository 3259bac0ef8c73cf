"""``dedupe``: drop an event whose key was already seen within ``within`` of event time.

    - dedupe: {id: once, key: "concat(oper, '/', veh, '/', tst)", within: 5m}

The first event of a key is kept and remembered with its event time; a later (or earlier, out of order) event
of the same key whose event time is less than ``within`` away is dropped. A key is forgotten once the watermark
(largest event time seen minus ``watermark``) is ``within`` past its time, so state stays bounded. Events whose
key is NULL are never duplicates. On Spark the same step runs per key in keyed state, with a timer per
remembered key at its time + ``within`` on the query's watermark (``engine/spark/keyed.py``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any, ClassVar

import orjson
from pydantic import Field

from edgewise.config.models import Expr
from edgewise.durations import Duration, format_duration_us
from edgewise.engine.context import RunContext
from edgewise.events import Batch
from edgewise.expr.compiler import compile_expression
from edgewise.steps.group_keys import match_text, queried_texts
from edgewise.steps.stateful import END_OF_TIME, StatefulConfig, StatefulStep


class DedupeConfig(StatefulConfig):
    """Drop repeats of a key within a span of event time."""

    key: Expr = Field(description="expression identifying duplicates, e.g. \"concat(oper, '/', veh, '/', tst)\"")
    within: Duration = Field(description="events of one key closer than this in event time are duplicates")
    watermark: Duration = Field(0, description="bounded out-of-orderness; keys are forgotten this much later")


class DedupeStep(StatefulStep):
    kind: ClassVar[str] = "dedupe"
    Config = DedupeConfig
    config: DedupeConfig

    def __init__(self, config: DedupeConfig) -> None:
        super().__init__(config)
        self.key = compile_expression(config.key)
        self.within = config.within
        self.reset()

    def reset(self) -> None:
        self.seen: dict[str, int] = {}  # key text -> event time of the kept event
        self.expiry: list[tuple[int, str]] = []
        self.max_time = -END_OF_TIME
        self.dirty.clear()

    def process(self, batch: Batch, ctx: RunContext) -> Batch:
        fn = self.key.evaluate
        keys = [fn(p) for p in batch.payloads]  # evaluate first: an error leaves the state untouched
        keep = [True] * len(keys)
        seen, within = self.seen, self.within
        for i, (value, t) in enumerate(zip(keys, batch.event_times, strict=True)):
            if value is not None:
                text = match_text(value)
                first = seen.get(text)
                if first is not None and abs(t - first) < within:
                    keep[i] = False
                else:
                    seen[text] = t
                    heapq.heappush(self.expiry, (t + within, text))
                    self.dirty.add(text)
            if t > self.max_time:
                self.max_time = t
                self._expire(t - self.config.watermark)
        dropped = keep.count(False)
        if dropped:
            ctx.count(self.id, "duplicates", dropped)
            return batch.select(keep)
        return batch

    def _expire(self, watermark: int) -> None:
        expiry, seen = self.expiry, self.seen
        while expiry and expiry[0][0] <= watermark:
            until, text = heapq.heappop(expiry)
            first = seen.get(text)
            if first is not None and first + self.within == until:
                del seen[text]
                self.dirty.add(text)

    def expire(self, now_us: int, ctx: RunContext) -> Batch | None:
        """The watermark is at ``now_us``: forget the keys it has passed (for engines that keep the timers
        themselves). Nothing is emitted."""
        self._expire(now_us)
        return None

    def idle(self, by_us: int, ctx: RunContext) -> Batch | None:
        if self.max_time != -END_OF_TIME:
            self.max_time += by_us
            self._expire(self.max_time - self.config.watermark)
        return None

    def deadlines(self) -> list[int]:
        """When each remembered key may be forgotten (µs of event time)."""
        return [t + self.within for t in self.seen.values()]

    def changes(self) -> dict[str, bytes | None]:
        changed: dict[str, bytes | None] = {}
        for text in self.dirty:
            t = self.seen.get(text)
            changed[f"k/{text}"] = None if t is None else str(t).encode()
        self.dirty.clear()
        changed["meta"] = orjson.dumps({"max_time": self.max_time})
        return changed

    def restore(self, items: Iterable[tuple[str, bytes]]) -> None:
        for name, value in items:
            if name == "meta":
                self.max_time = orjson.loads(value)["max_time"]
            elif name.startswith("k/"):
                t = int(value)
                self.seen[name[2:]] = t
                heapq.heappush(self.expiry, (t + self.within, name[2:]))

    def lookup(self, key: str) -> Any:
        return next((self.seen[t] for t in queried_texts(key) if t in self.seen), None)

    def describe(self) -> list[str]:
        return [f"{self.head()}: drop repeats within {format_duration_us(self.within)} of event time",
                f"key: {self.key.sql}", f"state: store {self.store_name!r}"]
