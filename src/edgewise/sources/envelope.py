"""Spool envelopes: the records ``envelope: true`` sinks (and the edge daemon's file spool) write,
``{"id", "event_time", "source", "payload"}``.

Reading a spool back must give the same events on both engines: a line whose object has exactly these four keys,
``id`` first, and an object ``payload`` is an envelope; its event is the payload, with the envelope's id and (where
it is an integer of microseconds) event time. The Spark engine's spool reader applies the same rule
(``engine/spark/sources.py``). Any other line is an event of its own.

>>> from edgewise.events import Batch
>>> b = Batch([{"id": "gh:1", "event_time": 5, "source": "gh", "payload": {"a": 1}}, {"a": 2}],
...           source="spool", ingest_time_us=9, event_times=[9, 9], id_prefix="spool:f:", offsets=[1, 2])
>>> u = unwrap_envelopes(b)
>>> u.payloads, u.ids(), u.event_times
([{'a': 1}, {'a': 2}], ['gh:1', 'spool:f:2'], [5, 9])
"""

from __future__ import annotations

from typing import Any

from edgewise.events import Batch

KEYS = frozenset(("id", "event_time", "source", "payload"))


def is_envelope(value: Any) -> bool:
    return (value.__class__ is dict and len(value) == 4 and value.keys() == KEYS and next(iter(value)) == "id"
            and value["payload"].__class__ is dict and value["id"] is not None)


def unwrap_envelopes(batch: Batch) -> Batch:
    """The batch with each envelope replaced by its event (its id and event time kept); the batch itself when it
    holds none."""
    payloads = batch.payloads
    # the hot path of every NDJSON read: one C-level pass over the sizes, the full check only for 4-key objects
    if 4 not in map(len, payloads) or not any(len(p) == 4 and is_envelope(p) for p in payloads):
        return batch
    ids = list(batch.ids())
    times = list(batch.event_times)
    events = []
    for i, p in enumerate(payloads):
        if is_envelope(p):
            ident = p["id"]
            ids[i] = ident if isinstance(ident, str) else str(ident)
            t = p["event_time"]
            if t.__class__ is int:
                times[i] = t
            p = p["payload"]
        events.append(p)
    return Batch(events, source=batch.source, ingest_time_us=batch.ingest_time_us, event_times=times, ids=ids)
