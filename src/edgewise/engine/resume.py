"""Where a restarted command-mode run may resume its input.

A run with a durable state store commits, with the state, how many events of each source it processed and a
digest of their content. A later run on the same store skips those events only where its input provably starts
with exactly them: it reads (and holds) that many events, digests them and compares. Equal: the run resumes after
them, as if it had never stopped. Different (another file, other lines on stdin, a shorter input): the input is
new, so it is read from its start with the state kept, and on stdin under a new run id, so its events do not take
the ids of the earlier input's. The digest covers the events' payloads, not how they were split into batches.

Holding the prefix costs memory for as many events as the last commit covered; that is the price of never
skipping an event that was not processed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

import orjson

from edgewise.events import Batch, Payload


class Digest:
    """A running digest of events' payloads, the same whatever the batch boundaries. Off (``enabled`` false)
    where nothing is committed: it costs a serialisation of every event."""

    def __init__(self, enabled: bool = True) -> None:
        self._hash = hashlib.blake2b(digest_size=16)
        self.enabled = enabled

    def add(self, payloads: list[Payload]) -> None:
        if payloads and self.enabled:
            self._hash.update(orjson.dumps(payloads)[1:-1])
            self._hash.update(b",")

    def hex(self) -> str:
        return self._hash.hexdigest()


class ResumePoint:
    """Decides, while a source's batches are read, which of them a run must process.

    ``batches(read)`` yields what is to be processed, in order; ``resumed`` tells (once the decision is made)
    whether the committed prefix was skipped. ``digest`` covers everything yielded since the input's start,
    skipped events included."""

    def __init__(self, committed: int, committed_digest: str | None, *, durable: bool = True) -> None:
        self.committed = committed
        self.expected = committed_digest
        self.durable = durable
        self.digest = Digest(durable)
        self.resumed: bool | None = None if committed else False

    def batches(self, read: Iterable[Batch]) -> Iterator[Batch]:
        held: list[Batch] = []
        seen = 0
        for batch in read:
            if self.resumed is not None:
                self.digest.add(batch.payloads)
                yield batch
                continue
            take = min(len(batch), self.committed - seen)
            self.digest.add(batch.payloads[:take])
            seen += len(batch)
            held.append(batch)
            if seen < self.committed:
                continue
            self.resumed = self.digest.hex() == self.expected
            if self.resumed:
                rest = batch.slice(take, len(batch))
                self.digest.add(rest.payloads)
                yield rest
            else:
                yield from self._from_start(held)
            held = []
        if self.resumed is None:  # the input is shorter than what was committed: it is another one
            self.resumed = False
            yield from self._from_start(held)

    def _from_start(self, held: list[Batch]) -> Iterator[Batch]:
        self.digest = Digest(self.durable)
        for batch in held:
            self.digest.add(batch.payloads)
            yield batch
