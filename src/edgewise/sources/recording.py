"""Recordings: files of timestamped messages, read in receive order across all files.

A recording is one or more files in a line format. Each line has a receive time: for ``hfp`` the line's first
field (``<receive time> <topic> <JSON>``, what HSL's recorders write), for the other formats the ``time_field`` of
the decoded record: an ISO-8601 text (``2024-02-13T16:33:00.005Z``), an Apache log time
(``10/Oct/2000:13:55:36 -0700``) or a number of ``time_unit`` since the Unix epoch.

Files are merged by receive time (each file is read lazily, in its own order: a line earlier than the one before it
in its file is replayed at once). Overlapping recordings often hold the same message more than once; with
``dedupe_lines`` a line identical, byte for byte, to one already replayed at the same receive time is left out
(the first file, in name order, keeps it), which takes memory for one instant's lines only.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, NamedTuple

from edgewise.errors import SourceError
from edgewise.sources.formats import LineDecoder, Payload, csv_rows, decode_ndjson, decoded_lines, text_lines

RecordingFormat = Literal["hfp", "ndjson", "csv", "clf", "regex"]
TimeUnit = Literal["s", "ms", "us"]
_PER_UNIT = {"s": 1_000_000, "ms": 1_000, "us": 1}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)


class Recorded(NamedTuple):
    """One recorded message. Ordered as a tuple: by receive time, then file order, then line (never further)."""

    at_us: int
    """The receive time, microseconds since the epoch."""
    order: int
    """The file's place in name order: messages received at the same time go out in file order."""
    line: int
    name: str
    """The file's name in event ids (``sources/paths.py``)."""
    raw: bytes
    """The line as recorded (no line end): what ``edgewise replay --to mqtt://`` publishes for ``hfp``."""
    payload: Payload


def receive_time_us(value: Any, unit: TimeUnit = "s") -> int:
    """A receive time as microseconds since the epoch. Raises ``SourceError`` for what is not a time."""
    if isinstance(value, str):
        try:  # the common case, first: ISO-8601 as recorders write it
            return _epoch_us(datetime.fromisoformat(value))
        except ValueError:
            return _other_time_us(value, unit)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value * _PER_UNIT[unit])
    raise SourceError(f"the receive time is {value!r}, not a time")


def _other_time_us(value: str, unit: TimeUnit) -> int:
    text = value.strip()
    for parse in (datetime.fromisoformat, _clf_time):
        try:
            return _epoch_us(parse(text))
        except ValueError:
            continue
    try:
        return int(float(text) * _PER_UNIT[unit])
    except ValueError:
        raise SourceError(f"the receive time {value!r} is not an ISO-8601 time, a log time or a number") from None


def _clf_time(text: str) -> datetime:
    return datetime.strptime(text, "%d/%b/%Y:%H:%M:%S %z")


def _epoch_us(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # recorders write UTC; a time without a zone is taken as UTC
    return (moment - _EPOCH) // _ONE_US  # exact: no float on the way


class Recording:
    """The lines of some files, decoded, with their receive times, merged in receive order."""

    def __init__(self, files: list[tuple[str, str]], *, fmt: RecordingFormat, decoder: LineDecoder | None,
                 time_field: str, time_unit: TimeUnit = "s", delimiter: str = ",", columns: list[str] | None = None,
                 dedupe_lines: bool = False, malformed: Callable[[str], None]) -> None:
        self.files = files
        """``(path, name)`` of each file, in name order."""
        self.fmt = fmt
        self.decode = decoder or decode_ndjson
        self.time_field = time_field
        self.time_unit = time_unit
        self.delimiter = delimiter
        self.columns = columns
        self.dedupe_lines = dedupe_lines
        self.malformed = malformed
        self.duplicates = 0
        """Lines left out by ``dedupe_lines`` so far."""
        self.bytes_read = 0
        """Bytes of the files read so far (for progress)."""

    def total_bytes(self) -> int:
        return sum(os.path.getsize(path) for path, _ in self.files)

    def __iter__(self) -> Iterator[Recorded]:
        # Recorded orders as a tuple, so the merge needs no key function (it is on every message's path)
        merged = heapq.merge(*(self._file(path, name, order) for order, (path, name) in enumerate(self.files)))
        if not self.dedupe_lines:
            yield from merged
            return
        instant = -1
        seen: set[bytes] = set()
        for record in merged:
            if record.at_us != instant:
                instant, seen = record.at_us, set()
            if record.raw in seen:
                self.duplicates += 1
                continue
            seen.add(record.raw)
            yield record

    def _file(self, path: str, name: str, order: int) -> Iterator[Recorded]:
        """A file's messages in its own order, with their receive times; a line that does not decode or has no
        readable time is reported and left out."""
        field, unit = self.time_field, self.time_unit
        for number, raw, payload in self._records(path):
            try:
                at = receive_time_us(payload.get(field), unit)
            except SourceError as exc:
                where = f"field {field!r}" if self.fmt != "hfp" else "the line's first field"
                self.malformed(f"{path}:{number}: {where}: {exc}")
                continue
            yield Recorded(at, order, number, name, raw, payload)

    def _records(self, path: str) -> Iterator[tuple[int, bytes, Payload]]:
        with open(path, "rb") as fh:
            if self.fmt == "csv":
                data = fh.read()
                self.bytes_read += len(data)
                yield from self._csv(data, path)
                return
            yield from decoded_lines(self._counted(fh), 1, path, self.decode, self.malformed)

    def _counted(self, lines: Iterator[bytes]) -> Iterator[bytes]:
        """The lines, counting their bytes (the progress bar's measure)."""
        for line in lines:
            self.bytes_read += len(line)
            yield line

    def _csv(self, data: bytes, path: str) -> Iterator[tuple[int, bytes, Payload]]:
        lines = text_lines(data).read().split("\n")
        first = 1 if self.columns else 2
        rows = csv_rows(lines, self.delimiter, self.columns)
        for offset, row in enumerate(rows):
            if not any(row.values()):
                continue
            number = first + offset
            raw = lines[number - 1].rstrip("\r").encode() if number - 1 < len(lines) else b""
            yield number, raw, row
