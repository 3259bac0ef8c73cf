"""The queue's appender: group commit on a thread of its own (see ``queue.py`` for the layout and the policies).

Everything waiting when a commit starts goes into that commit, as one multi-row INSERT in autocommit mode: one
statement, one round trip into SQLite (each round trip hands the GIL to the event loop and back), one fsync for
all of them. The counters follow by trigger. Replies wait for their own commit; futures of one commit are resolved
with one wake-up of the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue as stdqueue
import sqlite3
import threading
from collections.abc import Sequence
from concurrent.futures import Future

import orjson

from edgewise.daemon.queue import (
    SCHEMA,
    Append,
    FsyncPolicy,
    QueueError,
    QueueFull,
    connect,
    is_full_error,
    meta_value,
    transaction,
)
from edgewise.state.sqlite import retry_locked

_INSERT = "INSERT INTO entries (source, kind, body, meta, first, count, ids, ingest_us) VALUES"
_ROW = "(?, ?, ?, ?, ?, ?, ?, ?)"


class QueueWriter:
    """Appends with group commit, on one thread of its own. ``submit`` returns a future of the entry's first
    event number, resolved only after the transaction that holds it is committed (and, unless ``fsync`` is
    ``none``, synced to disk)."""

    def __init__(self, path: str, fsync: FsyncPolicy = "group", max_bytes: int | None = None,
                 max_group: int = 512) -> None:
        synchronous = {"always": "FULL", "group": "FULL", "none": "OFF"}[fsync]
        self.conn = connect(path, synchronous=synchronous, max_bytes=max_bytes)
        # checkpoints (copying the WAL into the database, with an fsync) would run inside a group commit and hold
        # every waiting reply; workers run them instead, in their own processes (QueueReader.checkpoint)
        self.conn.execute("PRAGMA wal_autocheckpoint=0")
        self.conn.executescript(SCHEMA)
        self.fsync = fsync
        self.max_group = 1 if fsync == "always" else max_group
        self.next_event = meta_value(self.conn, "next_event")
        self.commits = 0
        self._pending: stdqueue.SimpleQueue[tuple[Append, Waiter] | None] = stdqueue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="edgewise-queue-writer", daemon=True)
        self._thread.start()

    def submit(self, append: Append) -> Future[int]:
        future: Future[int] = Future()
        self._pending.put((append, future))
        return future

    def submit_async(self, append: Append) -> asyncio.Future[int]:
        """Like ``submit``, for a coroutine on the running loop: the futures of one commit are resolved with one
        wake-up of the loop, not one per request."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pending.put((append, future))
        return future

    def close(self) -> None:
        self._pending.put(None)
        self._thread.join()
        self.conn.close()

    def _loop(self) -> None:
        while True:
            item = self._pending.get()
            if item is None:
                return
            group = [item]
            while len(group) < self.max_group:
                try:
                    more = self._pending.get_nowait()
                except stdqueue.Empty:
                    break
                if more is None:
                    self._commit(group)
                    return
                group.append(more)
            self._commit(group)

    def _commit(self, group: list[tuple[Append, Waiter]]) -> None:
        firsts: list[int] = []
        number = self.next_event
        rows = []
        dead = []
        for append, _ in group:
            firsts.append(number)
            if append.kind == "dead":  # a message that could not be decoded: kept as a dead letter
                meta = append.meta or {}
                payload = {"topic": meta.get("topic"), "body": append.body.decode("utf-8", "replace")}
                dead.append((f"{append.source}:{number}", append.source, orjson.dumps(payload), append.ingest_us,
                             append.ingest_us, "source", str(meta.get("error", "undecodable"))))
                number += 1
                continue
            rows.append((append.source, append.kind, append.body,
                         orjson.dumps(append.meta) if append.meta else None, number, append.count,
                         orjson.dumps(append.ids) if append.ids is not None else None, append.ingest_us))
            if append.ids is None:
                number += append.count
        try:
            if dead:  # the rare path: undecodable broker messages go to the dead letters in the same commit
                with transaction(self.conn) as c:
                    if rows:
                        c.executemany(f"{_INSERT} {_ROW}", rows)
                    c.executemany("INSERT INTO dead (event_id, source, payload, ingest_us, failed_us, location, "
                                  "error) VALUES (?, ?, ?, ?, ?, ?, ?)", dead)
            elif rows:
                # one multi-row INSERT in autocommit mode: one atomic transaction, one call into SQLite
                sql = f"{_INSERT} {', '.join([_ROW] * len(rows))}"
                params = [value for row in rows for value in row]
                retry_locked(lambda: self.conn.execute(sql, params))
        except sqlite3.Error as exc:
            error: QueueError = (QueueFull(f"the queue is full: {exc}") if is_full_error(exc)
                                 else QueueError(f"the queue could not write: {exc}"))
            _settle(group, [error] * len(group))
            return
        self.next_event = number
        self.commits += 1
        _settle(group, firsts)


Waiter = Future[int] | asyncio.Future[int]


def _settle(group: Sequence[tuple[Append, Waiter]], outcomes: Sequence[int | QueueError]) -> None:
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[int], int | QueueError]]] = {}
    for (_, waiter), outcome in zip(group, outcomes, strict=True):
        if isinstance(waiter, asyncio.Future):
            by_loop.setdefault(waiter.get_loop(), []).append((waiter, outcome))
        elif isinstance(outcome, QueueError):
            waiter.set_exception(outcome)
        else:
            waiter.set_result(outcome)
    for loop, items in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for these any more
            loop.call_soon_threadsafe(_resolve, items)


def _resolve(items: list[tuple[asyncio.Future[int], int | QueueError]]) -> None:
    for future, outcome in items:
        if future.done():  # cancelled: the client went away; the events are queued all the same
            continue
        if isinstance(outcome, QueueError):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
