"""Turning a byte stream of lines into batches of events: shared by the stdin and file sources."""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

from edgewise.errors import SourceError
from edgewise.events import Batch
from edgewise.sources.base import SourceContext
from edgewise.sources.formats import LineDecoder, Payload, decode_ndjson, ndjson_batch


def line_batches(stream: IO[bytes], *, source_id: str, id_prefix: str, where: str, decoder: LineDecoder | None,
                 ctx: SourceContext, skip_lines: int = 0) -> Iterator[Batch]:
    """Read lines, decode each (NDJSON when ``decoder`` is None), yield batches. Blank lines are ignored;
    malformed ones are reported as ``<where>:<line>: <problem>`` and skipped."""
    size = ctx.batch_size
    lineno = 0
    pending: list[bytes] = []
    numbers: list[int] = []
    for raw in stream:
        lineno += 1
        if lineno <= skip_lines:
            continue
        line = raw.rstrip(b"\r\n")
        if not line.strip():
            continue
        pending.append(line)
        numbers.append(lineno)
        if len(pending) >= size:
            yield from _decode(pending, numbers, source_id, id_prefix, where, decoder, ctx)
            pending, numbers = [], []
    if pending:
        yield from _decode(pending, numbers, source_id, id_prefix, where, decoder, ctx)


def _decode(lines: list[bytes], numbers: list[int], source_id: str, id_prefix: str, where: str,
            decoder: LineDecoder | None, ctx: SourceContext) -> Iterator[Batch]:
    payloads = ndjson_batch(lines) if decoder is None else None
    offsets = numbers
    if payloads is None:
        decode = decoder or decode_ndjson
        payloads = []
        offsets = []
        for line, n in zip(lines, numbers, strict=True):
            try:
                payloads.append(decode(line))
                offsets.append(n)
            except SourceError as exc:
                ctx.malformed(f"{where}:{n}: {exc}")
    if payloads:
        yield make_batch(payloads, offsets, source_id, id_prefix, ctx)


def make_batch(payloads: list[Payload], offsets: list[int], source_id: str, id_prefix: str,
               ctx: SourceContext) -> Batch:
    now = ctx.clock.now_us()
    return Batch(payloads, source=source_id, ingest_time_us=now, event_times=[now] * len(payloads),
                 id_prefix=id_prefix, offsets=offsets)
