"""The state store contract, shared by ``memory``, ``sqlite`` and ``redis``.

A store maps text keys to byte values. Besides get/put/delete and listing by prefix it offers

* compare-and-swap: ``put(key, value, prev=...)`` / ``delete(key, prev=...)`` succeed only when the stored value
  is still ``prev`` (``None`` meaning "absent") — binge's AtomicPut/AtomicDelete, so two processes sharing one
  store never lose an update: the loser re-reads and tries again;
* ``apply(writes, expect)``: one atomic transaction that checks every expectation and then writes every key
  (``None`` deletes). The engine commits a step's state changes together with the input position this way, so a
  restart never sees one without the other.

Values are opaque bytes; stateful steps encode their own (JSON).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from enum import Enum
from typing import Final


class _Unset(Enum):
    UNSET = "unset"


UNSET: Final = _Unset.UNSET
"""``prev`` default: write unconditionally."""

Prev = bytes | None | _Unset


class StateStore(ABC):
    """Keys are text, values bytes. Implementations are safe to use from several threads."""

    durable: bool = True
    """False for stores that lose everything with the process (the engine then skips commits)."""

    @abstractmethod
    def get(self, key: str) -> bytes | None:
        """The value, or ``None`` when the key is absent."""

    @abstractmethod
    def put(self, key: str, value: bytes, *, prev: Prev = UNSET) -> bool:
        """Write the value. With ``prev``, only if the current value equals it (``None``: the key is absent);
        returns whether it was written."""

    @abstractmethod
    def delete(self, key: str, *, prev: Prev = UNSET) -> bool:
        """Remove the key. With ``prev``, only if the current value equals it; returns whether a key was removed
        (unconditional deletes of an absent key return ``False``)."""

    @abstractmethod
    def scan(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        """Every ``(key, value)`` whose key starts with ``prefix``, in key order."""

    @abstractmethod
    def apply(self, writes: Mapping[str, bytes | None], expect: Mapping[str, bytes | None] | None = None) -> bool:
        """Atomically: if every key in ``expect`` holds its expected value (``None``: absent), write ``writes``
        (``None`` deletes) and return ``True``; otherwise change nothing and return ``False``."""

    def close(self) -> None:  # noqa: B027  # optional hook
        """Release connections and files."""

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
