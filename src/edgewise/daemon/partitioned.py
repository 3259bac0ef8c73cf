"""A partitioned worker: one of ``edgewise serve --workers N`` running pipelines with stateful steps.

It reads every queued entry in order (no lease: every worker reads every entry) and takes its share of each
(``engine/partitions.py``): the events of its partitions' keys, the watermark moves of the others, and the work
of the entries whose own partition it owns. Every ``commit_interval`` it flushes its sinks, commits its
partitions' state with the queue position it includes, and then records in the queue that its partitions have
delivered up to that entry; an entry is removed once every partition has. A crash anywhere before that record
leaves the entries in the queue, and the restarted worker reads them again from its partitions' committed
positions: state never counts an entry twice, and sinks see results again with the same ids (at-least-once).

A sink that still fails after its retries stops the worker rather than dead-lettering the batch (its events
belong to other workers too): the daemon starts it again, and it resumes from its last commit, the events
waiting in the queue meanwhile. A sink's own ``on_error`` still dead-letters what it could not take.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from edgewise.config.plan import Plan
from edgewise.daemon.queue import Entry, QueueReader
from edgewise.daemon.worker import QUEUE_POSITION, Worker, WorkerOptions, daemon_stores
from edgewise.engine.partitions import (
    PARTITIONS,
    PartitionedState,
    Share,
    entry_partition,
    move_to_partitions,
    partition_engine,
    partitioned_layout,
    partitions_of,
)
from edgewise.engine.state import StateRuntime
from edgewise.errors import SinkError
from edgewise.sinks.base import LivePublisher
from edgewise.state import StateStore


class SinkDown(Exception):
    """A sink still failed after its retries: the worker stops, to resume from its last commit."""


class PartitionedWorker(Worker):
    def __init__(self, plan: Plan, options: WorkerOptions, queue: QueueReader,
                 stores: Mapping[str, StateStore] | None = None, live: LivePublisher | None = None) -> None:
        stores = dict(stores) if stores is not None else daemon_stores(plan, options.data_dir)
        self.share = Share(options.index, options.workers, partitions_of(options.index, options.workers))
        self.state = PartitionedState(plan, stores, self.share.mine, QUEUE_POSITION)
        super().__init__(plan, options, queue, stores, live, self.state)
        partition_engine(self.engine, self.share)
        self.read_upto = 0
        """The last entry read (and processed)."""
        self._lag: tuple[int, int] = (0, 0)

    def open(self) -> None:
        self.engine.open()
        marks = self.queue.partition_marks()
        positions = self.state.positions
        for p in self.share.mine:  # an entry a partition's mark passed is gone, whatever state was lost with it
            positions[p] = max(positions[p], marks.get(p, 0))
        self.read_upto = min(positions.values())
        self._last_appended = self.queue.last_appended()

    def _take(self) -> list[Entry]:
        return self.queue.read_after(self.read_upto, self.options.max_batch)

    def _process(self, entries: list[Entry]) -> None:
        positions, mine = self.state.positions, self.share.mine
        ahead = max(positions.values())  # past it every partition of this worker takes every entry
        group: list[Entry] = []
        current: tuple[str, frozenset[int], bool] | None = None
        for entry in entries:
            seq = entry.seq
            owned = mine if seq > ahead else frozenset(p for p in mine if positions[p] < seq)
            own = entry_partition(seq)
            share = (entry.source, owned, own in owned)
            if group and share != current:
                self._run_share(group, current)
                group = []
            current = share
            group.append(entry)
        if group:
            self._run_share(group, current)
        self.pending.extend(entries)
        self.read_upto = entries[-1].seq
        self.engine.positions[QUEUE_POSITION] = self.read_upto

    def _run_share(self, entries: list[Entry], share: tuple[str, frozenset[int], bool] | None) -> None:
        assert share is not None
        self.share.owned, self.share.entries = share[1], share[2]
        self.engine.reports_input = share[2]  # every worker reads the entry: its owner reports what is wrong in it
        self._run(entries)

    def _sink_failed(self, exc: SinkError, letters_before: int) -> None:
        raise SinkDown(str(exc)) from exc

    def _acknowledge(self) -> int:
        if not self.engine.state.durable:  # the positions move here; a durable state's commit moved them already
            for p in self.share.mine:
                self.state.positions[p] = max(self.state.positions[p], self.read_upto)
        self.queue.delivered({p: self.state.positions[p] for p in self.share.mine}, self.letters)
        # every worker reads every entry: each counts the events of the entries whose own work is its own
        return sum(e.count for e in self.pending if entry_partition(e.seq) in self.share.mine)

    def snapshot(self) -> dict[str, object]:
        if not self.stopping:  # the last snapshot, after close, keeps the lag it had
            self._lag = self.queue.waiting_after(self.read_upto)
        # its partitions are the daemon's assignment (``partitions_of``), which /v1/queue shows without asking
        return {**super().snapshot(), "position": self.read_upto,
                "lag_entries": self._lag[0], "lag_events": self._lag[1]}


def prepare_partitions(plan: Plan, data_dir: str, workers: int, log: Callable[..., None]) -> bool:
    """Whether the workers run partitioned: stateful pipelines over several workers, or state already kept per
    partition (it stays so, whatever ``--workers`` says next). The first time, the state one worker kept moves
    into the partitions."""
    if not plan.stateful_steps():
        return False
    given = daemon_stores(plan, data_dir)
    runtime = StateRuntime(plan, given)
    runtime.open_stores()
    try:
        if partitioned_layout(runtime.stores):
            return True
        if workers == 1:
            return False
        moved = move_to_partitions(plan, runtime.stores, QUEUE_POSITION)
        if moved:
            log("state-partitioned", entries=moved, partitions=PARTITIONS)
        return True
    finally:
        runtime.close()
        for store in given.values():
            store.close()
