"""Key partitions: the stateful pipelines of ``edgewise serve --workers N`` on every core.

A stateful pipeline's events are split into ``PARTITIONS`` (128) partitions by a stable hash (CRC-32) of the key of
its stateful step, written as the step keeps its state under it (``StatefulStep.partition_texts``). Worker ``i`` of
``N`` owns the partitions ``p`` with ``p % N == i``, so a change of ``--workers`` moves whole partitions and never
splits one.

Every worker reads every queued entry, in queue order, and runs each pipeline's stateless steps before its
stateful step on every event: they are cheap beside the state, and the order stays exact. The stateful step
(``PartitionedStep``) then takes only its partitions' events; the other events' times move its watermark
(``observe``) where they would have moved it with one worker, so lateness, window closes, ``within`` and time-outs
come out as with ``--workers 1``. To keep batches large, the move waits until after an event that it cannot
change (``floor_matters``: an event at or after the other partitions' largest time, in most steps).

What is not keyed belongs to the entry's own partition (from its queue number), so exactly one worker does
it: an event that passes by a ``when``, has a NULL key (``dedupe``, ``complete``) or fails the step, and whole
pipelines without state (entries go by runs of 64: ``entry_partition``). Before the stateful step, a worker that
does not own the entry runs the steps muted: nothing it does there is sent, counted, reported or dead-lettered;
the owner does that.

State is kept per partition (``part/<p>/step/<step id>/...``), with the queue position it includes
(``part/<p>/source/<queue>``), so a restart with another ``--workers`` gives each worker its partitions' state
and positions. A worker given partitions at different positions takes an entry only for the partitions that
have not seen it. A pipeline keeps at most one stateful step (a second one would see only its partitions'
results, and its watermark would lag); the daemon refuses more, naming them.
"""

from __future__ import annotations

import io
import itertools
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from edgewise.engine.context import RunContext
from edgewise.engine.guard import STEP_FAILURES, GuardedStep
from edgewise.engine.state import StateRuntime, step_prefix
from edgewise.errors import ConfigError
from edgewise.events import Batch
from edgewise.steps.stateful import END_OF_TIME, StatefulStep

if TYPE_CHECKING:
    from edgewise.config.plan import Plan
    from edgewise.engine.local import LocalEngine
    from edgewise.state import StateStore

PARTITIONS = 128


def partition_of(text: str) -> int:
    """The partition of a key, given as the step keeps its state under it."""
    return zlib.crc32(text.encode()) % PARTITIONS


ENTRY_RUN = 64
"""Entries numbered alike but for the last six bits share a partition for their own work: a worker runs a run of
them as one batch, where alternating owners would cut a lease into batches of one entry each."""


def entry_partition(seq: int) -> int:
    """The partition an entry's own work (what is not keyed) belongs to."""
    return (seq // ENTRY_RUN) % PARTITIONS


def partitions_of(index: int, workers: int) -> frozenset[int]:
    return frozenset(p for p in range(PARTITIONS) if p % workers == index)


def part_prefix(partition: int) -> str:
    return f"part/{partition}/"


def stored_partition(name: str) -> int | None:
    """The partition of a step's state entry (``w/<start>/<key>``, ``s/<key>``, ``g/<key>``, ``k/<key>``,
    ``c/<key>``); ``None`` for what every partition keeps a copy of (``meta``: the step's largest event time)."""
    if name == "meta":
        return None
    if name.startswith("w/"):
        return partition_of(name.split("/", 2)[2])
    return partition_of(name[2:])


def check_partitionable(plan: Plan) -> None:
    """Refuse, naming the steps, what several workers cannot run as one: a timeline, or a pipeline with more than
    one stateful step."""
    for pipeline in plan.pipelines:
        ordered = [s for s in pipeline.steps if s.needs_order]
        timelines = [s for s in ordered if not isinstance(s, StatefulStep)]
        if timelines:
            raise ConfigError(f"step {timelines[0].id} appends to a timeline, which needs every event in order: run "
                              "it with --workers 1")
        first = next((i for i, s in enumerate(pipeline.steps) if isinstance(s, StatefulStep)), len(pipeline.steps))
        programs = [s for s in pipeline.steps[:first] if s.kind == "spawn"]
        if programs and first < len(pipeline.steps):
            raise ConfigError(f"step {programs[0].id} runs a program before the stateful step "
                              f"{pipeline.steps[first].id}: with --workers above 1 every worker runs the steps "
                              "before it on every event, so the program would run once per worker. Move it after "
                              f"{pipeline.steps[first].id}, or run with --workers 1")
        if len(ordered) > 1:
            names = ", ".join(s.id for s in ordered)
            raise ConfigError(f"pipeline {pipeline.id} has several stateful steps ({names}): with --workers above 1 "
                              f"events are partitioned by the key of {ordered[0].id}, and {ordered[1].id} would see "
                              "only its worker's share of the results. Run it with --workers 1, or split the "
                              "pipeline in two daemons (the first sending its results to the second's http source)")


@dataclass
class Share:
    """What one worker takes of the entries it is running now (the worker sets it before each group)."""

    index: int
    workers: int
    mine: frozenset[int]
    owned: frozenset[int] = frozenset()
    """The partitions whose events this worker takes here: its own, less those whose state has these entries."""
    entries: bool = False
    """Whether the entries' own work (what is not keyed) is this worker's."""
    muted: RunContext = field(default_factory=lambda: RunContext(send=lambda sink, batch: None,
                                                                 errors=io.StringIO(), max_error_lines=0))
    """Where the steps before the stateful one run for entries another worker owns: nothing leaves it."""


PASS, STEP, FOREIGN, SKIP = range(4)
_FAILED = object()


class PartitionedStep:
    """A pipeline's stateful step on a partitioned worker (see the module docstring): its partitions' events, and
    the others' times as watermark moves, in their order."""

    def __init__(self, guarded: GuardedStep, share: Share) -> None:
        assert isinstance(guarded.step, StatefulStep)
        self.guarded = guarded
        self.step: StatefulStep = guarded.step
        self.pipeline_id = guarded.pipeline_id
        self.share = share
        self.taken = 0
        self._partitions: dict[str, int] = {}

    def counted(self, taken: int, given: int) -> tuple[int, int]:
        """What the daemon's step metrics count of the last run: the events this worker took."""
        return self.taken, given

    def run(self, batch: Batch, ctx: RunContext) -> Batch:
        segments = self._segments(batch)
        self.taken = sum(len(what) for kind, what in segments if kind != FOREIGN)
        parts: list[Batch] = []
        for kind, what in segments:
            if kind == PASS:
                parts.append(batch.take(what))
            elif kind == STEP:
                parts.append(self.guarded.run(batch.take(what), ctx))
            else:
                closed = self.step.observe(what, ctx)
                if closed is not None:
                    parts.append(closed)
        parts = [p for p in parts if len(p)]
        return Batch.concat(parts) if parts else batch.slice(0, 0)

    def _segments(self, batch: Batch) -> list[tuple[int, Any]]:
        """(PASS, indexes) to pass on as they are, (STEP, indexes) for the step, (FOREIGN, time) for a watermark
        move, in the order they must happen."""
        actions = self._actions(batch)
        times = batch.event_times
        slack = self.step.floor_slack_us
        segments: list[tuple[int, Any]] = []
        if PASS not in actions:  # the common case: is there an event the other partitions' times can change?
            foreign_times = [t if a == FOREIGN else -END_OF_TIME for a, t in zip(actions, times, strict=True)]
            floors = list(itertools.accumulate(foreign_times, max, initial=-END_OF_TIME))
            steps = [i for i, a in enumerate(actions) if a == STEP]
            if not any(floors[i] > times[i] - slack for i in steps):
                if steps:
                    segments.append((STEP, steps))
                if floors[-1] > -END_OF_TIME:
                    segments.append((FOREIGN, floors[-1]))
                return segments
        foreign = observed = -END_OF_TIME
        kind, run = -1, list[int]()
        for i, action in enumerate(actions):
            if action == SKIP:
                continue
            if action == FOREIGN:
                foreign = max(foreign, times[i])
                continue
            if action == STEP and foreign > observed and foreign > times[i] - slack:
                if run:
                    segments.append((kind, run))
                    run = []
                segments.append((FOREIGN, foreign))
                observed = foreign
            if action != kind and run:
                segments.append((kind, run))
                run = []
            kind = action
            run.append(i)
        if run:
            segments.append((kind, run))
        if foreign > observed:
            segments.append((FOREIGN, foreign))
        return segments

    def _actions(self, batch: Batch) -> list[int]:
        share = self.share
        entries = STEP if share.entries else SKIP
        payloads = batch.payloads
        when = self.guarded.when
        owned = share.owned
        if when is None:
            texts = self._texts(payloads)
            if _FAILED not in texts and None not in texts:  # the common case, without a call per event
                return [STEP if p in owned else FOREIGN for p in self._partitions_of(texts)]
            taken: list[bool | None] = [True] * len(payloads)
        else:
            taken = [True] * len(payloads)
            for i, p in enumerate(payloads):
                try:
                    taken[i] = when(p) is True
                except STEP_FAILURES:
                    taken[i] = None  # fails the step's when: its on_error, by the entry's owner
            texts = self._texts([p for p, t in zip(payloads, taken, strict=True) if t])
        actions: list[int] = []
        keyed = iter(texts)
        for t in taken:
            if t is False:
                actions.append(PASS if share.entries else SKIP)
            elif t is None:
                actions.append(entries)
            else:
                text = next(keyed)
                if text is _FAILED:
                    actions.append(entries)  # the step fails it: no time moves
                elif text is None:
                    actions.append(STEP if share.entries else FOREIGN)
                else:
                    actions.append(STEP if self._partitions_of([text])[0] in owned else FOREIGN)
        return actions

    def _partitions_of(self, texts: list[str]) -> list[int]:
        """``partition_of`` each text, remembered (keys repeat; the memory is bounded)."""
        known = self._partitions
        found = [known.get(text, -1) for text in texts]
        if -1 in found:
            if len(known) > 100_000:
                known.clear()
            for i, p in enumerate(found):
                if p == -1:
                    found[i] = known[texts[i]] = partition_of(texts[i])
        return found

    def _texts(self, payloads: list[dict[str, Any]]) -> list[Any]:
        """Each event's key text, or ``_FAILED`` where the step fails it (its key, or what it takes of it)."""
        try:
            texts: list[Any] = list(self.step.partition_texts(payloads))
        except STEP_FAILURES:
            texts = []
            for p in payloads:
                try:
                    texts.extend(self.step.partition_texts([p]))
                except STEP_FAILURES:
                    texts.append(_FAILED)
        for i in self.step.failing(payloads):
            texts[i] = _FAILED
        return texts


class MutedStep:
    """A step before the stateful one: muted for entries another worker owns (``drop``: a pipeline without state,
    whose work is all the entry owner's, gives nothing at all)."""

    def __init__(self, guarded: GuardedStep, share: Share, *, drop: bool = False) -> None:
        self.guarded = guarded
        self.step = guarded.step
        self.pipeline_id = guarded.pipeline_id
        self.share = share
        self.drop = drop

    def counted(self, taken: int, given: int) -> tuple[int, int]:
        """What the daemon's step metrics count: nothing of what ran muted (its owner counts it)."""
        return (taken, given) if self.share.entries else (0, 0)

    def run(self, batch: Batch, ctx: RunContext) -> Batch:
        if self.share.entries:
            return self.guarded.run(batch, ctx)
        if self.drop:
            return batch.slice(0, 0)
        return self.guarded.run(batch, self.share.muted)


def partition_engine(engine: LocalEngine, share: Share) -> None:
    """Make the engine's pipelines take this worker's share (``check_partitionable`` has passed)."""
    pipelines = []
    for pipeline_id, steps, targets in engine.pipelines:
        first = next((i for i, g in enumerate(steps) if isinstance(g.step, StatefulStep)), None)
        wrapped: list[Any] = []
        for i, guarded in enumerate(steps):
            if first is None:
                wrapped.append(MutedStep(guarded, share, drop=True))
            elif i < first:
                wrapped.append(MutedStep(guarded, share))
            elif i == first:
                wrapped.append(PartitionedStep(guarded, share))
            else:
                wrapped.append(guarded)
        pipelines.append((pipeline_id, wrapped, targets))
    engine.pipelines = pipelines


# -- state kept per partition --------------------------------------------------------------------------------


class PartitionedState(StateRuntime):
    """The state of a worker's partitions (``part/<p>/...`` in each store), and each one's queue position."""

    def __init__(self, plan: Plan, stores: Mapping[str, StateStore] | None, mine: frozenset[int],
                 queue_position: str) -> None:
        super().__init__(plan, stores)
        self.mine = mine
        self.queue_position = queue_position
        self.positions: dict[int, int] = dict.fromkeys(mine, 0)
        """Each partition's committed queue position: its state includes every entry up to it."""

    def open(self) -> tuple[dict[str, int], dict[str, str], dict[str, str]]:
        self.open_stores()
        default = self.stores["default"]
        for p in self.mine:
            raw = default.get(f"{part_prefix(p)}source/{self.queue_position}")
            self.positions[p] = int(raw) if raw is not None else 0
        # the step's largest event time as of the lowest position: the worker reads again from there
        lowest = min(self.mine, key=lambda p: self.positions[p])
        for step in self.steps:
            step.reset()
            store = self.stores[step.store_name]
            step.track_changes(store.durable)
            items: list[tuple[str, bytes]] = []
            for p in sorted(self.mine):
                prefix = part_prefix(p) + step_prefix(step.id)
                items += [(key[len(prefix):], value) for key, value in store.scan(prefix)
                          if key[len(prefix):] != "meta" or p == lowest]
            step.restore(items)
        return {}, {}, {}

    def commit(self, positions: Mapping[str, int], runs: Mapping[str, str], digests: Mapping[str, str],
               ended: Iterable[str] = ()) -> None:
        read = positions.get(self.queue_position, 0)
        writes = self.step_writes()
        for p in self.mine:
            self.positions[p] = max(self.positions[p], read)
            writes["default"][f"{part_prefix(p)}source/{self.queue_position}"] = str(self.positions[p]).encode()
        self.apply(writes)

    def state_keys(self, step: StatefulStep, name: str) -> Iterable[str]:
        """A key's entry under its partition; an entry of no key (the step's ``meta``) under each of the worker's."""
        partition = stored_partition(name)
        return [f"{part_prefix(p)}{step_prefix(step.id)}{name}" for p in (self.mine if partition is None
                                                                          else (partition,))]


def stored_state(store: StateStore, step_id: str) -> list[tuple[str, bytes]]:
    """A step's committed state entries (name, value) in either layout: kept by one worker (``step/<id>/...``) or
    per partition (``part/<p>/step/<id>/...``, each partition's ``meta`` copy once)."""
    mine = step_prefix(step_id)
    rows = [(key[len(mine):], value) for key, value in store.scan(mine)]
    seen_meta = False
    for p in range(PARTITIONS):
        prefix = part_prefix(p) + step_prefix(step_id)
        for key, value in store.scan(prefix):
            name = key[len(prefix):]
            if name == "meta":
                if seen_meta:
                    continue
                seen_meta = True
            rows.append((name, value))
    return rows


def partitioned_layout(stores: Mapping[str, StateStore]) -> bool:
    """Whether state was kept per partition (a daemon that ran with several workers)."""
    return any(True for store in stores.values() for _ in store.scan("part/"))


def move_to_partitions(plan: Plan, stores: Mapping[str, StateStore], queue_position: str) -> int:
    """Move the state one worker kept (``step/<id>/...``, and the queue position) into the partitions, each key
    to its own and ``meta`` and the position to every one. Returns how many entries moved."""
    moved = 0
    for store_name, store in stores.items():
        writes: dict[str, bytes | None] = {}
        for step in plan.stateful_steps():
            if step.store_name != store_name:
                continue
            prefix = step_prefix(step.id)
            for key, value in store.scan(prefix):
                name = key[len(prefix):]
                partition = stored_partition(name)
                for p in range(PARTITIONS) if partition is None else (partition,):
                    writes[part_prefix(p) + step_prefix(step.id) + name] = value
                writes[key] = None
                moved += 1
        position = store.get(f"source/{queue_position}")
        if position is not None:
            for p in range(PARTITIONS):
                writes[f"{part_prefix(p)}source/{queue_position}"] = position
            writes[f"source/{queue_position}"] = None
        if writes:
            store.apply(writes)
    return moved
