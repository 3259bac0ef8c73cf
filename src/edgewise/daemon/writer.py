"""The queue's appender: group commit on a thread of its own (see ``queue.py`` for the layout and the policies).

Everything waiting when a commit starts goes into that commit, as one multi-row INSERT in autocommit mode: one
statement, one round trip into SQLite (each round trip hands the GIL to the event loop and back), one fsync for
all of them. The counters follow by trigger. Replies wait for their own commit; futures of one commit are resolved
with one wake-up of the event loop.

Ids a source chose (webhook deliveries, mesh envelopes) are checked against the ``seen`` table in the same thread,
so two requests with one id cannot both get in: an append whose ids were all seen within its redelivery window is
acknowledged with those ids and queues nothing; an envelope with some seen ids queues the others. The ids it
queues are recorded in the commit that queues it.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue as stdqueue
import sqlite3
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace

import orjson

from edgewise.daemon.queue import (
    Append,
    Appended,
    FsyncPolicy,
    QueueError,
    QueueFull,
    connect,
    create_schema,
    is_full_error,
    meta_value,
    transaction,
)
from edgewise.state.sqlite import retry_locked

_INSERT = "INSERT INTO entries (source, kind, body, meta, first, count, ids, ingest_us) VALUES"
_ROW = "(?, ?, ?, ?, ?, ?, ?, ?)"
_PURGE_EVERY_S = 60.0


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
        create_schema(self.conn)
        self.fsync = fsync
        self.max_group = 1 if fsync == "always" else max_group
        self.next_event = meta_value(self.conn, "next_event")
        self.commits = 0
        self._purged = 0.0
        self._pending: stdqueue.SimpleQueue[tuple[Append, Waiter] | None] = stdqueue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="edgewise-queue-writer", daemon=True)
        self._thread.start()

    def submit(self, append: Append) -> Future[Appended]:
        future: Future[Appended] = Future()
        self._pending.put((append, future))
        return future

    def submit_async(self, append: Append) -> asyncio.Future[Appended]:
        """Like ``submit``, for a coroutine on the running loop: the futures of one commit are resolved with one
        wake-up of the loop, not one per request."""
        future: asyncio.Future[Appended] = asyncio.get_running_loop().create_future()
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
                    self._commit_or_fail(group)
                    return
                group.append(more)
            self._commit_or_fail(group)

    def _commit_or_fail(self, group: list[tuple[Append, Waiter]]) -> None:
        """Commit, and whatever goes wrong, answer every waiter: this thread must outlive any one bad commit."""
        try:
            self._commit(group)
        except Exception as exc:  # noqa: BLE001  # unexpected: the requests get an error, the writer lives on
            _settle(group, [QueueError(f"the queue could not write: {type(exc).__name__}: {exc}")] * len(group))

    def _commit(self, group: list[tuple[Append, Waiter]]) -> None:
        outcomes: list[Appended] = []
        number = self.next_event
        rows = []
        dead = []
        now_us = time.time_ns() // 1000
        try:
            appends, duplicates, seen_rows = self._redeliveries([a for a, _ in group], now_us)
        except sqlite3.Error as exc:
            _settle(group, [QueueError(f"the queue could not be read: {exc}")] * len(group))
            return
        for append, dup in zip(appends, duplicates, strict=True):
            outcomes.append(Appended(number, dup))
            if append is None:  # every id it chose was accepted before: acknowledged, nothing queued
                continue
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
            if dead or seen_rows:  # the rarer paths: dead letters, chosen ids; in one transaction with the rows
                with transaction(self.conn) as c:
                    if rows:
                        c.executemany(f"{_INSERT} {_ROW}", rows)
                    c.executemany("INSERT INTO dead (event_id, source, payload, ingest_us, failed_us, location, "
                                  "error) VALUES (?, ?, ?, ?, ?, ?, ?)", dead)
                    c.executemany("INSERT OR REPLACE INTO seen (id, until_us) VALUES (?, ?)", seen_rows)
                    if now_us / 1e6 - self._purged > _PURGE_EVERY_S:
                        c.execute("DELETE FROM seen WHERE until_us < ?", (now_us,))
                        self._purged = now_us / 1e6
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
        _settle(group, outcomes)

    def _redeliveries(self, appends: list[Append], now_us: int) -> tuple[
            list[Append | None], list[tuple[str, ...]], list[tuple[str, int]]]:
        """Each append without the ids it chose that were already accepted (None when that is all of them), those
        duplicates, and the (id, until) rows to record for the ids it queues."""
        checked = [i for a in appends if a.ids and a.redelivery_us for i in a.ids]
        if not checked:
            return list(appends), [()] * len(appends), []
        seen: set[str] = set()
        for start in range(0, len(checked), 500):
            chunk = checked[start:start + 500]
            seen.update(row[0] for row in self.conn.execute(
                f"SELECT id FROM seen WHERE until_us >= ? AND id IN ({', '.join('?' * len(chunk))})",  # noqa: S608  # placeholders only
                [now_us, *chunk]))
        kept: list[Append | None] = []
        duplicates: list[tuple[str, ...]] = []
        rows: list[tuple[str, int]] = []
        for append in appends:
            if not append.ids or not append.redelivery_us:
                kept.append(append)
                duplicates.append(())
                continue
            dup = tuple(i for i in append.ids if i in seen)
            fresh = [i for i in append.ids if i not in seen]
            seen.update(append.ids)  # the same id twice in one commit: the second is the duplicate
            duplicates.append(dup)
            rows.extend((i, now_us + append.redelivery_us) for i in fresh)
            if not fresh:
                kept.append(None)
            elif dup:
                kept.append(_without(append, set(dup)))
            else:
                kept.append(append)
        return kept, duplicates, rows


Waiter = Future[Appended] | asyncio.Future[Appended]


def _without(append: Append, ids: set[str]) -> Append:
    """An append of several events with chosen ids (a mesh peer's envelope, kept as a JSON array of payloads beside
    its ids) without the events of ``ids``: the peer resent some of them."""
    assert append.ids is not None and append.kind == "json", "only an envelope chooses more than one id"
    payloads = orjson.loads(append.body)
    payloads = payloads if isinstance(payloads, list) else [payloads]
    keep = [k for k, i in enumerate(append.ids) if i not in ids]
    meta = append.meta
    origin = (meta or {}).get("origin") or {}
    if "event_times" in origin:  # what the peer knew of each event goes with it (bodies.py)
        meta = {**(meta or {}), "origin": {**origin, "event_times": [origin["event_times"][k] for k in keep]}}
    return replace(append, body=orjson.dumps([payloads[k] for k in keep]), count=len(keep),
                   ids=[append.ids[k] for k in keep], meta=meta)


def _settle(group: Sequence[tuple[Append, Waiter]], outcomes: Sequence[Appended | QueueError]) -> None:
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Appended], Appended | QueueError]]] = {}
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


def _resolve(items: list[tuple[asyncio.Future[Appended], Appended | QueueError]]) -> None:
    for future, outcome in items:
        if future.done():  # cancelled: the client went away; the events are queued all the same
            continue
        if isinstance(outcome, QueueError):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
