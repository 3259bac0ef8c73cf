"""The event model: a payload (the JSON object) plus metadata, carried in columnar batches.

Each event has a stable unique ``id`` (assigned at ingest and used by sinks as the idempotency key), an event
time, an ingestion time and the id of the source it came from. The engine moves events in ``Batch`` objects:
parallel columns instead of one Python object per event, because a per-event object costs more than the rest
of a stateless pipeline (see BENCHMARKS.md).

Ids are built lazily: a source gives a prefix (``<source id>:<run or file identity>:``; one per event where a
batch holds events of several files) and an offset per event, and the string is only made when something (a sink,
a dead letter) asks for it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import itemgetter
from typing import Any

Payload = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Event:
    """One event, for code that handles events one at a time (tests, dead letters, the daemon API)."""

    payload: Payload
    id: str
    event_time_us: int
    ingest_time_us: int
    source: str


def equal_runs(values: Sequence[Any]) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of equal neighbouring values, in order: where a batch is cut into parts that
    are each handled one way (the events a step's ``when`` applies to, one source's events)."""
    runs: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[start]:
            runs.append((start, i))
            start = i
    return runs


class KeyedRows:
    """The group keys of a batch's events and their aggregate arguments (``Batch.keyed``). ``values``: where each
    key is one value that is its own group key (``group_keys.all_as_is``), those values, and the key tuples are
    made only if asked for."""

    __slots__ = ("_keys", "rows", "values")

    def __init__(self, keys: list[tuple[Any, ...]] | None, rows: list[Any] | None, values: list[Any] | None = None
                 ) -> None:
        self._keys = keys
        self.rows = rows
        self.values = values

    @property
    def keys(self) -> list[tuple[Any, ...]]:
        if self._keys is None:
            assert self.values is not None
            self._keys = list(zip(self.values))
        return self._keys


class Batch:
    """Events in columns: ``payloads[i]`` has id ``ids()[i]`` and event time ``event_times[i]``.

    A batch is never mutated after it is built; steps return new batches (``select``, ``replace``).
    """

    __slots__ = ("_ids", "_offsets", "_prefixes", "event_times", "id_prefix", "ingest_time_us", "keyed", "payloads",
                 "source")

    def __init__(
        self,
        payloads: list[Payload],
        *,
        source: str,
        ingest_time_us: int,
        event_times: list[int],
        id_prefix: str = "",
        offsets: Sequence[int] | None = None,
        ids: list[str] | None = None,
        id_prefixes: Sequence[str] | None = None,
    ) -> None:
        """``id_prefixes``: each event's own prefix, in place of ``id_prefix`` (events of several files)."""
        if ids is None and offsets is None:
            raise ValueError("a batch needs ids or offsets")
        self.payloads = payloads
        self.keyed: KeyedRows | None = None
        """The group keys and aggregate arguments a keyed step reads, where whoever made the batch computed them
        (the engine's fused head): the step then takes them as they are, with no failures among them."""
        self.source = source
        self.ingest_time_us = ingest_time_us
        self.event_times = event_times
        self.id_prefix = id_prefix
        self._offsets = offsets
        self._ids = ids
        self._prefixes = None if ids is not None else id_prefixes

    def __len__(self) -> int:
        return len(self.payloads)

    def ids(self) -> list[str]:
        if self._ids is None:
            assert self._offsets is not None
            if self._prefixes is not None:
                self._ids = list(map(str.__add__, self._prefixes, map(str, self._offsets)))
            else:
                prefix = self.id_prefix
                self._ids = [f"{prefix}{n}" for n in self._offsets]
        return self._ids

    def select(self, mask: Sequence[bool]) -> Batch:
        """The events whose mask entry is true, in order."""
        return Batch(
            list(compress(self.payloads, mask)),
            source=self.source,
            ingest_time_us=self.ingest_time_us,
            event_times=list(compress(self.event_times, mask)),
            id_prefix=self.id_prefix,
            offsets=None if self._offsets is None else list(compress(self._offsets, mask)),
            ids=None if self._ids is None else list(compress(self._ids, mask)),
            id_prefixes=None if self._prefixes is None else list(compress(self._prefixes, mask)),
        )

    def take(self, indexes: Sequence[int]) -> Batch:
        """The events at ``indexes``, in that order."""
        if not indexes:
            return self.slice(0, 0)
        pick = itemgetter(*indexes) if len(indexes) > 1 else (lambda seq: (seq[indexes[0]],))

        def picked(values: Sequence[Any] | None) -> list[Any] | None:
            return None if values is None else list(pick(values))

        return Batch(
            list(pick(self.payloads)),
            source=self.source,
            ingest_time_us=self.ingest_time_us,
            event_times=list(pick(self.event_times)),
            id_prefix=self.id_prefix,
            offsets=picked(self._offsets),
            ids=picked(self._ids),
            id_prefixes=picked(self._prefixes),
        )

    def slice(self, start: int, stop: int) -> Batch:
        return Batch(
            self.payloads[start:stop],
            source=self.source,
            ingest_time_us=self.ingest_time_us,
            event_times=self.event_times[start:stop],
            id_prefix=self.id_prefix,
            offsets=None if self._offsets is None else self._offsets[start:stop],
            ids=None if self._ids is None else self._ids[start:stop],
            id_prefixes=None if self._prefixes is None else self._prefixes[start:stop],
        )

    def replace(self, payloads: list[Payload]) -> Batch:
        """The same events with new payloads (one per event, same order)."""
        return Batch(
            payloads,
            source=self.source,
            ingest_time_us=self.ingest_time_us,
            event_times=self.event_times,
            id_prefix=self.id_prefix,
            offsets=self._offsets,
            ids=self._ids,
            id_prefixes=self._prefixes,
        )

    def renamed(self, old_prefix: str, new_prefix: str) -> Batch:
        """The same events with ``old_prefix`` of their ids replaced by ``new_prefix`` (ids without it kept)."""
        if self._ids is None and self._prefixes is None and self.id_prefix == old_prefix:
            return Batch(self.payloads, source=self.source, ingest_time_us=self.ingest_time_us,
                         event_times=self.event_times, id_prefix=new_prefix, offsets=self._offsets)
        ids = [new_prefix + i[len(old_prefix):] if i.startswith(old_prefix) else i for i in self.ids()]
        return Batch(self.payloads, source=self.source, ingest_time_us=self.ingest_time_us,
                     event_times=self.event_times, ids=ids)

    def events(self) -> Iterator[Event]:
        for payload, event_id, event_time in zip(self.payloads, self.ids(), self.event_times, strict=True):
            yield Event(payload, event_id, event_time, self.ingest_time_us, self.source)

    @staticmethod
    def concat(batches: Sequence[Batch]) -> Batch:
        """Join batches into one (sources may differ; the first source names it). Ids stay lazy where every
        batch's are (each event keeps its prefix and offset), else they are materialised."""
        if len(batches) == 1:
            return batches[0]
        payloads: list[Payload] = []
        times: list[int] = []
        for b in batches:
            payloads.extend(b.payloads)
            times.extend(b.event_times)
        first = batches[0] if batches else None
        source = first.source if first else ""
        ingest_us = first.ingest_time_us if first else 0
        if any(b._ids is not None for b in batches):
            ids: list[str] = []
            for b in batches:
                ids.extend(b.ids())
            return Batch(payloads, source=source, ingest_time_us=ingest_us, event_times=times, ids=ids)
        prefixes: list[str] = []
        offsets: list[int] = []
        for b in batches:
            prefixes.extend(b._prefixes if b._prefixes is not None else [b.id_prefix] * len(b))
            assert b._offsets is not None
            offsets.extend(b._offsets)
        return Batch(payloads, source=source, ingest_time_us=ingest_us, event_times=times, offsets=offsets,
                     id_prefixes=prefixes)

    @staticmethod
    def of_events(events: Sequence[Event]) -> Batch:
        return Batch(
            [e.payload for e in events],
            source=events[0].source if events else "",
            ingest_time_us=events[0].ingest_time_us if events else 0,
            event_times=[e.event_time_us for e in events],
            ids=[e.id for e in events],
        )
