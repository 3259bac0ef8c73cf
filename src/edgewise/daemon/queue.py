"""The durable queue of the edge daemon: one SQLite database in WAL mode in the data directory.

Layout (``<data dir>/queue.db``):

- ``entries``: what was accepted and is not yet acknowledged. One row per accepted *request* (an HTTP body, an
  MQTT message, a webhook delivery), not per event: the body is kept exactly as it arrived (already validated)
  and decoded again by the worker, so accepting a batch of 1,000 events costs one row. ``state`` is 0 while the
  entry waits (unprocessed) and 1 while a worker holds it (in flight); ``attempts`` counts how often a worker
  took it and did not finish.
- ``dead``: dead letters, one row per event, with the error and where it happened (``step:<id>``,
  ``sink:<id>``, ``worker``). ``edgewise replay-dead-letters`` moves them back into ``entries``.
- ``seen``: the ids a source chose (a webhook's delivery id, a mesh peer's event ids) that it accepted within its
  ``redelivery_window``: the same id again is acknowledged as a duplicate and not queued (``writer.py``). Kept in
  the commit that queues the event, so it survives a crash exactly as the event does.
- ``meta``: the next event number (event ids are ``<source id>:<number>`` unless the request brought its own)
  and the number of queued events (kept in the same transactions as the rows, so it is always exact).

Appends go through one writer thread (``writer.py``) that commits everything waiting in one transaction (group
commit): with
``fsync: group`` concurrent requests share one fsync and each reply waits for its own commit; ``always`` commits
(and fsyncs) each request alone; ``none`` leaves flushing to the operating system (an OS crash may lose
acknowledged events; a process crash does not). Workers lease entries (state 0 → 1), and delete them (ack) only
after every pipeline and sink has taken their events. On start, entries left in flight by a crash go back to
unprocessed before anything else happens; an entry that was in flight during ``max_attempts`` crashes is
dead-lettered instead, so one poisonous request cannot crash the daemon forever.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import orjson

from edgewise.daemon.bodies import decode_body
from edgewise.errors import EdgewiseError
from edgewise.state.sqlite import enable_wal, retry_locked

FsyncPolicy = Literal["always", "group", "none"]
FSYNC_POLICIES: tuple[FsyncPolicy, ...] = ("always", "group", "none")

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    source TEXT NOT NULL,
    kind TEXT NOT NULL,          -- how to decode body: json | ndjson | envelope | webhook | message
    body BLOB NOT NULL,
    meta BLOB,                   -- JSON: webhook headers, MQTT topic, ...
    first INTEGER NOT NULL,      -- event number of the first event (ids <source>:<first + i>)
    count INTEGER NOT NULL,
    ids BLOB,                    -- JSON list of explicit ids (mesh, webhook deliveries, replayed dead letters)
    ingest_us INTEGER NOT NULL,
    state INTEGER NOT NULL DEFAULT 0,
    worker INTEGER,
    attempts INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS entries_waiting ON entries (state, seq);
-- what a lease chooses by, without reading a row (a batch's body runs over many overflow pages, and `count`
-- comes after it): a lease then holds the write lock for its choice only, not for the bodies of the backlog
CREATE INDEX IF NOT EXISTS entries_waiting_counts ON entries (state, seq, count);
CREATE TABLE IF NOT EXISTS dead (
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL,
    source TEXT NOT NULL,
    payload BLOB NOT NULL,
    ingest_us INTEGER NOT NULL,
    failed_us INTEGER NOT NULL,
    location TEXT NOT NULL,
    error TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
-- partitioned workers (``--workers`` above 1 with stateful steps, engine/partitions.py) read every entry rather
-- than lease it: each partition's row says up to which entry its worker has delivered (state committed, sinks
-- flushed); an entry goes once every partition is past it
CREATE TABLE IF NOT EXISTS partitions (p INTEGER PRIMARY KEY, upto INTEGER NOT NULL);
-- the entries the workers finished most recently (the last `keep_recent` sequence numbers), kept for
-- `edgewise serve --check-reload` to replay a changed pipeline file over
CREATE TABLE IF NOT EXISTS recent (
    seq INTEGER PRIMARY KEY,
    source TEXT NOT NULL,
    kind TEXT NOT NULL,
    body BLOB NOT NULL,
    meta BLOB,
    first INTEGER NOT NULL,
    count INTEGER NOT NULL,
    ids BLOB,
    ingest_us INTEGER NOT NULL
);
-- event ids a source chose (webhook deliveries, mesh envelopes) accepted within its redelivery window: a
-- redelivery is acknowledged and not queued again (writer.py); rows go once their window has passed
CREATE TABLE IF NOT EXISTS seen (id TEXT PRIMARY KEY, until_us INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS seen_until ON seen (until_us);
INSERT OR IGNORE INTO meta VALUES ('next_event', 1), ('queued_events', 0), ('dead_events', 0),
    ('keep_recent', 0);
WITH RECURSIVE n(p) AS (SELECT 0 UNION ALL SELECT p + 1 FROM n WHERE p < 127)
    INSERT OR IGNORE INTO partitions SELECT p, 0 FROM n;
-- the counters follow the rows inside SQLite, in the same statement: an append is then one statement (one
-- round trip between Python and SQLite, which matters because each one hands the GIL to the event loop).
-- Deletes (acks, by workers) update the count once per transaction instead: a per-row trigger would lengthen the
-- worker's hold on the write lock, which every waiting reply then waits for.
CREATE TRIGGER IF NOT EXISTS entries_added AFTER INSERT ON entries BEGIN
    UPDATE meta SET value = value + NEW.count WHERE key = 'queued_events';
    UPDATE meta SET value = NEW.first + NEW.count WHERE key = 'next_event' AND NEW.ids IS NULL
        AND value < NEW.first + NEW.count;
END;
CREATE TRIGGER IF NOT EXISTS dead_added AFTER INSERT ON dead BEGIN
    UPDATE meta SET value = value + 1 WHERE key = 'dead_events';
END;
CREATE TRIGGER IF NOT EXISTS dead_removed AFTER DELETE ON dead BEGIN
    UPDATE meta SET value = value - 1 WHERE key = 'dead_events';
END;
"""


class QueueError(EdgewiseError):
    """The queue could not take or give events."""


class QueueFull(QueueError):
    """The disk (or the queue's size limit) is full: nothing was written; try again later."""


@dataclass(frozen=True)
class Append:
    """One request to queue: its body as received (validated) and how many events it holds."""

    source: str
    kind: str
    body: bytes
    count: int
    meta: dict[str, Any] | None = None
    ids: list[str] | None = None
    ingest_us: int = field(default_factory=lambda: time.time_ns() // 1000)
    redelivery_us: int = 0
    """How long the source's chosen ``ids`` count as seen: an id seen within it is a duplicate (0: not checked)."""


DEFAULT_REDELIVERY_WINDOW_US = 3 * 24 * 3600 * 1_000_000
"""How long a source's chosen ids count as seen unless it says otherwise: GitHub redelivers for 3 days."""


class Appended(NamedTuple):
    """What an append became: the number of its first event (ids ``<source>:<first + i>`` unless it chose its own)
    and the chosen ids that were duplicates (already accepted within the redelivery window; not queued again)."""

    first: int
    duplicates: tuple[str, ...] = ()


@dataclass(frozen=True)
class Entry:
    seq: int
    source: str
    kind: str
    body: bytes
    meta: dict[str, Any] | None
    first: int
    count: int
    ids: list[str] | None
    ingest_us: int
    attempts: int

    def event_ids(self) -> list[str]:
        if self.ids is not None:
            return self.ids
        return [f"{self.source}:{n}" for n in range(self.first, self.first + self.count)]


@dataclass(frozen=True)
class DeadLetter:
    n: int
    event_id: str
    source: str
    payload: dict[str, Any]
    ingest_us: int
    failed_us: int
    location: str
    error: str

    def as_json(self) -> dict[str, Any]:
        return {"n": self.n, "event_id": self.event_id, "source": self.source, "payload": self.payload,
                "location": self.location, "error": self.error, "ingest_us": self.ingest_us,
                "failed_us": self.failed_us}


@dataclass(frozen=True)
class QueueStats:
    queued_events: int
    entries: int
    in_flight_entries: int
    dead_letters: int
    next_event: int
    bytes: int

    def as_json(self) -> dict[str, int]:
        return {"queued_events": self.queued_events, "entries": self.entries,
                "in_flight_entries": self.in_flight_entries, "dead_letters": self.dead_letters,
                "next_event": self.next_event, "bytes": self.bytes}


def queue_path(data_dir: str) -> str:
    return os.path.join(data_dir, "queue.db")


def connect(path: str, *, synchronous: str = "NORMAL", max_bytes: int | None = None) -> sqlite3.Connection:
    """A connection in WAL mode with explicit transactions (``isolation_level=None``)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=0.0)
    enable_wal(conn)
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA busy_timeout=0")  # write locks are retried by ``transaction``; reads never wait in WAL
    # SQLite as Debian (and others) build it zeroes what a DELETE frees: an ack then wrote every page of the
    # entries' bodies to the WAL a second time (4.9 MB for 20 entries of 1,000 events; 25 KB without), under the
    # write lock each waiting reply waits for. FAST zeroes only where that costs no extra I/O
    conn.execute("PRAGMA secure_delete=FAST")
    if max_bytes is not None:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count={max(16, max_bytes // page_size)}")
    return conn


def create_schema(conn: sqlite3.Connection) -> None:
    """Create what is missing of the queue's tables. Its ``INSERT OR IGNORE`` takes the write lock even when the
    rows exist, and busy_timeout is 0: a worker opening the queue while the daemon's writer commits (posts arriving
    as the worker starts) must wait for the lock here, not fail and leave the queue unprocessed. Every statement is
    idempotent, so a retry after a partial run is safe."""
    retry_locked(lambda: conn.executescript(SCHEMA))


@contextmanager
def transaction(conn: sqlite3.Connection, timeout: float = 30.0) -> Iterator[sqlite3.Connection]:
    """A write transaction. The write lock is retried here every 0.2 ms rather than by SQLite's busy handler,
    whose back-off sleeps 1 ms and more on every collision between the appender and a worker."""
    retry_locked(lambda: conn.execute("BEGIN IMMEDIATE"), timeout)
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:  # SQLite ends the transaction itself on some errors (SQLITE_FULL)
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def is_full_error(exc: sqlite3.Error) -> bool:
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "full" in str(exc)


def _runs(entries: Sequence[Entry]) -> list[tuple[int, int]]:
    """The entries' sequence numbers as runs (first, last) of consecutive numbers: one statement per run keeps a
    worker's hold on the write lock short, and every waiting reply waits for that lock."""
    return _seq_runs(sorted(e.seq for e in entries))


def _seq_runs(numbers: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted numbers as runs (first, last) of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for seq in numbers:
        if runs and seq == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], seq)
        else:
            runs.append((seq, seq))
    return runs


def _delete(conn: sqlite3.Connection, entries: Sequence[Entry]) -> None:
    """Remove entries and count them out; the daemon's ``--keep-recent`` newest stay in ``recent``."""
    _delete_runs(conn, _runs(entries), sum(e.count for e in entries))


def _delete_upto(conn: sqlite3.Connection, last: int) -> None:
    """``_delete`` of every entry up to ``last`` (partitioned workers: every partition is past them)."""
    events = conn.execute("SELECT coalesce(sum(count), 0) FROM entries WHERE state IN (0, 1) AND seq <= ?",
                          (last,)).fetchone()[0]  # by the index (state, seq, count)
    _delete_runs(conn, [(0, last)], int(events))


def _delete_runs(conn: sqlite3.Connection, runs: Sequence[tuple[int, int]], events: int) -> None:
    """Remove the entries of each (first seq, last seq) run, which hold ``events`` queued events."""
    keep = meta_value(conn, "keep_recent")
    if keep > 0:
        conn.executemany("INSERT OR REPLACE INTO recent SELECT seq, source, kind, body, meta, first, count, ids, "
                         "ingest_us FROM entries WHERE seq BETWEEN ? AND ?", runs)
        conn.execute("DELETE FROM recent WHERE seq <= (SELECT max(seq) FROM recent) - ?", (keep,))
    conn.executemany("DELETE FROM entries WHERE seq BETWEEN ? AND ?", runs)
    conn.execute("UPDATE meta SET value = value - ? WHERE key = 'queued_events'", (events,))


def _oldest(waiting: Sequence[tuple[int, int]], max_events: int, max_entries: int) -> tuple[int, bool]:
    """(how many of the oldest waiting (seq, events) entries make about ``max_events`` events, at least one;
    whether more are waiting than that: the worker takes its next batch at once)."""
    n, events = 0, 0
    for _, count in waiting:
        if n and events + count > max_events:
            break
        n += 1
        events += count
    return n, n < len(waiting) or len(waiting) == max_entries


def meta_value(conn: sqlite3.Connection, key: str) -> int:
    return int(conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()[0])


class QueueReader:
    """The worker's and the operator's side of the queue: lease, ack, dead-letter, inspect, replay.

    Safe to use from several processes at once (SQLite's write lock serialises them)."""

    def __init__(self, path: str) -> None:
        self.path = path
        # a lost ack or lease only means an event is processed again (at-least-once): no fsync needed here
        self.conn = connect(path, synchronous="NORMAL")
        self.conn.execute("PRAGMA wal_autocheckpoint=0")  # see ``checkpoint``
        create_schema(self.conn)
        self._last_checkpoint = 0.0
        self.backlog = False
        """Whether the last ``lease`` left waiting entries behind (it stopped at its size, not at the queue's end)."""

    def lease(self, worker: int, max_events: int, max_entries: int = 1000) -> list[Entry]:
        """Take the oldest waiting entries, up to about ``max_events`` events (at least one entry)."""
        # look first without the write lock: an idle worker polling must not make the appender wait for it
        self.backlog = False
        if self.conn.execute("SELECT 1 FROM entries WHERE state = 0 LIMIT 1").fetchone() is None:
            return []
        with transaction(self.conn) as c:
            waiting = c.execute("SELECT seq, count FROM entries WHERE state = 0 ORDER BY seq LIMIT ?",
                                (max_entries,)).fetchall()
            n, self.backlog = _oldest(waiting, max_events, max_entries)
            if not n:
                return []
            chosen = [seq for seq, _ in waiting[:n]]
            # the first waiting entries are the waiting ones between the first and the last chosen
            c.execute("UPDATE entries SET state = 1, worker = ?, attempts = attempts + 1 "
                      "WHERE state = 0 AND seq BETWEEN ? AND ?", (worker, chosen[0], chosen[-1]))
        # read once leased, without the lock (entries leased to this worker change only when it is gone), by runs
        # of consecutive numbers: this worker's earlier leases, not acknowledged yet, may lie between two runs
        taken: list[Entry] = []
        for first, last in _seq_runs(chosen):
            taken += map(_entry, self.conn.execute(  # the attempts before this one, as the entry had them
                "SELECT seq, source, kind, body, meta, first, count, ids, ingest_us, attempts - 1 FROM entries "
                "WHERE seq BETWEEN ? AND ? ORDER BY seq", (first, last)).fetchall())
        return taken

    def read_after(self, seq: int, max_events: int, max_entries: int = 1000) -> list[Entry]:
        """The entries after ``seq``, oldest first, up to about ``max_events`` events (at least one entry): a
        partitioned worker's read, which takes no lease (every worker reads every entry)."""
        # by the index on (state, seq, count), without reading the entries' bodies (entries are never leased here)
        counts = self.conn.execute("SELECT seq, count FROM entries WHERE state = 0 AND seq > ? ORDER BY seq LIMIT ?",
                                   (seq, max_entries)).fetchall()
        chosen, self.backlog = _oldest(counts, max_events, max_entries)
        if not chosen:
            return []
        rows = self.conn.execute("SELECT seq, source, kind, body, meta, first, count, ids, ingest_us, attempts "
                                 "FROM entries WHERE seq > ? AND seq <= ? ORDER BY seq",
                                 (seq, counts[chosen - 1][0])).fetchall()
        return [_entry(r) for r in rows]

    def delivered(self, partitions: dict[int, int], letters: Sequence[tuple[str, str, bytes, int, str, str]] = (),
                  ) -> None:
        """Partitioned workers: the partitions have delivered every entry up to their number (and ``letters``
        are dead): in one transaction, keep the letters, move the partitions on, and remove the entries every
        partition is past."""
        now = time.time_ns() // 1000
        with transaction(self.conn) as c:
            c.executemany("INSERT INTO dead (event_id, source, payload, ingest_us, failed_us, location, error) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?)",
                          [(i, s, p, t, now, where, err) for i, s, p, t, where, err in letters])
            c.executemany("UPDATE partitions SET upto = max(upto, ?) WHERE p = ?",
                          [(upto, p) for p, upto in partitions.items()])
            low = c.execute("SELECT min(upto) FROM partitions").fetchone()[0]
            if c.execute("SELECT 1 FROM entries WHERE seq <= ? LIMIT 1", (low,)).fetchone() is not None:
                _delete_upto(c, low)

    def waiting_after(self, seq: int) -> tuple[int, int]:
        """(entries, events) queued after ``seq`` (by the index, without reading the bodies)."""
        row = self.conn.execute("SELECT count(*), coalesce(sum(count), 0) FROM entries WHERE state IN (0, 1) "
                                "AND seq > ?", (seq,)).fetchone()
        return int(row[0]), int(row[1])

    def partition_marks(self) -> dict[int, int]:
        """Each partition's last delivered entry (``delivered``)."""
        return dict(self.conn.execute("SELECT p, upto FROM partitions").fetchall())

    def last_appended(self) -> int:
        """The sequence number of the newest entry ever appended (0: none): it grows while requests arrive."""
        row = self.conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'entries'").fetchone()
        return int(row[0]) if row else 0

    def keep_recent(self, entries: int) -> None:
        """Keep the last ``entries`` sequence numbers of finished input in ``recent`` (0: none)."""
        with transaction(self.conn) as c:
            c.execute("UPDATE meta SET value = ? WHERE key = 'keep_recent'", (entries,))
            if entries == 0:
                c.execute("DELETE FROM recent")

    def recent(self) -> list[Entry]:
        """The finished input ``recent`` holds, oldest first."""
        rows = self.conn.execute("SELECT seq, source, kind, body, meta, first, count, ids, ingest_us, 0 FROM recent "
                                 "ORDER BY seq").fetchall()
        return [_entry(r) for r in rows]

    def ack(self, entries: Sequence[Entry]) -> None:
        """The entries' events went through every pipeline and sink: remove them."""
        if not entries:
            return
        with transaction(self.conn) as c:
            _delete(c, entries)

    def dead_letter(self, entries: Sequence[Entry], letters: Sequence[tuple[str, str, bytes, int, str, str]],
                    ) -> None:
        """Remove ``entries`` and keep ``letters`` (event id, source, payload JSON, ingest µs, location,
        error) in one transaction, so an event is either queued or dead-lettered, never lost between."""
        now = time.time_ns() // 1000
        with transaction(self.conn) as c:
            c.executemany("INSERT INTO dead (event_id, source, payload, ingest_us, failed_us, location, error) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?)",
                          [(i, s, p, t, now, where, err) for i, s, p, t, where, err in letters])
            if entries:
                _delete(c, entries)

    def checkpoint(self, every: float = 2.0) -> None:
        """Copy committed WAL pages into the database without blocking the appender (PASSIVE), at most every
        ``every`` seconds: its fsync of the database file competes with the appender's commits for the disk."""
        now = time.monotonic()
        if now - self._last_checkpoint >= every:
            self._last_checkpoint = now
            self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def release(self, worker: int | None = None) -> int:
        """Give in-flight entries back (of one worker, or all): a worker stopped or crashed."""
        with transaction(self.conn) as c:
            if worker is None:
                cur = c.execute("UPDATE entries SET state = 0, worker = NULL WHERE state = 1")
            else:
                cur = c.execute("UPDATE entries SET state = 0, worker = NULL WHERE state = 1 AND worker = ?",
                                (worker,))
            return cur.rowcount

    def recover(self, max_attempts: int, worker: int | None = None) -> tuple[int, int]:
        """Give back entries a crash left in flight (of one worker, or all): they wait again, except those that
        were in flight ``max_attempts`` times, which are dead-lettered (a request that crashes every worker that
        takes it must not stop the daemon). Returns (released, dead-lettered entries)."""
        query = ("SELECT seq, source, kind, body, meta, first, count, ids, ingest_us, attempts FROM entries "
                 "WHERE state = 1 AND attempts >= ?")
        args: tuple[int, ...] = (max_attempts,)
        if worker is not None:
            query += " AND worker = ?"
            args += (worker,)
        poisoned = [_entry(r) for r in self.conn.execute(query, args)]
        if poisoned:
            letters = []
            for e in poisoned:
                error = f"in flight during {e.attempts} crashes of a worker or the daemon; set aside"
                for event_id, payload in zip(e.event_ids(), decode_body(e.kind, e.body, e.meta), strict=True):
                    letters.append((event_id, e.source, orjson.dumps(payload), e.ingest_us, "worker", error))
            self.dead_letter(poisoned, letters)
        return self.release(worker), len(poisoned)

    def stats(self) -> QueueStats:
        c = self.conn
        entries, in_flight = c.execute("SELECT count(*), coalesce(sum(state), 0) FROM entries").fetchone()
        size = sum(os.path.getsize(p) for p in (self.path, self.path + "-wal") if os.path.exists(p))
        return QueueStats(queued_events=meta_value(c, "queued_events"), entries=entries, in_flight_entries=in_flight,
                          dead_letters=meta_value(c, "dead_events"), next_event=meta_value(c, "next_event"), bytes=size)

    def queued_events(self) -> int:
        return meta_value(self.conn, "queued_events")

    def dead_letters(self, limit: int = 100, after: int = 0) -> list[DeadLetter]:
        rows = self.conn.execute("SELECT n, event_id, source, payload, ingest_us, failed_us, location, error "
                                 "FROM dead WHERE n > ? ORDER BY n LIMIT ?", (after, limit)).fetchall()
        return [DeadLetter(r[0], r[1], r[2], orjson.loads(r[3]), r[4], r[5], r[6], r[7]) for r in rows]

    def replay_dead_letters(self, numbers: Sequence[int] | None = None) -> int:
        """Move dead letters (all, or those numbered) back into the queue with their ids; returns how many."""
        with transaction(self.conn) as c:
            if numbers is None:
                rows = c.execute("SELECT n, event_id, source, payload, ingest_us FROM dead ORDER BY n").fetchall()
            else:
                rows = [r for n in numbers for r in c.execute(
                    "SELECT n, event_id, source, payload, ingest_us FROM dead WHERE n = ?", (n,))]
            for _, event_id, source, payload, ingest_us in rows:
                c.execute("INSERT INTO entries (source, kind, body, first, count, ids, ingest_us) "
                          "VALUES (?, 'json', ?, 0, 1, ?, ?)",
                          (source, payload, orjson.dumps([event_id]), ingest_us))
            c.executemany("DELETE FROM dead WHERE n = ?", [(r[0],) for r in rows])
        return len(rows)

    def peek(self, limit: int = 20) -> list[Entry]:
        rows = self.conn.execute("SELECT seq, source, kind, body, meta, first, count, ids, ingest_us, attempts "
                                 "FROM entries ORDER BY seq LIMIT ?", (limit,)).fetchall()
        return [_entry(r) for r in rows]

    def close(self) -> None:
        self.conn.close()


def _entry(row: Sequence[Any]) -> Entry:
    seq, source, kind, body, meta, first, count, ids, ingest_us, attempts = row
    return Entry(seq, source, kind, bytes(body), orjson.loads(meta) if meta else None, first, count,
                 orjson.loads(ids) if ids else None, ingest_us, attempts)
