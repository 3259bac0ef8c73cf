"""``sqlite``: the persistent default. One file, WAL journal, one table.

Every write is its own ``BEGIN IMMEDIATE`` transaction, so compare-and-swap is atomic across threads and across
processes sharing the file. ``synchronous=NORMAL`` (the WAL default recommendation) survives a killed process;
``FULL`` also survives power loss, at the cost of an fsync per commit.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

from edgewise.state.base import UNSET, Prev, StateStore

_SCHEMA = "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID"


T = TypeVar("T")


def retry_locked(attempt: Callable[[], T], timeout_s: float = 30.0, pause_s: float = 0.0002) -> T:
    """Run ``attempt`` until SQLite stops answering "database is locked" (another connection, perhaps in another
    process, holds the lock), for at most ``timeout_s``. Used where SQLite's own busy handler does not apply
    (switching to WAL) or sleeps too long (its back-off starts at 1 ms, which a group commit cannot afford)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(pause_s)


def enable_wal(db: sqlite3.Connection) -> None:
    retry_locked(lambda: db.execute("PRAGMA journal_mode=WAL"), pause_s=0.005)


class SqliteStore(StateStore):
    def __init__(self, path: str, *, synchronous: str = "NORMAL", timeout_s: float = 30.0) -> None:
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        self.path = path
        # autocommit mode (isolation_level=None): transactions are explicit, BEGIN IMMEDIATE takes the write lock
        self._db = sqlite3.connect(path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        enable_wal(self._db)
        self._db.execute(f"PRAGMA synchronous={'FULL' if synchronous.upper() == 'FULL' else 'NORMAL'}")
        self._db.execute(_SCHEMA)

    def _current(self, key: str) -> bytes | None:
        row = self._db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def get(self, key: str) -> bytes | None:
        with self._lock:
            return self._current(key)

    def put(self, key: str, value: bytes, *, prev: Prev = UNSET) -> bool:
        if prev is UNSET:
            return self.apply({key: value})
        return self.apply({key: value}, {key: prev})

    def delete(self, key: str, *, prev: Prev = UNSET) -> bool:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                current = self._current(key)
                if current is None or (prev is not UNSET and current != prev):
                    self._db.execute("ROLLBACK")
                    return False
                self._db.execute("DELETE FROM kv WHERE key = ?", (key,))
                self._db.execute("COMMIT")
                return True
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def scan(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        # a range query on the primary key; the upper bound is the prefix followed by the highest code point
        with self._lock:
            rows = self._db.execute("SELECT key, value FROM kv WHERE key >= ? AND key < ? ORDER BY key",
                                    (prefix, prefix + "\U0010ffff")).fetchall()
        for key, value in rows:
            yield key, bytes(value)

    def apply(self, writes: Mapping[str, bytes | None], expect: Mapping[str, bytes | None] | None = None) -> bool:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if expect and any(self._current(k) != v for k, v in expect.items()):
                    self._db.execute("ROLLBACK")
                    return False
                deletes = [(k,) for k, v in writes.items() if v is None]
                upserts = [(k, v) for k, v in writes.items() if v is not None]
                if deletes:
                    self._db.executemany("DELETE FROM kv WHERE key = ?", deletes)
                if upserts:
                    self._db.executemany("INSERT INTO kv (key, value) VALUES (?, ?) "
                                         "ON CONFLICT(key) DO UPDATE SET value = excluded.value", upserts)
                self._db.execute("COMMIT")
                return True
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        with self._lock:
            self._db.close()
