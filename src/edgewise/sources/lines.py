"""Turning a byte stream of lines into batches of events: shared by the stdin and file sources."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from io import BytesIO
from typing import IO

from edgewise.events import Batch
from edgewise.sources.base import SourceContext
from edgewise.sources.envelope import unwrap_envelopes
from edgewise.sources.formats import LineDecoder, Payload, decode_ndjson, decoded_lines, ndjson_batch

BYTES_PER_EVENT = 128
"""Sources that read lines make a batch of about ``batch_size * BYTES_PER_EVENT`` bytes of them (at most
``batch_size`` events): ``batch_size`` typical events, fewer large ones. A batch's payloads are made, used and
dropped together; many large ones at once leave the CPU's caches (a replay of HFP lines of ~400 bytes was
markedly slower in batches of 1,024 than of ~320: BENCHMARKS.md, the replay section)."""


def batch_events(batch_size: int, lines: Sequence[bytes]) -> int:
    """How many lines like ``lines`` make a batch: about ``batch_size * BYTES_PER_EVENT`` bytes, at least one,
    at most ``batch_size``.

    >>> batch_events(1024, [b"x" * 404] * 10), batch_events(1024, [b"{}"] * 10), batch_events(1024, [])
    (324, 1024, 1024)
    """
    if not lines:
        return batch_size
    average = max(1, sum(map(len, lines)) // len(lines))
    return max(1, min(batch_size, batch_size * BYTES_PER_EVENT // average))


def line_batches(stream: IO[bytes], *, source_id: str, id_prefix: str, where: str, decoder: LineDecoder | None,
                 ctx: SourceContext) -> Iterator[Batch]:
    """Read lines, decode each (NDJSON when ``decoder`` is None), yield batches. Blank lines are ignored;
    malformed ones are reported as ``<where>:<line>: <problem>`` and skipped. NDJSON spool envelopes give their
    event, with its id and event time (``sources/envelope.py``).

    The fast path decodes a whole chunk of lines at once and numbers them with a ``range``; only a chunk that
    holds a blank or bad line is redone line by line. Where the engine gave ``ctx.head`` (NDJSON only), a chunk
    first goes through it, line by line, and the batch holds what the pipeline's first steps gave.
    """
    first = 1
    head = ctx.head if decoder is None else None
    for lines in line_chunks(stream, ctx.batch_size * BYTES_PER_EVENT * (head.read_factor if head else 1)):
        numbers = range(first, first + len(lines))
        first += len(lines)
        if head is not None:
            through_head = head.run(lines, numbers.start, source_id, id_prefix, ctx)
            if through_head is not None:
                yield through_head
                continue
        payloads = ndjson_batch(lines) if decoder is None else None
        if payloads is not None:
            yield unwrap_envelopes(make_batch(payloads, numbers, source_id, id_prefix, ctx))
            continue
        decoded = list(decoded_lines(lines, numbers.start, where, decoder or decode_ndjson, ctx.malformed))
        payloads, offsets = [p for _, _, p in decoded], [n for n, _, _ in decoded]
        if payloads:
            batch = make_batch(payloads, offsets, source_id, id_prefix, ctx)
            yield batch if decoder is not None else unwrap_envelopes(batch)


def line_chunks(stream: IO[bytes], size: int) -> Iterator[list[bytes]]:
    """Lists of whole lines, each still ending in ``\\n`` (a last line without one is given one), as soon as they
    are available: ``read1`` returns what a pipe holds instead of waiting for ``size`` bytes, so a slow producer
    (``tail -f | edgewise run``) sees its events processed.

    The line ends stay because finding them is the costly part of cutting a read into lines: ``readlines`` looks
    for them with ``memchr``, where ``bytes.split`` compares byte by byte (28 against 119 ns for a 240-byte line:
    BENCHMARKS.md, the YSB stateless section). Readers strip them only where they need to (orjson skips them)."""
    read = getattr(stream, "read1", stream.read)
    rest = b""  # the last line read, not ended yet
    while True:
        chunk = read(size)
        if not chunk:
            if rest:
                yield [rest + b"\n"]
            return
        lines = BytesIO(chunk).readlines()
        if rest:
            lines[0] = rest + lines[0]
        rest = b"" if lines[-1].endswith(b"\n") else lines.pop()
        if lines:
            yield lines


def make_batch(payloads: list[Payload], offsets: Sequence[int], source_id: str, id_prefix: str,
               ctx: SourceContext, kind: type[Batch] = Batch) -> Batch:
    """A batch of a source's events, received now: their ingest time is their event time until one is assigned.
    ``kind``: a subclass of ``Batch`` (the engine's fused head makes its own)."""
    now = ctx.clock.now_us()
    return kind(payloads, source=source_id, ingest_time_us=now, event_times=[now] * len(payloads),
                id_prefix=id_prefix, offsets=offsets)
