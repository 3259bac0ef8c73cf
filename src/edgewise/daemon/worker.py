"""A worker: leases entries from the durable queue, runs the pipelines over their events, and acknowledges them
once every pipeline and sink has taken them.

Workers run as processes of their own (``edgewise serve --workers N``), so the pipelines use other cores than
the HTTP server. Each worker batches: it leases up to ``max_batch`` events, runs them, and every
``commit_interval`` flushes its sinks (a file sink seals its segment), commits the state of stateful steps (with
the last queue position they include, so a restarted worker never counts an entry into its state twice) and then
deletes the entries from the queue. A crash anywhere before that delete leaves the entries in flight, and the
daemon gives them to a worker again: at-least-once, with stable event ids for idempotent sinks.

Where events end up when something fails:
- a step with ``on_error: fail`` → the queue's dead letters (location ``step:<pipeline>/<step>``);
- a sink still failing after its retries (and without ``on_error: <sink>``) → every event of that batch goes to
  the dead letters (location ``sink``); ``edgewise replay-dead-letters`` queues them again with their ids.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import orjson

from edgewise.config.plan import Plan
from edgewise.daemon.bodies import decode_body
from edgewise.daemon.queue import Entry, QueueReader, queue_path
from edgewise.daemon.telemetry import StepMeter, make_tracer
from edgewise.engine.local import LocalEngine
from edgewise.engine.state import StateRuntime
from edgewise.errors import SinkError
from edgewise.events import Batch
from edgewise.sinks.base import LivePublisher
from edgewise.state import StateStore
from edgewise.tracecontext import parent_of

QUEUE_POSITION = "<queue>"
"""The position key under which stateful workers commit the last queue entry their state includes."""

Letter = tuple[str, str, bytes, int, str, str]


@dataclass(frozen=True)
class WorkerOptions:
    pipeline_file: str
    pipeline_text: str
    base_dir: str
    data_dir: str
    index: int = 0
    max_batch: int = 4096
    commit_interval: float = 0.5
    idle_wait: float = 0.01
    stats_interval: float = 0.5
    trace: str = "off"
    nice: int = 0
    """Added to the worker process's nice value at start (``--worker-nice``): the server's ingest comes first."""
    workers: int = 1
    partitioned: bool = False
    """Stateful pipelines over several workers: each takes its partitions of every entry (``partitioned.py``)."""


def daemon_stores(plan: Plan, data_dir: str) -> dict[str, StateStore]:
    """Without a ``state:`` section, the daemon keeps stateful steps' state in ``<data dir>/state.db`` (SQLite)
    rather than in memory: a restarted daemon continues its windows instead of starting them over."""
    if plan.stores or not plan.stateful_steps():
        return {}
    from edgewise.state.sqlite import SqliteStore

    return {"default": SqliteStore(os.path.join(data_dir, "state.db"))}


DEFAULT_IDLE_TIMEOUT_US = 30_000_000


def idle_timeouts(plan: Plan) -> dict[str, int | None]:
    """Each source's ``idle_timeout`` in the daemon: its own, else 30 s; 0 is never (``engine/idle.py``)."""
    declared: dict[str, int | None] = {s.id: s.idle_timeout for s in plan.sources}
    if not any(s.type == "http" for s in plan.sources):
        declared["http"] = None  # the open source a daemon without http sources has
    return {sid: DEFAULT_IDLE_TIMEOUT_US if t is None else (t or None) for sid, t in declared.items()}


def entry_batch(entry: Entry) -> Batch:
    """A queue entry's events. From a mesh peer they keep what the origin knew (``bodies.py``): its source, its
    ingest time and each event's time, so a window here gives what it gave there."""
    payloads = decode_body(entry.kind, entry.body, entry.meta)
    origin = (entry.meta or {}).get("origin") or {}
    ingest_us = origin.get("ingest_time", entry.ingest_us)
    times = origin.get("event_times") or [None] * len(payloads)
    event_times = [ingest_us if t is None else t for t in times]
    source = origin.get("source", entry.source)
    if entry.ids is None:  # ids <source>:<number>, made only when a sink or dead letter asks for them
        return Batch(payloads, source=source, ingest_time_us=ingest_us, event_times=event_times,
                     id_prefix=f"{entry.source}:", offsets=range(entry.first, entry.first + entry.count))
    return Batch(payloads, source=source, ingest_time_us=ingest_us, event_times=event_times, ids=entry.ids)


class Worker:
    def __init__(self, plan: Plan, options: WorkerOptions, queue: QueueReader,
                 stores: Mapping[str, StateStore] | None = None, live: LivePublisher | None = None,
                 state: StateRuntime | None = None) -> None:
        self.options = options
        self.queue = queue
        self.meter = StepMeter(make_tracer(options.trace, plan.name))
        self.engine = LocalEngine(plan, stores=stores if stores is not None else daemon_stores(plan, options.data_dir),
                                  commit_interval=0.0, instrument=self.meter, idle_timeouts=idle_timeouts(plan),
                                  live=live, state=state)
        self.engine.ctx.on_failed = self._step_failed
        self.pending: list[Entry] = []
        self.letters: list[Letter] = []
        self.current: list[tuple[Entry, Batch]] = []
        self.acked = 0
        self.dead_lettered = 0
        self.committed_upto = 0
        self.stopping = False
        self.timers_fired = False
        """Timers or idleness gave records since the last commit (they are flushed and committed like events)."""
        self.delivered_idle_advance_us = 0
        """How far idleness had moved event time on at the last commit: its windows' results are in the sinks."""
        self._last_commit = time.monotonic()
        self._last_appended = 0

    # -- the loop --------------------------------------------------------------------------------------------

    def open(self) -> None:
        self.engine.open()
        self.committed_upto = self.engine.positions.get(QUEUE_POSITION, 0)
        self._last_appended = self.queue.last_appended()  # what waits already is a backlog, not arrivals

    def step(self) -> bool:
        """Lease and process one batch of entries; commit when due. False when the queue had nothing."""
        entries = self._take()
        if entries:
            self._process(entries)
            arriving = self._arriving()
            if not self.queue.backlog or arriving:
                # the lease took everything waiting: let the queue fill a little, so that the worker does not take
                # the queue's write lock once per arriving request and slow the appender down. Or requests are
                # arriving: ingest comes first (docs/daemon.md), the backlog waits in the queue. A backlog with
                # nothing arriving is taken at full speed (a worker that paused after every lease under
                # max_batch processed half as fast as it could once a burst was over)
                time.sleep(self.options.idle_wait)
        # a source is quiet only when the lease found nothing: a batch that took longer than a source's
        # idle_timeout to process (a loaded machine) must not make what waits behind it in the queue late
        if self.engine.tick(quiet=not entries):
            self.timers_fired = True  # their records must reach the sinks without waiting for the next event
        if (self.pending or self.letters or self.timers_fired) and \
                time.monotonic() - self._last_commit >= self.options.commit_interval:
            self.commit()  # not sooner, even when idle: each commit seals a file segment, fsyncs, deletes
        return bool(entries)

    def _take(self) -> list[Entry]:
        return self.queue.lease(self.options.index, self.options.max_batch)

    def _arriving(self) -> bool:
        """Whether requests were appended since the last time this was asked."""
        last = self.queue.last_appended()
        arriving, self._last_appended = last > self._last_appended, last
        return arriving

    def close(self) -> None:
        """Commit what was processed, then close sinks and stores (a graceful stop)."""
        self.commit()
        self.engine.close()
        self.queue.close()

    def _process(self, entries: list[Entry]) -> None:
        todo = [e for e in entries if e.seq > self.committed_upto]
        # entries at or below committed_upto are in the committed state already (a crash came between the state
        # commit and the delete): acknowledge them without counting them twice
        group: list[Entry] = []
        for entry in todo:
            if group and entry.source != group[0].source:
                self._run(group)
                group = []
            group.append(entry)
        if group:
            self._run(group)
        self.pending.extend(entries)
        if self.engine.state.durable:
            self.engine.positions[QUEUE_POSITION] = max(e.seq for e in entries)

    def _run(self, entries: list[Entry]) -> None:
        self.current = [(e, entry_batch(e)) for e in entries]
        batch = Batch.concat([b for _, b in self.current])
        if self.meter.tracer is not None:
            self.meter.parent = parent_of([e.meta for e in entries])
        letters_before = len(self.letters)
        try:
            self.engine.process(batch)
        except SinkError as exc:
            self._sink_failed(exc, letters_before)
        finally:
            self.current = []

    def _sink_failed(self, exc: SinkError, letters_before: int) -> None:
        """A sink still failed after its retries: every event of the batch becomes a dead letter."""
        error = str(exc)
        # an event a step already failed on (dead-lettered at that step during this run) never reached the
        # sink: it stays one dead letter, or replay-dead-letters would run it twice
        failed_at_a_step = {letter[0] for letter in self.letters[letters_before:]}
        for entry, b in self.current:
            for event_id, payload in zip(b.ids(), b.payloads, strict=True):
                if event_id not in failed_at_a_step:
                    self.letters.append((event_id, entry.source, orjson.dumps(payload), entry.ingest_us,
                                         "sink", error))

    def _step_failed(self, one: Batch, exc: Exception, pipeline_id: str, step_id: str) -> None:
        """Keep the event as it arrived (so a replay runs it from the start), with where and why it failed."""
        event_id = one.ids()[0]
        source, payload, ingest = one.source, one.payloads[0], one.ingest_time_us
        for entry, b in self.current:
            if event_id in b.ids():
                source, payload, ingest = entry.source, b.payloads[b.ids().index(event_id)], entry.ingest_us
                break
        error = f"{getattr(exc, 'error_class', type(exc).__name__)}: {exc}"
        self.letters.append((event_id, source, orjson.dumps(payload), ingest, f"step:{pipeline_id}/{step_id}",
                             error))

    def commit(self) -> None:
        """Flush sinks, commit state (and the queue position it includes), then acknowledge: in this order, so
        nothing is deleted from the queue before it is delivered."""
        self._last_commit = time.monotonic()
        advanced = self.engine.idleness.advanced_us  # before the flush: what it closed is flushed below
        if not self.pending and not self.letters and not self.timers_fired:
            self.delivered_idle_advance_us = advanced
            return
        if self.engine.state.durable:
            self.engine.commit(force=True)
            self.committed_upto = self.engine.positions.get(QUEUE_POSITION, self.committed_upto)
        else:
            self.engine.flush_sinks()
        self.timers_fired = False
        self.delivered_idle_advance_us = advanced
        if not self.pending and not self.letters:
            return
        self.acked += self._acknowledge()
        self.queue.checkpoint()  # here, in the worker's process, rather than inside the daemon's group commits
        self.dead_lettered += len(self.letters)
        self.pending = []
        self.letters = []

    def _acknowledge(self) -> int:
        """Remove the processed entries from the queue and keep the dead letters, in one transaction; how many
        events that acknowledged."""
        self.queue.dead_letter(self.pending, self.letters)
        return sum(e.count for e in self.pending)

    # -- what the daemon sees --------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        stats = self.engine.stats
        return {
            "events_in": stats.events_in,
            "events_out": dict(stats.events_out),
            "failed": stats.failed,
            "acked": self.acked,
            "dead_lettered": self.dead_lettered,
            "sink_failures": stats.sink_failures,
            "sink_retries": {sid: r.retries for sid, r in self.engine.runners.items() if r.retries},
            "step_outcomes": [[step, what, n] for (step, what), n in stats.steps.items()],
            "idle_advanced_us": self.idle_advance_delivered(),
            **self.meter.snapshot(),
        }

    def idle_advance_delivered(self) -> int:
        """How far idleness has moved event time on, counting only what the sinks have: a script that waits on
        ``idle_advanced_s`` for its last windows must find their results delivered, not still waiting for the
        next commit (which comes up to ``commit_interval`` later, more on a loaded machine)."""
        if self.pending or self.letters or self.timers_fired:
            return self.delivered_idle_advance_us
        return self.engine.idleness.advanced_us

    def lookup(self, step_id: str, key: str) -> dict[str, Any]:
        return lookup_reply(self.engine, step_id, key)


def key_forms(key: str) -> list[str]:
    """The ways a client may write a key: as the step prints it (``["a", 1]``, ``"abc"``), or a single key's
    plain value (``a`` for ``["a"]``, ``abc`` for ``"abc"``)."""
    forms = [key, orjson.dumps([key]).decode()]
    try:
        value = orjson.loads(key)
    except orjson.JSONDecodeError:
        return forms
    if isinstance(value, str):
        forms.append(value)
    return forms


def lookup_reply(engine: LocalEngine, step_id: str, key: str) -> dict[str, Any]:
    """Queryable state as the API answers it: ``{"value": …}`` (plain JSON), or an error with its status."""
    value = None
    for form in key_forms(key):
        try:
            value = engine.state.lookup(step_id, form)
        except KeyError:
            return {"error": f"no stateful step {step_id!r}", "status": 404}
        if value is not None:
            break
    if value is None:
        return {"error": f"step {step_id} holds nothing for key {key!r}", "status": 404}
    return {"value": orjson.loads(orjson.dumps(value, default=str))}


def serve_forever(worker: Worker, control: Connection | None, parent: int | None,
                  stopped: Callable[[], bool]) -> None:
    """The worker process's loop: work, answer the daemon, stop when told (or when the daemon is gone)."""
    options = worker.options
    last_stats = 0.0
    worker.open()
    if control is not None:
        control.send(("ready", options.index))
    while not (worker.stopping or stopped()):
        busy = worker.step()
        now = time.monotonic()
        if control is not None:
            if now - last_stats >= options.stats_interval:
                control.send(("stats", worker.snapshot()))
                last_stats = now
            while control.poll(0 if busy else options.idle_wait):
                _answer(worker, control, control.recv())
        elif not busy:
            time.sleep(options.idle_wait)
        if parent is not None and os.getppid() != parent:
            return  # the daemon died (kill -9): stop at once, like it; the next daemon recovers our leases
    worker.stopping = True
    worker.close()
    if control is not None:
        control.send(("stats", worker.snapshot()))
        control.send(("stopped", options.index))


def _answer(worker: Worker, control: Connection, message: tuple[Any, ...]) -> None:
    if message[0] == "stop":
        worker.stopping = True
    elif message[0] == "lookup":
        _, request, step_id, key = message
        control.send(("lookup", request, worker.lookup(step_id, key)))


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the daemon dies, so no orphan keeps leases a new daemon retries."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def worker_process(options: WorkerOptions, control: Connection, parent: int) -> None:
    """Entry point of a worker process (multiprocessing, spawn)."""
    _die_with_parent()
    if os.getppid() != parent:
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the daemon decides
    stop_requested = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGTERM, on_term)
    if options.nice:
        with contextlib.suppress(OSError):  # a container may forbid it: the worker runs, at the server's priority
            os.nice(options.nice)
    # held while this worker lives: a new daemon waits for it (an orphan must not process alongside the new one)
    lock = open(os.path.join(options.data_dir, "workers.lock"), "a+")  # noqa: SIM115  # held for the process life
    fcntl.flock(lock, fcntl.LOCK_SH)
    from edgewise.config import load_document
    from edgewise.config.yamlpos import load_text
    from edgewise.daemon.partitioned import PartitionedWorker, SinkDown
    from edgewise.placement import edge_plan

    try:  # the text the daemon validated, even if the file has changed again since
        plan = edge_plan(load_document(load_text(options.pipeline_text, options.pipeline_file),
                                       base_dir=options.base_dir))
        kind = PartitionedWorker if options.partitioned else Worker
        worker = kind(plan, options, QueueReader(queue_path(options.data_dir)),
                      live=lambda channel, records: control.send(("live", channel, records)))
    except Exception as exc:  # noqa: BLE001  # tell the daemon why, then exit non-zero
        control.send(("failed", options.index, f"{type(exc).__name__}: {exc}"))
        sys.exit(3)
    try:
        serve_forever(worker, control, parent, lambda: stop_requested)
    except SinkDown as exc:  # the daemon restarts it; it resumes from its last commit
        control.send(("sink-down", options.index, str(exc)))
        sys.exit(5)
