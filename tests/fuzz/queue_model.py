"""The daemon's durable queue against a model of it (issue 39: the queue was not fuzzed at all).

``queue_ops`` draws a history of what the daemon does to its queue: requests appended, workers leasing entries,
acknowledging some, dead-lettering others, crashing (their entries go back, or are set aside after
``max_attempts``), the daemon restarting, dead letters replayed. ``queue_vs_model`` runs it against the real
queue (``edgewise.daemon.queue``: SQLite on disk, the writer thread, a reader reopened on restart) and against a
model written plainly from the queue's documentation (its module and method docstrings, docs/daemon.md): a list of
entries and a list of dead letters. After each step the two must agree on what a lease gives (entries, event ids,
payloads, attempts), what a crash recovery returns and the queue's counts; at the end, on every entry and dead
letter, and no event may be lost or kept twice.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from hypothesis import strategies as st

WORKERS = 3
SOURCE = "s"


@dataclass
class _Entry:
    seq: int
    ids: list[str]
    state: int = 0  # 0 waiting, 1 leased
    worker: int | None = None
    attempts: int = 0


@dataclass
class Model:
    """The queue as its documentation describes it."""

    entries: list[_Entry] = field(default_factory=list)
    dead: list[tuple[int, str]] = field(default_factory=list)  # (number, event id)
    payloads: dict[str, Any] = field(default_factory=dict)
    acknowledged: list[str] = field(default_factory=list)
    next_seq: int = 1
    next_event: int = 1
    next_dead: int = 1

    def append(self, count: int) -> int:
        """A request of ``count`` events: one entry, its events numbered on from the last request's."""
        first = self.next_event
        ids = [f"{SOURCE}:{n}" for n in range(first, first + count)]
        self.entries.append(_Entry(self.next_seq, ids))
        self.next_seq += 1
        self.next_event += count
        return first

    def lease(self, worker: int, max_events: int) -> list[_Entry]:
        """The oldest waiting entries, up to ``max_events`` events, at least one entry."""
        taken: list[_Entry] = []
        events = 0
        for e in self.entries:
            if e.state != 0:
                continue
            if taken and events + len(e.ids) > max_events:
                break
            taken.append(e)
            events += len(e.ids)
        for e in taken:
            e.state, e.worker, e.attempts = 1, worker, e.attempts + 1
        return taken

    def finish(self, seqs: set[int], failed: bool) -> None:
        """Acknowledged entries go; dead-lettered ones go too, each event kept as a dead letter."""
        for e in [e for e in self.entries if e.seq in seqs]:
            self.entries.remove(e)
            if failed:
                self._bury(e)
            else:
                self.acknowledged += e.ids

    def _bury(self, e: _Entry) -> None:
        for event_id in e.ids:
            self.dead.append((self.next_dead, event_id))
            self.next_dead += 1

    def recover(self, max_attempts: int, worker: int | None) -> tuple[int, int]:
        """A crash: entries in flight (of the worker, or all) wait again, except those in flight ``max_attempts``
        times or more, which are dead-lettered."""
        mine = [e for e in self.entries if e.state == 1 and (worker is None or e.worker == worker)]
        poisoned = [e for e in mine if e.attempts >= max_attempts]
        for e in poisoned:
            self.entries.remove(e)
            self._bury(e)
        for e in mine:
            if e not in poisoned:
                e.state, e.worker = 0, None
        return len(mine) - len(poisoned), len(poisoned)

    def replay(self) -> int:
        """Every dead letter back into the queue, one entry each, with its id."""
        replayed = len(self.dead)
        for _, event_id in self.dead:
            self.entries.append(_Entry(self.next_seq, [event_id]))
            self.next_seq += 1
        self.dead = []
        return replayed

    def stats(self) -> dict[str, int]:
        return {"queued_events": sum(len(e.ids) for e in self.entries), "entries": len(self.entries),
                "in_flight_entries": sum(e.state for e in self.entries), "dead_letters": len(self.dead),
                "next_event": self.next_event}


Op = tuple[Any, ...]


def queue_ops() -> st.SearchStrategy[list[Op]]:
    worker = st.integers(0, WORKERS - 1)
    picks = st.lists(st.integers(0, 7), max_size=4)
    op = st.one_of(
        st.tuples(st.just("append"), st.integers(1, 4)),
        st.tuples(st.just("append"), st.integers(1, 4)),
        st.tuples(st.just("lease"), worker, st.integers(1, 6)),
        st.tuples(st.just("lease"), worker, st.integers(1, 6)),
        st.tuples(st.just("ack"), worker, picks),
        st.tuples(st.just("ack"), worker, picks),
        st.tuples(st.just("fail"), worker, picks),
        st.tuples(st.just("crash"), st.one_of(worker, st.none()), st.integers(1, 3)),
        st.tuples(st.just("restart"), st.integers(1, 3)),
        st.tuples(st.just("replay")),
    )
    return st.lists(op, min_size=1, max_size=30)


def queue_vs_model(ops: list[Op]) -> list[str]:
    """Runs ``ops`` against the real queue and the model; the first disagreement, or nothing."""
    from edgewise.daemon.bodies import decode_body
    from edgewise.daemon.queue import Append, Entry, QueueReader
    from edgewise.daemon.writer import QueueWriter

    model = Model()
    with tempfile.TemporaryDirectory(prefix="edgewise-queue-") as tmp:
        path = str(Path(tmp) / "queue.db")
        writer = QueueWriter(path, "none")
        reader = QueueReader(path)
        held: dict[int, list[Entry]] = {w: [] for w in range(WORKERS)}  # the real entries each worker holds
        try:
            for step, op in enumerate(ops):
                where = f"step {step} {op}"
                kind = op[0]
                if kind == "append":
                    body = b"".join(orjson.dumps({"request": step, "n": j}) + b"\n" for j in range(op[1]))
                    first = writer.submit(Append(SOURCE, "ndjson", body, op[1])).result(30).first
                    expected_first = model.append(op[1])
                    for j, event_id in enumerate(model.entries[-1].ids):
                        model.payloads[event_id] = {"request": step, "n": j}
                    if first != expected_first:
                        return [f"{where}: the request's first event is {first}, the model says {expected_first}"]
                elif kind == "lease":
                    got = reader.lease(op[1], op[2])
                    want = model.lease(op[1], op[2])
                    real = [(e.seq, e.event_ids(), e.attempts, list(decode_body(e.kind, e.body, e.meta)))
                            for e in got]
                    modeled = [(e.seq, e.ids, e.attempts - 1, [model.payloads[i] for i in e.ids]) for e in want]
                    if real != modeled:
                        return [f"{where}: the lease gave {real}, the model says {modeled}"]
                    held[op[1]] += got
                elif kind in ("ack", "fail"):
                    mine = held[op[1]]
                    if not mine:
                        continue
                    chosen = {mine[i % len(mine)].seq for i in op[2]}
                    entries = [e for e in mine if e.seq in chosen]
                    held[op[1]] = [e for e in mine if e.seq not in chosen]
                    if kind == "ack":
                        reader.ack(entries)
                    else:
                        letters = [(event_id, e.source, orjson.dumps(payload), e.ingest_us, "step:f", "planted")
                                   for e in entries
                                   for event_id, payload in zip(e.event_ids(), decode_body(e.kind, e.body, e.meta),
                                                                strict=True)]
                        reader.dead_letter(entries, letters)
                    model.finish(chosen, failed=kind == "fail")
                elif kind == "crash":
                    got_counts = reader.recover(op[2], op[1])
                    want_counts = model.recover(op[2], op[1])
                    for w in held if op[1] is None else [op[1]]:
                        held[w] = []
                    if got_counts != want_counts:
                        return [f"{where}: recovery gave (released, dead-lettered) {got_counts}, the model says "
                                f"{want_counts}"]
                elif kind == "restart":  # the daemon restarts: a new reader, which recovers everything in flight
                    reader.close()
                    reader = QueueReader(path)
                    got_counts = reader.recover(op[1])
                    want_counts = model.recover(op[1], None)
                    held = {w: [] for w in range(WORKERS)}
                    if got_counts != want_counts:
                        return [f"{where}: recovery on restart gave {got_counts}, the model says {want_counts}"]
                else:
                    got_n, want_n = reader.replay_dead_letters(), model.replay()
                    if got_n != want_n:
                        return [f"{where}: {got_n} dead letters replayed, the model says {want_n}"]
                stats = reader.stats().as_json()
                real_stats = {k: stats[k] for k in model.stats()}
                if real_stats != model.stats():
                    return [f"{where}: the queue's counts are {real_stats}, the model says {model.stats()}"]
            return _final_differences(reader, model)
        finally:
            reader.close()
            writer.close()


def _final_differences(reader: Any, model: Model) -> list[str]:
    entries = [(e.seq, e.event_ids()) for e in reader.peek(100_000)]
    modeled = [(e.seq, e.ids) for e in model.entries]
    problems = []
    if entries != modeled:
        problems.append(f"at the end the queue holds {entries}, the model says {modeled}")
    dead = [(d.n, d.event_id) for d in reader.dead_letters(limit=100_000)]
    if dead != model.dead:
        problems.append(f"at the end the dead letters are {dead}, the model says {model.dead}")
    # nothing lost, nothing twice: every event appended is queued, dead-lettered or acknowledged, once
    everywhere = [i for _, ids in entries for i in ids] + [i for _, i in dead] + model.acknowledged
    if sorted(everywhere) != sorted(model.payloads):
        problems.append(f"events lost or kept twice: {sorted(everywhere)} against {sorted(model.payloads)}")
    return problems
