"""What stateful steps (``aggregate``, ``window``, ``dedupe``, ``complete``) share.

A stateful step keeps its working state in memory, as plain dicts, so an event costs a dict lookup and not a
store round trip. The engine makes it durable: after each input batch it asks every stateful step for the keys
it changed (``changes``) and commits them, together with the input position, in one store transaction; on start
it gives the step back what was committed (``restore``). A killed run therefore resumes from its last commit and
replays the events after it; results carry deterministic ids, so an idempotent sink sees each result once.

An event that fails (its key or an aggregate's argument does not evaluate, a sum overflows) changes no state:
a step evaluates everything a batch needs before it changes anything, and where that fails it evaluates event
by event, processes the others and raises ``EventsFailed`` for the failed ones (``fail_some``). The engine then
applies ``on_error`` to those alone; it never re-runs a stateful step on events it already counted.

Time never comes from the wall clock here. Event-time logic reads each event's time from the batch; a step's
watermark is the largest event time it has seen minus its ``watermark`` delay. Processing-time timers are driven
by the engine through ``advance(now_us)`` with its injected clock. ``finish`` is called when the input ends
(command mode): the watermark moves to the end of time and everything still open is flushed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

import orjson

from edgewise.config.models import Expr, StepConfig
from edgewise.declare import Field
from edgewise.errors import EvalError, EventsFailed, StepError
from edgewise.events import Batch, KeyedRows, Payload
from edgewise.expr.compiler import compile_expression
from edgewise.steps.aggs import Aggregates
from edgewise.steps.base import Step
from edgewise.steps.group_keys import all_as_is, group_key, plain, single_keys
from edgewise.steps.state_values import encode_value

if TYPE_CHECKING:
    from edgewise.engine.context import RunContext

END_OF_TIME = 2**62
"""The watermark after the input ended: later than any event time."""

_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class StatefulConfig(StepConfig):
    """Fields every stateful step has."""

    store: str = Field(default="default", description="the state store (a name under the file's `state:`) that keeps "
                       "this step's state; without a `state:` section state is kept in memory only")


class KeyColumns:
    """A grouping key: expressions and the names their values get in results.

    ``[cell, veh]`` names the columns ``cell`` and ``veh`` (a nested path names its last part, as Spark does);
    ``{vehicle: "concat(oper, '/', veh)"}`` names them explicitly.
    """

    def __init__(self, key: list[str] | dict[str, str]) -> None:
        items = key.items() if isinstance(key, dict) else [(_column_name(text), text) for text in key]
        self.names = [name for name, _ in items]
        self.texts = [text for _, text in items]
        self.evaluators = [compile_expression(text).evaluate for _, text in items]
        self.sql = [compile_expression(text).sql for _, text in items]

    def of(self, payload: Payload) -> tuple[Any, ...]:
        """A payload's key, as a group (``group_keys``: equal exactly when SQL's GROUP BY puts two together)."""
        return group_key(tuple(fn(payload) for fn in self.evaluators))

    def many(self, payloads: list[Payload]) -> list[tuple[Any, ...]]:
        """The keys of a batch of payloads (one field, the common case, without a call per event)."""
        if len(self.evaluators) == 1:
            fn = self.evaluators[0]
            name = getattr(fn, "field_name", None)
            if name is not None:
                return single_keys([(p.get(name),) for p in payloads])
            return single_keys([(fn(p),) for p in payloads])
        return [self.of(p) for p in payloads]

    def field_names(self) -> list[str] | None:
        """The top-level field each key expression reads, where each is no more than that; else None."""
        names = [getattr(fn, "field_name", None) for fn in self.evaluators]
        return None if None in names else [name for name in names if name is not None]

    def of_values(self, values: list[Any], rows: list[Any] | None) -> KeyedRows:
        """The keys of events whose key fields (``field_names``) hold ``values`` (one per event: the field's value
        for a one-field key, a tuple of them otherwise), what ``many`` gives for them, with their ``rows``."""
        if len(self.evaluators) == 1:
            if all_as_is(values):
                return KeyedRows(None, rows, values)
            return KeyedRows(single_keys(list(zip(values))), rows)
        return KeyedRows([group_key(v) for v in values], rows)

    def describe(self) -> str:
        return ", ".join(f"{n} = {s}" for n, s in zip(self.names, self.sql, strict=True)) or "(all)"

    def fields(self, key: tuple[Any, ...]) -> dict[str, Any]:
        return dict(zip(self.names, plain(key), strict=True))


def key_texts(keys: KeyColumns, payloads: list[Payload], known: dict[Any, str]) -> list[str | None]:
    """Each payload's key as ``key_text`` writes it (the name its state is kept under), computed once per key and
    remembered in ``known`` (cleared when it grows large)."""
    if len(known) > 100_000:
        known.clear()
    out: list[str | None] = []
    for key in keys.many(payloads):
        text = known.get(key)
        if text is None:
            text = known[key] = key_text(key)
        out.append(text)
    return out


def argument_failures(aggs: Aggregates, payloads: list[Payload]) -> set[int]:
    """The payloads whose aggregate arguments fail to evaluate or to add to fresh accumulators (``sum`` of text
    that is not a number); an overflow or a comparison with what a group already holds is not seen here."""
    failed: set[int] = set()
    if aggs.has_arguments:
        for i, payload in enumerate(payloads):
            try:
                aggs.added(aggs.init(), aggs.row(payload))
            except FAILURES:
                failed.add(i)
    return failed


def _column_name(text: str) -> str:
    return text.rsplit(".", 1)[-1].strip("`") if _PATH.match(text.strip()) else text


def key_text(key: Any) -> str:
    """A key as compact JSON: the state-store key part and the result id part."""
    key = plain(key)
    return orjson.dumps(encode_value(list(key) if isinstance(key, tuple) else key)).decode()


class StatefulStep(Step):
    """A step with state the engine commits and restores. See the module docstring for the protocol."""

    config: StatefulConfig
    needs_order: ClassVar[bool] = True
    expires_before_rows: ClassVar[bool] = True
    """On Spark (``engine/spark/keyed_processor.py``): what the watermark has passed expires before a micro-batch's
    rows run, as locally time moves after every event (a completion times out before the events after its
    deadline). A step whose forgetting must wait for its timers says False (``forget_on_timers``)."""

    def __init__(self, config: StatefulConfig) -> None:
        super().__init__(config)
        self.store_name = config.store
        self.dirty: set[Any] = set()
        """Keys changed since the last ``changes()``; not kept when the store is not durable."""

    def track_changes(self, enabled: bool) -> None:
        """The engine turns change tracking off for stores that are never committed (memory)."""
        self.dirty = set() if enabled else _Untracked()

    @property
    def tracked_add(self) -> Callable[[Any], None] | None:
        """``dirty.add`` where changes are tracked; None where they are not (a hot loop then skips the call)."""
        return None if isinstance(self.dirty, _Untracked) else self.dirty.add

    def reset(self) -> None:
        """Forget all state. The engine calls it on open, before ``restore``: a plan's steps hold the state of
        the engine that opened them last (a restarted engine must not see the previous one's memory)."""

    def restore(self, items: Iterable[tuple[str, bytes]]) -> None:
        """Load committed state (keys relative to this step's prefix). Called once, before the first batch."""

    def changes(self) -> dict[str, bytes | None]:
        """Keys changed since the last call, with their new values (``None``: deleted)."""
        return {}

    def forget_on_timers(self) -> None:
        """On Spark: forget state only when ``expire`` says (a timer fired), not by the step's own event times."""

    def advance(self, now_us: int, ctx: RunContext) -> Batch | None:
        """Processing time moved to ``now_us``: records of timers that fired (``None`` when nothing fired)."""
        return None

    def finish(self, ctx: RunContext) -> Batch | None:
        """The input ended: flush what is still open (windows, pending completions)."""
        return None

    def idle(self, by_us: int, ctx: RunContext) -> Batch | None:
        """Every source has been idle: event time moves on by ``by_us`` with no event (``engine/idle.py``). An
        event-time step moves its watermark and gives what that closes."""
        return None

    def lookup(self, key: str) -> Any:
        """Queryable state: what the step holds for one key (its JSON form), or ``None``."""
        return None

    # -- partitioned workers (``engine/partitions.py``) -------------------------------------------------------

    def partition_texts(self, payloads: list[Payload]) -> list[str | None]:
        """Each event's key as the step keeps its state under it (``None``: the event touches no keyed state, as
        a NULL key in ``dedupe``). Raises as the step does for an event whose key fails."""
        raise NotImplementedError(f"step {self.id} cannot be partitioned")

    def failing(self, payloads: list[Payload]) -> set[int]:
        """The events (by position) whose key is fine but that the step fails as it takes them, whatever its state
        (an aggregate's argument that is not a number): they move no event time."""
        return set()

    def observe(self, max_time_us: int, ctx: RunContext) -> Batch | None:
        """Events of other partitions moved the largest event time to ``max_time_us``: move the watermark as they
        would have, and give what that closes."""
        return None

    floor_slack_us: int = 2 * END_OF_TIME
    """An event at ``t`` can be taken differently once other partitions' events moved the largest event time to
    ``floor`` than before only where ``floor > t - floor_slack_us``; elsewhere the move waits until after the event
    (fewer, larger batches). By default always; a step that knows better says so (0: only a floor after the
    event; ``-END_OF_TIME``: never)."""


class _Untracked(set[Any]):
    """A set that stays empty: change tracking switched off."""

    def add(self, item: Any) -> None:
        pass


FAILURES = (EvalError, StepError)

Failures = dict[int, EvalError | StepError]
"""Failed events of a batch: position in the batch -> error."""


def evaluate_each(payloads: list[Payload], evaluate: Any) -> tuple[list[Any], Failures]:
    """``evaluate(payload)`` for each payload, with the failures apart (their value is ``None``)."""
    values: list[Any] = []
    failures: Failures = {}
    for i, payload in enumerate(payloads):
        try:
            values.append(evaluate(payload))
        except FAILURES as exc:
            values.append(None)
            failures[i] = exc
    return values, failures


def keys_and_rows(keys: KeyColumns, aggs: Aggregates, payloads: list[Payload]
                  ) -> tuple[list[tuple[Any, ...]], list[list[Any]] | None, Failures]:
    """Each payload's group key and aggregate arguments, evaluated before any state changes: for the whole batch
    at once, or, where that fails, event by event with the failed events apart (key ``()``, no arguments)."""
    try:
        return keys.many(payloads), aggs.rows(payloads), {}
    except FAILURES:
        inputs, failures = evaluate_each(payloads, lambda p: (keys.of(p), aggs.row(p)))
    rows = [x[1] if x is not None else [] for x in inputs] if aggs.has_arguments else None
    return [x[0] if x is not None else () for x in inputs], rows, failures


def fail_some(output: Batch, failures: Failures) -> Batch:
    """``output``, or ``EventsFailed`` with it when some events failed (see the module docstring)."""
    if failures:
        raise EventsFailed(output, dict(sorted(failures.items())))
    return output


Record = tuple[Payload, str, int]
"""A record a step makes itself (a window result, a timeout): payload, id, event time."""


def records_batch(source: str, records: list[Record], ingest_time_us: int) -> Batch:
    return Batch([r for r, _, _ in records], source=source, ingest_time_us=ingest_time_us,
                 event_times=[t for _, _, t in records], ids=[i for _, i, _ in records])


KeySpec = list[Expr] | dict[str, Expr]
