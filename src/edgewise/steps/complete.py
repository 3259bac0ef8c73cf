"""``complete``: a join with a timeout (binge's completer). Events that share a join value are parts of one
completion; the step writes where each completion stands under ``into``:

* ``triggered`` — a part was seen and the completion is still open (the first part starts the timeout);
* ``completed`` — this event supplied the last missing part; the completion's state is cleared;
* ``timed_out`` — a record of its own, emitted when the timeout fires (a timer, not the next event), naming the
  parts seen and missing.

    - complete:
        id: shipped
        key: "coalesce(body.head_commit.id, body.deployment.sha, body.sha)"
        parts: {pushed: "event = 'push'", checked: "event IN ('status', 'check_run')"}
        timeout: 1h
        into: completion
        capture: {pushed: [body.pusher.name]}

Events without a join value (NULL key) or matching no part pass through unchanged. ``time: event`` (default)
measures the timeout in event time (the watermark: largest event time seen minus ``watermark``); ``time:
processing`` in the engine's clock, so a completion times out even when no event arrives at all.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any, ClassVar, Literal

import orjson

from edgewise.config.models import Condition, Expr
from edgewise.declare import Field, model_validator
from edgewise.durations import Duration, format_duration_us
from edgewise.engine.context import RunContext
from edgewise.events import Batch, Payload
from edgewise.expr.compiler import compile_expression
from edgewise.steps.annotate import set_path, split_path
from edgewise.steps.group_keys import match_text, match_texts, queried_texts
from edgewise.steps.state_values import decode_value, encode_value
from edgewise.steps.stateful import END_OF_TIME, FAILURES, Record, StatefulConfig, StatefulStep, records_batch


class CompleteConfig(StatefulConfig):
    """Join events by a value, with a timeout."""

    key: Expr = Field(description="the join value, e.g. \"coalesce(head_commit.id, deployment.sha, sha)\"; "
                      "events where it is NULL pass through")
    parts: dict[str, Condition] = Field(min_length=2, description="part name -> condition; an event is that part "
                                   "where the condition is TRUE (it may be several parts)")
    timeout: Duration = Field(description="how long after its first part a completion may stay open")
    into: str = Field(description="field receiving {status, key, seen, missing, parts}")
    capture: dict[str, list[str]] = Field(default_factory=dict, description="part -> fields of that part's event "
                                          "to keep (dotted paths); shown under into.parts.<part>")
    time: Literal["event", "processing"] = Field(default="event", description="event: the timeout runs in event time; "
                                                 "processing: in the engine's clock")
    watermark: Duration = Field(default=0, description="event time: bounded out-of-orderness before timeouts fire")

    @model_validator(mode="after")
    def _captured_parts_exist(self) -> CompleteConfig:
        unknown = [p for p in self.capture if p not in self.parts]
        if unknown:
            raise ValueError(f"capture names parts that are not in `parts`: {', '.join(unknown)}")
        if not self.timeout:
            raise ValueError("timeout must be more than 0")
        return self


class _Pending:
    __slots__ = ("deadline", "parts", "started")

    def __init__(self, started: int, deadline: int, parts: dict[str, Any]) -> None:
        self.started = started
        self.deadline = deadline
        self.parts = parts  # part name -> captured fields (an empty dict when nothing is captured)


class CompleteStep(StatefulStep):
    kind: ClassVar[str] = "complete"
    Config = CompleteConfig
    config: CompleteConfig

    def __init__(self, config: CompleteConfig) -> None:
        super().__init__(config)
        self.key = compile_expression(config.key)
        self.parts = [(name, compile_expression(cond).evaluate) for name, cond in config.parts.items()]
        self.names = [name for name, _ in self.parts]
        self.capture = {part: [(f, split_path(f)) for f in fields] for part, fields in config.capture.items()}
        self.into = split_path(config.into)
        self.event_time = config.time == "event"
        # an event moves time to itself before it joins: what times out by a floor before it times out anyway;
        # completions in processing time do not look at event time
        self.floor_slack_us = 0 if self.event_time else -END_OF_TIME
        self.reset()

    def reset(self) -> None:
        self.pending: dict[str, _Pending] = {}
        self.keys: dict[str, Any] = {}  # key text -> the key value
        self.timers: list[tuple[int, str, int]] = []  # (deadline, key text, started)
        self.max_time = -END_OF_TIME
        self.dirty.clear()

    def process(self, batch: Batch, ctx: RunContext) -> Batch:
        # evaluate first: an expression error leaves the state untouched
        keys = [self.key.evaluate(p) for p in batch.payloads]
        matched = [[name for name, cond in self.parts if cond(p) is True] if k is not None else []
                   for p, k in zip(batch.payloads, keys, strict=True)]
        # timeouts that fire come out before the event that moved time past them
        out: list[Record] = []
        if not self.event_time:
            self._fire(ctx.clock.now_us(), out)
        ids = batch.ids()
        for i, payload in enumerate(batch.payloads):
            t = batch.event_times[i]
            if self.event_time and t > self.max_time:
                self.max_time = t
                self._fire(t - self.config.watermark, out)
            if matched[i]:
                payload = self._join(keys[i], payload, matched[i], t if self.event_time else ctx.clock.now_us())
            out.append((payload, ids[i], t))
        return records_batch(batch.source, out, batch.ingest_time_us)

    def _join(self, key: Any, payload: Payload, parts: list[str], now: int) -> Payload:
        text = match_text(key)
        pending = self.pending.get(text)
        if pending is None:
            pending = self.pending[text] = _Pending(now, now + self.config.timeout, {})
            self.keys[text] = key
            heapq.heappush(self.timers, (pending.deadline, text, now))
        for part in parts:
            pending.parts[part] = self._captured(part, payload)
        self.dirty.add(text)
        if len(pending.parts) == len(self.names):
            del self.pending[text]
            self.keys.pop(text, None)
            return set_path(payload, self.into, self._status("completed", key, pending))
        return set_path(payload, self.into, self._status("triggered", key, pending))

    def _captured(self, part: str, payload: Payload) -> dict[str, Any]:
        captured: dict[str, Any] = {}
        for name, path in self.capture.get(part, ()):
            value: Any = payload
            for p in path:
                value = value.get(p) if isinstance(value, dict) else None
            captured[name] = value
        return captured

    def _status(self, status: str, key: Any, pending: _Pending) -> dict[str, Any]:
        seen = [n for n in self.names if n in pending.parts]
        result: dict[str, Any] = {"status": status, "key": key, "seen": seen,
                                  "missing": [n for n in self.names if n not in pending.parts]}
        if self.capture:
            result["parts"] = {n: pending.parts[n] for n in seen if n in self.capture}
        return result

    def _fire(self, now: int, records: list[Record]) -> None:
        timers = self.timers
        while timers and timers[0][0] <= now:
            deadline, text, started = heapq.heappop(timers)
            pending = self.pending.get(text)
            if pending is None or pending.started != started:
                continue  # completed (or restarted) before its deadline
            del self.pending[text]
            key = self.keys.pop(text, text)
            self.dirty.add(text)
            record = set_path({}, self.into, self._status("timed_out", key, pending))
            records.append((record, f"{self.id}:timeout:{text}:{started}", deadline))

    def advance(self, now_us: int, ctx: RunContext) -> Batch | None:
        return None if self.event_time else self.expire(now_us, ctx)

    def finish(self, ctx: RunContext) -> Batch | None:
        return self.expire(END_OF_TIME, ctx)

    def idle(self, by_us: int, ctx: RunContext) -> Batch | None:
        if not self.event_time or self.max_time == -END_OF_TIME:
            return None
        return self.observe(self.max_time + by_us, ctx)

    def observe(self, max_time_us: int, ctx: RunContext) -> Batch | None:
        if not self.event_time or max_time_us <= self.max_time:
            return None
        self.max_time = max_time_us
        return self.expire(max_time_us - self.config.watermark, ctx)

    def partition_texts(self, payloads: list[Payload]) -> list[str | None]:
        return match_texts(map(self.key.evaluate, payloads))

    def failing(self, payloads: list[Payload]) -> set[int]:
        failed: set[int] = set()
        for i, payload in enumerate(payloads):
            try:
                if self.key.evaluate(payload) is not None:
                    for _, cond in self.parts:
                        cond(payload)
            except FAILURES:
                failed.add(i)
        return failed


    def expire(self, now_us: int, ctx: RunContext) -> Batch | None:
        """The step's time (event or processing, whichever it runs in) is at ``now_us``: the records of the
        completions that time out by then. For engines that keep the timers themselves (Spark's, which fire on
        its watermark or its clock)."""
        records: list[Record] = []
        self._fire(now_us, records)
        return records_batch(self.id, records, ctx.clock.now_us()) if records else None

    def deadlines(self) -> list[int]:
        """When the open completions time out (µs): the timers an engine keeping them must hold."""
        return [p.deadline for p in self.pending.values()]

    def changes(self) -> dict[str, bytes | None]:
        changed: dict[str, bytes | None] = {}
        for text in self.dirty:
            p = self.pending.get(text)
            changed[f"c/{text}"] = None if p is None else orjson.dumps(
                {"key": encode_value(self.keys.get(text)), "started": p.started, "deadline": p.deadline,
                 "parts": encode_value(p.parts)})
        self.dirty.clear()
        changed["meta"] = orjson.dumps({"max_time": self.max_time})
        return changed

    def restore(self, items: Iterable[tuple[str, bytes]]) -> None:
        for name, value in items:
            data = orjson.loads(value)
            if name == "meta":
                self.max_time = data["max_time"]
            elif name.startswith("c/"):
                text = name[2:]
                self.pending[text] = _Pending(data["started"], data["deadline"], decode_value(data["parts"]))
                self.keys[text] = decode_value(data["key"])
                heapq.heappush(self.timers, (data["deadline"], text, data["started"]))

    def lookup(self, key: str) -> Any:
        for text in queried_texts(key):
            pending = self.pending.get(text)
            if pending is not None:
                return self._status("triggered", self.keys.get(text, key), pending)
        return None

    def describe(self) -> list[str]:
        c = self.config
        lines = [f"{self.head()}: join on {self.key.sql}, timeout {format_duration_us(c.timeout)} ({c.time} time)"
                 f", status into {c.into}"]
        lines += [f"part {name}: {compile_expression(cond).sql}" for name, cond in c.parts.items()]
        lines.append(f"state: store {self.store_name!r}")
        return lines
