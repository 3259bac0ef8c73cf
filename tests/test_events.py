"""The event model's batches: lazy ids (one prefix, or one per event) give the ids an eager batch gives, through
every operation steps use."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from edgewise.events import Batch

PREFIXES = ["r:a.dump:", "r:b/a.dump:", "r:a.dump@2:"]


@settings(max_examples=200)
@given(st.lists(st.tuples(st.sampled_from(PREFIXES), st.integers(1, 10**6)), max_size=20),
       st.lists(st.booleans(), max_size=20), st.integers(0, 20), st.integers(0, 20), st.booleans())
def test_ids_from_per_event_prefixes_are_the_eager_ids_through_every_operation(events, mask, start, stop,
                                                                               one_prefix) -> None:
    """Oracle: the same batch built with its ids written out."""
    if one_prefix:
        events = [(PREFIXES[0], n) for _, n in events]
    prefixes, offsets = [p for p, _ in events], [n for _, n in events]
    payloads = [{"n": n} for n in offsets]
    times = list(range(len(events)))
    lazy = (Batch(payloads, source="r", ingest_time_us=0, event_times=times, id_prefix=PREFIXES[0], offsets=offsets)
            if one_prefix else
            Batch(payloads, source="r", ingest_time_us=0, event_times=times, id_prefixes=prefixes, offsets=offsets))
    eager = Batch(payloads, source="r", ingest_time_us=0, event_times=times,
                  ids=[f"{p}{n}" for p, n in events])
    mask = (mask + [True] * len(events))[:len(events)]
    for made in (lambda b: b, lambda b: b.select(mask), lambda b: b.slice(start, stop),
                 lambda b: b.replace([{} for _ in b.payloads]), lambda b: b.renamed("r:a.dump:", "r:x:"),
                 lambda b: b.select(mask).renamed("r:b/", "r:c/"), lambda b: Batch.concat([b, b.slice(start, stop)])):
        assert made(lazy).ids() == made(eager).ids()
        assert [e.id for e in made(lazy).events()] == made(eager).ids()


@settings(max_examples=200)
@given(st.lists(st.tuples(st.lists(st.tuples(st.sampled_from(PREFIXES), st.integers(1, 10**6)), max_size=5),
                          st.sampled_from(["eager", "one prefix", "prefixes"])), max_size=5))
def test_concat_keeps_ids_lazy_and_equal_to_the_eager_ids(parts) -> None:
    """``concat`` of batches with lazy ids (the daemon's entries; one prefix, or one per event) keeps them lazy;
    one eager batch among them makes them eager. Oracle: the ids written out, part after part."""
    batches, want = [], []
    for events, how in parts:
        if how == "one prefix":
            events = [(PREFIXES[0], n) for _, n in events]
        payloads = [{"n": n} for _, n in events]
        times = [n for _, n in events]
        ids = [f"{p}{n}" for p, n in events]
        offsets = [n for _, n in events]
        batches.append(
            Batch(payloads, source="r", ingest_time_us=0, event_times=times, ids=ids) if how == "eager" else
            Batch(payloads, source="r", ingest_time_us=0, event_times=times, id_prefix=PREFIXES[0], offsets=offsets)
            if how == "one prefix" else
            Batch(payloads, source="r", ingest_time_us=0, event_times=times, offsets=offsets,
                  id_prefixes=[p for p, _ in events]))
        want += ids
    joined = Batch.concat(batches)
    if len(batches) > 1:
        assert (joined._ids is None) == all(how != "eager" for _, how in parts)
    assert joined.ids() == want
    assert [e.id for e in joined.events()] == want
    assert joined.event_times == [t for b in batches for t in b.event_times]
