"""The keyed steps' operators on Spark (``keyed.py``): one call per hash bucket of the step's key and micro-batch,
running the local step over the bucket's rows with the bucket's state.

``BucketStep`` is that work, whichever of Spark's two Python state APIs calls it:

- ``GroupStateFunction``, the function of ``applyInPandasWithState``: Spark hands it the bucket's state (a
  ``GroupState``) with its rows and keeps one timeout per group. Where a keyed step is its query's only stateful
  operator (``keyed.group_state_allowed``), and the checkpoint was started with it, this is the operator: cheaper
  than the other for the same work (BENCHMARKS.md, "Which Python state API"), as Spark plans it without running
  Python and no state call is a round trip to the JVM.
- ``LocalStepProcessor``, the ``transformWithStateInPandas`` processor: Spark lets it follow and precede other
  stateful operators (a window, another keyed step), which it refuses ``applyInPandasWithState``; and checkpoints
  started before the other existed keep it. Spark runs its ``init`` in a Python process of its own on the driver
  when it plans the query (to learn the state variables).

Both run on every executor's Python worker. So this module imports nothing heavy at its top, and the step (whose
modules load the expression compiler and the config models) is built at the first rows or timer, from its pickled
class and config: planning does not pay for edgewise's imports.
"""

from __future__ import annotations

import base64
import pickle
import re
from collections.abc import Iterator
from typing import Any

import orjson
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from edgewise import collector
from edgewise.engine.spark.local_steps import Row, batch_rows, run_local_step
from edgewise.events import equal_runs

OUTPUT = "id STRING, event_us BIGINT, source STRING, payload STRING, route STRING, record STRING"
OUTPUT_COLUMNS = ["id", "event_us", "source", "payload", "route", "record"]
"""What the operator takes in (after the group's column) and gives out: ``local_steps.Row``."""

ROUTED_GROUP = "routed:"
"""The start of the groups routed rows pass the operator in (they hold no state); no bucket's name starts so."""

STATE = "bucket"
"""The processor's one state variable: a bucket's items (the local step's state of the bucket's keys), as JSON of
name -> base64 value, and the bucket's timer (ms), which is kept here so that it need not be listed from the JVM."""
STATE_SCHEMA = "items STRING, timer BIGINT"
"""The bucket's state, in either operator (``GroupStateFunction`` keeps no timer in it: Spark keeps its timeout)."""

EVENT_TIME, PROCESSING_TIME, NO_TIME = "EventTime", "ProcessingTime", "None"
"""``transformWithState`` time modes: which clock a step's timers run on."""

_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[Any, ...]:
    """``test:10`` after ``test:9``: the digit runs of an id compared as numbers (ids count events up).

    Ids are mostly a prefix shared by many (``source:file:``) and a number: the prefix's key is computed once
    (``_PREFIXES``) and the number appended, which is the same tuple (splitting ``prefix + digits`` at its digit runs
    gives the prefix's parts, the digits and an empty tail) at a fifth of the cost."""
    prefix = text.rstrip("0123456789")
    head = _PREFIXES.get(prefix)
    if head is None:
        if len(_PREFIXES) > 10_000:
            _PREFIXES.clear()
        head = _PREFIXES[prefix] = tuple(int(p) if p.isdigit() else p for p in _DIGITS.split(prefix))
    return (*head, int(text[len(prefix):]), "") if len(prefix) < len(text) else head


_PREFIXES: dict[str, tuple[Any, ...]] = {}


def in_event_time_order(times: list[int], ids: list[str]) -> list[int]:
    """The positions of rows by event time, then by id (``natural_key``, taken only where times tie)."""
    order = sorted(range(len(times)), key=times.__getitem__)
    for start, end in equal_runs([times[i] for i in order]):
        if end - start > 1:
            order[start:end] = sorted(order[start:end], key=lambda i: natural_key(ids[i]))
    return order


def _ceil_ms(us: int) -> int:
    return -(-us // 1000)


def _rows_frame(rows: list[Row]) -> Any:
    import pandas as pd

    return pd.DataFrame.from_records(rows, columns=OUTPUT_COLUMNS)


class BucketStep:
    """The local step over one bucket's rows and state in one call of a keyed operator; the operators adapt Spark's
    API to it (``LocalStepProcessor``, ``GroupStateFunction``)."""

    def __init__(self, step_class: Any, config: Any, base_dir: str, pipeline_id: str, now_us: int | None,
                 time_mode: str, makers: frozenset[str] = frozenset()) -> None:
        self.step_blob = pickle.dumps((step_class, config))
        """The step's class and config, unpickled where the step is built (``_built``)."""
        self.base_dir = base_dir
        self.pipeline_id = pipeline_id
        self.makers = makers
        """The ``source`` of the records the pipeline's steps make (their ids, and the pipeline's for a window's
        results on Spark): a completion's timeout, a window's result."""
        self.now_us = now_us
        """The test clock (None: Spark's micro-batch time)."""
        self.time_mode = time_mode
        self.step: Any = None

    def _built(self) -> Any:
        if self.step is None:
            from edgewise.config import BuildContext
            from edgewise.engine.guard import GuardedStep

            step_class, config = pickle.loads(self.step_blob)  # noqa: S301  # pickled by this job's driver
            self.step = step_class.from_config(config, BuildContext(self.base_dir))
            self.step.track_changes(True)
            self.step.forget_on_timers()
            self.guarded = GuardedStep(self.step, self.pipeline_id)
        return self.step

    def _input_rows(self, frames: list[Any], now: int | None, clock: Any) -> list[Row]:
        """The bucket's rows of the micro-batch through the step (restored first), which first expires what time
        (``now``: the watermark or the processing clock; None without timers) has passed."""
        frame = _one_frame(frames)
        times = frame["event_us"].tolist()
        order = in_event_time_order(times, frame["id"].tolist())
        frame = frame.iloc[order]
        times = [times[i] for i in order]
        out: list[Row] = []
        if now is not None:
            if self.step.expires_before_rows:  # what time passed comes out before these events
                out += self._expire(now, clock)
            else:
                # Records an earlier step made as this micro-batch's watermark passed their time (a timeout, a
                # window's result) came, locally, before the event that moved time on, when the step had forgotten
                # nothing around their time: they run before the watermark forgets anything (``forget_on_timers``)
                sources = frame["source"].tolist()
                made = [i for i, (source, t) in enumerate(zip(sources, times, strict=True))
                        if t < now and source in self.makers]
                if made:
                    out += self._run(frame.iloc[made], [times[i] for i in made], clock)
                    rest = sorted(set(range(len(times))) - set(made))
                    frame, times = frame.iloc[rest], [times[i] for i in rest]
                out += self._expire(now, clock)
        out += self._run(frame, times, clock)
        return out

    def _run(self, frame: Any, times: list[int], clock: Any) -> list[Row]:
        """Rows (in event-time order) through the step."""
        out: list[Row] = []
        # a local batch holds one source's events; in event-time order a bucket's can alternate between sources
        for start, end in equal_runs(frame["source"].tolist()):
            out += run_local_step(self.guarded, frame.iloc[start:end], "payload", clock, times[start:end])
        return out

    def _clock_at(self, batch_ms: int) -> Any:
        """The clock of the local step: the micro-batch's time (recorded in the offset log, so a replayed
        micro-batch sees the same time), or the fixed test clock; where Spark gives no batch time (-1), the system
        clock stands in (it dates dead letters)."""
        from edgewise.clock import FakeClock, SystemClock

        if self.now_us is not None:
            return FakeClock(self.now_us)
        return FakeClock(batch_ms * 1000) if batch_ms >= 0 else SystemClock()

    def _expire(self, now: int, clock: Any) -> list[Row]:
        from edgewise.engine.context import RunContext

        fired = self.step.expire(now, RunContext(clock=clock))
        return batch_rows([("", fired)]) if fired is not None else []

    def _restore(self, stored: tuple[Any, ...] | None) -> None:
        """The step with the bucket's state (``stored``: the state value, None where the bucket has none)."""
        step = self._built()
        step.reset()
        self.items: dict[str, str] = {}
        if stored is not None:
            self.items = orjson.loads(stored[0])
            step.restore((name, base64.b64decode(value)) for name, value in self.items.items())

    def _saved_items(self) -> str | None:
        """The bucket's items with what the step changed, as its state keeps them (JSON); None where it keeps
        none: the adapter then removes the bucket's state."""
        items = self.items
        for name, value in self.step.changes().items():
            if value is None:
                items.pop(name, None)
            else:
                items[name] = base64.b64encode(value).decode()
        return orjson.dumps(items).decode() if items else None

    def _earliest_deadline_ms(self) -> int | None:
        """The bucket's timer: its earliest deadline (Spark's timers are in milliseconds); when it fires,
        everything the time passed expires, and the timer moves to the next deadline."""
        deadlines = self.step.deadlines()
        return _ceil_ms(min(deadlines)) if deadlines else None


class LocalStepProcessor(BucketStep, StatefulProcessor):
    """``BucketStep`` as a ``transformWithStateInPandas`` processor: its state one ValueState, its timer one
    registered timer, both through the processor's handle."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState(STATE, STATE_SCHEMA)

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
        with collector.paused():  # a bucket's call makes many small containers (collector.py)
            frames = list(rows)
            if str(key[0]).startswith(ROUTED_GROUP):  # rows for sinks pass unchanged (``keyed._run_keyed``)
                out = _passed(frames)
            else:
                self._restore_state(fired=False)
                clock = self._clock(timerValues)
                now = self._now(timerValues) if self.time_mode != NO_TIME else None
                rows_out = self._input_rows(frames, now, clock)
                self._save()
                out = _rows_frame(rows_out) if rows_out else None
        if out is not None:
            yield out

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
        with collector.paused():  # a bucket's call makes many small containers (collector.py)
            self._restore_state(fired=True)
            # the timer fired: Spark's time passed it (even where a fixed test clock says otherwise)
            now = max(self._now(timerValues), expiredTimerInfo.getExpiryTimeInMs() * 1000)
            out = self._expire(now, self._clock(timerValues))
            self._save()
            frame = _rows_frame(out) if out else None
        if frame is not None:
            yield frame

    def _now(self, timer_values: Any) -> int:
        """The step's time: the watermark (event time) or the clock's (processing time)."""
        if self.time_mode == EVENT_TIME:
            return int(timer_values.getCurrentWatermarkInMs()) * 1000
        return int(self._clock(timer_values).now_us())

    def _clock(self, timer_values: Any) -> Any:
        # without timers Spark gives no batch time (-1)
        return self._clock_at(int(timer_values.getCurrentProcessingTimeInMs()))

    def _restore_state(self, fired: bool) -> None:
        """The bucket's state (each call of the state store is a round trip to the JVM: one); ``fired``: the
        bucket's timer fired (Spark deleted it)."""
        self.fired = fired
        stored = self.state.get()
        self.timer: int | None = stored[1] if stored is not None else None
        self._restore(stored)

    def _save(self) -> None:
        saved = self._saved_items()
        timer = self._set_timer() if self.time_mode != NO_TIME else None
        if saved is not None:
            self.state.update((saved, timer))
        else:
            self.state.clear()

    def _set_timer(self) -> int | None:
        """One timer per bucket, at its earliest deadline. A timer that fired is gone (Spark deletes it)."""
        wanted = self._earliest_deadline_ms()
        held = None if self.fired else self.timer
        if wanted != held:
            if held is not None:
                self.handle.deleteTimer(held)
            if wanted is not None:
                self.handle.registerTimer(wanted)
        return wanted

    def close(self) -> None:
        pass


GROUP_STATE_TIMEOUTS = {EVENT_TIME: "EventTimeTimeout", PROCESSING_TIME: "ProcessingTimeTimeout",
                        NO_TIME: "NoTimeout"}
"""``applyInPandasWithState``'s timeout for each time mode (``GroupStateTimeout``'s values)."""


class GroupStateFunction(BucketStep):
    """``BucketStep`` as the function of ``applyInPandasWithState``: Spark gives each call the bucket's state (a
    ``GroupState``) with its rows, and keeps one timeout per bucket, which a call sets again each time (Spark keeps
    only what the last call set). Spark calls a bucket whose timeout time has passed (the watermark, or the
    micro-batch's time, is past it: the same strict test as ``transformWithState``'s timers) with no rows, in the
    micro-batch after the one that moved time past it, unless the bucket has rows in that micro-batch: their call
    expires what time has passed first, as ``LocalStepProcessor``'s does."""

    def __call__(self, key: Any, frames: Iterator[Any], state: Any) -> Iterator[Any]:
        with collector.paused():  # a bucket's call makes many small containers (collector.py)
            out = self._call(key, list(frames), state)
        if out is not None:
            yield out

    def _call(self, key: Any, frames: list[Any], state: Any) -> Any:
        if str(key[0]).startswith(ROUTED_GROUP):  # rows for sinks pass unchanged (``keyed._run_keyed``)
            return _passed(frames)
        self._restore(state.getOption)
        clock = self._clock_at(int(state.getCurrentProcessingTimeMs()))
        now = self._now(state, clock)
        if state.hasTimedOut:
            # the timeout fired: Spark's time passed it (even where a fixed test clock says otherwise)
            out = self._expire(max(now or 0, state.oldTimeoutTimestamp * 1000), clock)
        else:
            out = self._input_rows(frames, now, clock)
        saved = self._saved_items()
        if saved is not None:
            state.update((saved, None))
            self._set_timeout(state)
        else:
            state.remove()
        return _rows_frame(out) if out else None

    def _now(self, state: Any, clock: Any) -> int | None:
        """The step's time: the watermark (event time) or the clock's (processing time); None without timers."""
        if self.time_mode == EVENT_TIME:
            return int(state.getCurrentWatermarkMs()) * 1000
        if self.time_mode == PROCESSING_TIME:
            return int(clock.now_us())
        return None

    def _set_timeout(self, state: Any) -> None:
        wanted = self._earliest_deadline_ms() if self.time_mode != NO_TIME else None
        if wanted is None:
            return
        if self.time_mode == EVENT_TIME:
            # Spark takes no timeout behind the watermark (the call expired what the watermark passed) and none at
            # or before the epoch: such a deadline times out as the watermark next moves, as a timer behind it would
            state.setTimeoutTimestamp(max(wanted, int(state.getCurrentWatermarkMs()), 1))
        else:  # a duration from the micro-batch's time, Spark's processing clock
            state.setTimeoutDuration(max(wanted - int(state.getCurrentProcessingTimeMs()), 1))


def _passed(frames: list[Any]) -> Any:
    """A routed group's rows, unchanged."""
    return _one_frame(frames)[OUTPUT_COLUMNS]


def _one_frame(frames: list[Any]) -> Any:
    """A group's rows, which Spark hands over in Arrow batches, as one pandas frame."""
    import pandas as pd

    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
