"""``memory``: a dict behind a lock. Fast and forgotten when the process ends (the command-mode default)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping

from edgewise.state.base import UNSET, Prev, StateStore


class MemoryStore(StateStore):
    durable = False

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        return self._data.get(key)

    def put(self, key: str, value: bytes, *, prev: Prev = UNSET) -> bool:
        with self._lock:
            if prev is not UNSET and self._data.get(key) != prev:
                return False
            self._data[key] = value
            return True

    def delete(self, key: str, *, prev: Prev = UNSET) -> bool:
        with self._lock:
            current = self._data.get(key)
            if current is None or (prev is not UNSET and current != prev):
                return False
            del self._data[key]
            return True

    def scan(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        with self._lock:
            items = sorted((k, v) for k, v in self._data.items() if k.startswith(prefix))
        yield from items

    def apply(self, writes: Mapping[str, bytes | None], expect: Mapping[str, bytes | None] | None = None) -> bool:
        with self._lock:
            if expect and any(self._data.get(k) != v for k, v in expect.items()):
                return False
            for key, value in writes.items():
                if value is None:
                    self._data.pop(key, None)
                else:
                    self._data[key] = value
            return True
