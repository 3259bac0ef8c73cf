"""Recordings: files of timestamped messages, read in receive order across all files.

A recording is one or more files in a line format. Each line has a receive time: for ``hfp`` the line's first
field (``<receive time> <topic> <JSON>``, what HSL's recorders write), for the other formats the ``time_field`` of
the decoded record: an ISO-8601 text (``2024-02-13T16:33:00.005Z``), an Apache log time
(``10/Oct/2000:13:55:36 -0700``) or a number of ``time_unit`` since the Unix epoch.

Files are merged by receive time (each file is read a block at a time, in its own order: a line earlier than the one
before it in its file is replayed at once). HFP lines are merged as bytes and decoded when they go out; their sort
keys are their receive times as text (``_hfp_keys``), which costs a fraction of converting each to a number. Overlapping
recordings often hold the same message more than once; with ``dedupe_lines`` a line identical, byte for byte, to one
already replayed at the same receive time is left out (the first file, in name order, keeps it), which takes memory
for one instant's lines only.
"""

from __future__ import annotations

import heapq
import os
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import accumulate, compress
from operator import itemgetter
from typing import Any, Literal

from edgewise.errors import SourceError
from edgewise.sources.formats import LineDecoder, Payload, csv_rows, decode_ndjson, decoded_lines, text_lines
from edgewise.sources.lines import line_chunks

RecordingFormat = Literal["hfp", "ndjson", "csv", "clf", "regex"]
TimeUnit = Literal["s", "ms", "us"]
_PER_UNIT = {"s": 1_000_000, "ms": 1_000, "us": 1}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
_iso = datetime.fromisoformat


@dataclass(slots=True)
class Run:
    """Recorded messages in replay order, in columns: message ``i`` is ``at[i]``, ``files[i]``, ... A replay
    moves runs, not one object per message: at ``speed: max`` the per-message work is the decoding alone."""

    at: list[Any]
    """Receive times as sort keys, one kind per recording (``Recording.us`` reads one): ``hfp`` lines' are the
    line's first 28 bytes, the time in UTC as ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` and the space after it (a time
    written otherwise is rewritten so), the other formats' are microseconds since the epoch."""
    files: list[int]
    """Each message's file: its place in name order (``Recording.files``)."""
    lines: list[int]
    """Line numbers in the file (from 1; a CSV row's line, the header being line 1)."""
    raws: list[bytes]
    """The lines as recorded (what ``edgewise replay --to mqtt://`` publishes for ``hfp``); ``hfp`` lines keep their
    line ends (``_hfp_timed``), the other formats' lines are without."""
    payloads: list[Payload]
    file: int | None = None
    """The one file all the messages come from, if they do (their ids then share a prefix)."""
    in_order: bool | None = None
    """Whether ``at`` is known to be nondecreasing (None: not known; ``_File.fill`` checks)."""

    def __len__(self) -> int:
        return len(self.at)

    def slice(self, start: int, stop: int) -> Run:
        return Run(self.at[start:stop], self.files[start:stop], self.lines[start:stop], self.raws[start:stop],
                   self.payloads[start:stop], self.file)

    def select(self, mask: list[bool]) -> Run:
        return Run.of([list(compress(column, mask)) for column in self._columns()], self.file)

    def extend(self, other: Run) -> None:
        if len(self) == 0:
            self.file = other.file
        elif self.file != other.file:
            self.file = None
        for mine, theirs in zip(self._columns(), other._columns(), strict=True):
            mine.extend(theirs)

    def _columns(self) -> tuple[list[Any], ...]:
        return self.at, self.files, self.lines, self.raws, self.payloads

    @staticmethod
    def of(columns: list[list[Any]], file: int | None) -> Run:
        at, files, lines, raws, payloads = columns
        return Run(at, files, lines, raws, payloads, file)

    @staticmethod
    def empty() -> Run:
        return Run([], [], [], [], [])


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


HFP_KEY_BYTES = 28
"""An HFP line's sort key: its first 28 bytes, a receive time in UTC as ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` and a space."""
_LEAP_YEAR = rb"(?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
_HFP_KEYS = re.compile(  # dates as datetime takes them (month lengths, leap years; no year 0), any number of keys
    rb"(?:(?!0000)(?:\d{4}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1\d|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)"
    rb"|" + _LEAP_YEAR + rb"-02-29)T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d\.\d{6}Z )*")
_HFP_KEY_LAYOUT = b"0000-00-00T00:00:00.000000Z "
_DATE_AND_HOUR = len(b"YYYY-MM-DDTHH")
_TENS_OF_SECONDS = len(b"YYYY-MM-DDTHH:MM:")
_DIGITS_AS_ZERO = bytes(b"0"[0] if b"0"[0] <= byte <= b"9"[0] else byte for byte in range(256))


def _hfp_keys(lines: list[bytes]) -> tuple[list[bytes], bool] | None:
    """The sort keys of HFP lines (``HFP_KEY_BYTES``) and whether they are in order, or None if some line does not
    start with a time so written.

    Times of one layout in one zone sort as text sorts, so the merge compares keys as bytes, converting none to a
    number. Whether every key is such a time is checked on all of them at once, in C: their layout by one
    ``translate`` (every digit made ``0``); then, when the keys are in order, by ``_in_order_keys_are_times``;
    other blocks by ``_HFP_KEYS`` whole, which costs several times more (BENCHMARKS.md, replay)."""
    keys = [line[:HFP_KEY_BYTES] for line in lines]
    if not keys:
        return keys, True
    joined = b"".join(keys)
    if joined.translate(_DIGITS_AS_ZERO) != _HFP_KEY_LAYOUT * len(keys):
        return None
    in_order = keys == sorted(keys)
    if in_order and _in_order_keys_are_times(keys, joined):
        return keys, in_order
    return (keys, in_order) if _HFP_KEYS.fullmatch(joined) else None


_MAX_HOURS_CHECKED_APART = 8
"""A block of keys in order spanning more hours than this is checked by ``_HFP_KEYS`` whole: one check per hour
would cost more."""


def _in_order_keys_are_times(keys: list[bytes], joined: bytes) -> bool:
    """Whether keys in order and in ``_HFP_KEY_LAYOUT`` (``joined``: the keys joined) are all times, checked an
    hour at a time: within an hour, the first and the last key by ``_HFP_KEYS``, and every key's tens of seconds
    as every 28th byte. A text between two others shares the bytes they share (the date and hour), and its minute
    is between theirs; its second is not bounded so. False also where the block spans too many hours to be worth
    it (``_MAX_HOURS_CHECKED_APART``)."""
    if joined[_TENS_OF_SECONDS::HFP_KEY_BYTES].translate(None, b"012345"):
        return False
    start = 0
    for _ in range(_MAX_HOURS_CHECKED_APART):
        hour = keys[start][:_DATE_AND_HOUR]
        # the first key of a later hour: every key of this hour is ``hour`` followed by bytes below 0xff
        stop = bisect_left(keys, hour + b"\xff", start)
        if not _HFP_KEYS.fullmatch(keys[start] + keys[stop - 1]):
            return False
        if stop == len(keys):
            return True
        start = stop
    return False


def hfp_key(at_us: int) -> bytes:
    """The sort key of an HFP line received at ``at_us`` (a time not written as ``HFP_KEY_BYTES`` says)."""
    try:
        moment = _EPOCH + timedelta(microseconds=at_us)
    except OverflowError:
        raise SourceError(f"the receive time is {at_us} µs from 1970, out of range") from None
    return f"{moment.replace(tzinfo=None).isoformat(timespec='microseconds')}Z ".encode()


def hfp_key_us(key: bytes) -> int:
    """The receive time of an HFP sort key, in microseconds since the epoch."""
    return _epoch_us(_iso(key[:HFP_KEY_BYTES - 2].decode()))


BLOCK_BYTES = 64 * 1024
"""How much of each file the merge reads at a time. Larger blocks save little (the merge works on whole blocks
already) and hold more of the lines outside the CPU's caches until they are decoded: a single file read 4 MB at a
time replayed slower than the ``file`` source reads it (BENCHMARKS.md, replay)."""


class Recording:
    """The lines of some files, decoded, with their receive times, merged in receive order.

    The merge works on runs, not lines: each file is read a block of lines at a time, and every buffered line that
    no unread line can precede goes out at once: all of a file's block while the other files' buffered lines are
    later (recordings of different times), else the buffered lines of several files stably sorted by receive time
    in one ``sorted`` call. The order is exactly a line-by-line merge's (``heapq.merge`` of the files); a line
    earlier than the one before it in its file sorts as that one (``_File.keys``), so it goes out right after it.
    """

    def __init__(self, files: list[tuple[str, str]], *, fmt: RecordingFormat, decoder: LineDecoder | None,
                 time_field: str, time_unit: TimeUnit = "s", delimiter: str = ",", columns: list[str] | None = None,
                 null_values: list[str] | None = None, dedupe_lines: bool = False, in_time_order: bool = False,
                 malformed: Callable[[str], None]) -> None:
        self.files = files
        """``(path, name)`` of each file, in name order."""
        self.fmt = fmt
        self.decode = decoder or decode_ndjson
        self.time_field = time_field
        self.time_unit = time_unit
        self.delimiter = delimiter
        self.columns = columns
        self.null_values = null_values or []
        self.dedupe_lines = dedupe_lines
        self.in_time_order = in_time_order
        """Read the whole recording, then replay it sorted by receive time (``order: time``): for recordings whose
        lines are not in time order (grouped per vehicle, say), which a merge of files would replay as written."""
        self.malformed = malformed
        self.duplicates = 0
        """Lines left out by ``dedupe_lines`` so far."""
        self.bytes_read = 0
        """Bytes of the files read so far (for progress)."""
        self._instant: object = None  # dedupe_lines: the receive time (key) and the lines of the last instant
        self._seen = set[bytes]()

    def us(self, key: Any) -> int:
        """A receive time (a ``Run.at`` key) in microseconds since the epoch."""
        return hfp_key_us(key) if self.fmt == "hfp" else int(key)

    def total_bytes(self) -> int:
        return sum(os.path.getsize(path) for path, _ in self.files)

    def runs(self, size: int = 1024) -> Iterator[Run]:
        """The whole recording in receive order (ties: file order, then line order), as runs of up to ``size``
        messages. ``hfp`` runs come undecoded (``payloads`` empty): ``decoded`` decodes what goes out, as late as
        possible."""
        self._instant, self._seen = None, set()
        for merged in (self._all_in_time_order(),) if self.in_time_order else self._merged():
            for start in range(0, len(merged), size):
                run = merged.slice(start, start + size) if start or len(merged) > size else merged
                if self.dedupe_lines:
                    run = self._deduped(run)
                if len(run):
                    yield run

    def _all_in_time_order(self) -> Run:
        """Every line of the recording, stably sorted by receive time (ties: file order, then line order)."""
        whole = Run.empty()
        for order, (path, _) in enumerate(self.files):
            for block in self._blocks(path, order, BLOCK_BYTES):
                whole.extend(block)
        places = sorted(range(len(whole)), key=whole.at.__getitem__)
        # hfp lines come undecoded (no payloads yet): an empty column stays empty
        run = Run.of([[column[i] for i in places] if column else [] for column in whole._columns()], whole.file)
        run.in_order = True
        return run

    def _deduped(self, run: Run) -> Run:
        keep = []
        instant, seen = self._instant, self._seen
        for at, raw in zip(run.at, run.raws, strict=True):
            if at != instant:
                instant, seen = at, set()
            line = raw.rstrip(b"\r\n")  # hfp lines keep their ends: a line is the same whatever ends it
            keep.append(line not in seen)
            seen.add(line)
        self._instant, self._seen = instant, seen
        dropped = len(keep) - sum(keep)
        self.duplicates += dropped
        return run.select(keep) if dropped else run

    def decoded(self, run: Run) -> Run:
        """A run's messages with their payloads, in replay order (other formats are decoded when read).

        HFP lines carry their receive time up front, so the merge orders lines and only what goes out is decoded,
        right before it goes: the merge holds bytes, not objects for the garbage collector to walk, and a batch's
        payloads are made just before they are used and dropped (decoded earlier and held while a batch filled up,
        the same work was slower: BENCHMARKS.md, the replay section). A line that does not decode is reported and
        left out."""
        if self.fmt != "hfp" or run.payloads:
            return run
        decode = self.decode
        try:
            # a new run: ``run`` stays undecoded, so whoever holds it (the replay's list of a run's batches) does
            # not keep this batch's payloads alive after it went out
            return Run(run.at, run.files, run.lines, run.raws, [decode(raw) for raw in run.raws], run.file)
        except SourceError:
            pass
        keep, payloads = [], []
        for f, number, raw in zip(run.files, run.lines, run.raws, strict=True):
            try:
                payloads.append(decode(raw))
                keep.append(True)
            except SourceError as exc:
                self.malformed(f"{self.files[f][0]}:{number}: {exc}")
                keep.append(False)
        run = run.select(keep)
        run.payloads = payloads
        return run

    def _merged(self) -> Iterator[Run]:
        files = [_File(order, self._blocks(path, order, BLOCK_BYTES)) for order, (path, _) in enumerate(self.files)]
        # Two heaps of (key, file order): where each open file's buffered lines end, and where they start.
        ends = [f.end() for f in files if f.fill()]
        heads = [f.head() for f in files if f.pos < len(f.keys)]
        heapq.heapify(ends)
        heapq.heapify(heads)
        while ends:
            if len(ends) == 1:  # the rest of the last file, as read
                last = files[ends[0][1]]
                yield last.take(len(last.keys))
                while last.fill():
                    yield last.take(len(last.keys))
                return
            # The file whose buffered lines end first (at key h) bounds what may go out now: no unread line of any
            # file sorts before h, so every buffered line up to h goes (of files after it in name order, only
            # lines before h). Only that file runs out of buffered lines; it reads its next block.
            bound = heapq.heappop(ends)
            h, order = bound
            taking = []
            while heads and heads[0] <= bound:
                taking.append(heapq.heappop(heads)[1])
            if len(taking) == 1:  # the bound file alone (it is always taken): its lines as read
                yield files[order].take(len(files[order].keys))
            else:
                taking.sort()
                yield _sorted([files[o] for o in taking], h, order, heads)
            refill = files[order]
            if refill.fill():
                heapq.heappush(ends, refill.end())
                heapq.heappush(heads, refill.head())

    def _blocks(self, path: str, order: int, size: int) -> Iterator[Run]:
        """A file's messages in its own order, a block at a time; a line that does not decode or has no readable
        time is reported and left out."""
        with open(path, "rb") as fh:
            if self.fmt == "csv":
                data = fh.read()
                self.bytes_read += len(data)
                yield self._timed(path, order, list(self._csv(data)))
                return
            first, done = 1, 0
            for lines in line_chunks(fh, size):
                position = fh.tell()  # what was read of the file, however its lines end
                self.bytes_read += position - done
                done = position
                if self.fmt == "hfp":  # decoded after the merge (decoded)
                    yield self._hfp_timed(path, order, lines, first)
                else:
                    yield self._timed(path, order, list(decoded_lines(lines, first, path, self.decode,
                                                                      self.malformed)))
                first += len(lines)

    def _hfp_timed(self, path: str, order: int, lines: list[bytes], first: int) -> Run:
        """HFP lines with the receive time each starts with (as a sort key: ``_hfp_keys``), not decoded yet; blank
        lines are skipped, a line without a readable time is reported and left out. The lines keep their line ends:
        the decoder skips them, and a stripped copy of every line cost the merge more than all its sorting (its
        copies were made long before they were decoded: BENCHMARKS.md, replay)."""
        checked = _hfp_keys(lines)
        if checked is not None:  # the common case: every line starts with a time as HSL's recorders write it
            keys, in_order = checked
            return Run(keys, [order] * len(keys), list(range(first, first + len(lines))), lines, [], file=order,
                       in_order=in_order)
        keys, numbers, raws = [], [], []
        for number, line in enumerate(lines, start=first):
            text = line.rstrip(b"\r\n")
            if not text.strip():
                continue
            try:
                keys.append(hfp_key(receive_time_us(text.partition(b" ")[0].decode("utf-8", "replace"))))
            except SourceError as exc:
                self.malformed(f"{path}:{number}: the line's first field: {exc}")
                continue
            numbers.append(number)
            raws.append(line)
        return Run(keys, [order] * len(keys), numbers, raws, [], file=order)

    def _timed(self, path: str, order: int, decoded: list[tuple[int, bytes, Payload]]) -> Run:
        field, unit = self.time_field, self.time_unit
        try:
            at_us = [receive_time_us(payload.get(field), unit) for _, _, payload in decoded]
        except SourceError:  # some line has no readable time: find it (and any other), report, leave out
            good, at_us = [], []
            for number, raw, payload in decoded:
                try:
                    at_us.append(receive_time_us(payload.get(field), unit))
                    good.append((number, raw, payload))
                except SourceError as exc:
                    self.malformed(f"{path}:{number}: field {field!r}: {exc}")
            decoded = good
        return Run(at_us, [order] * len(at_us), [n for n, _, _ in decoded], [r for _, r, _ in decoded],
                   [p for _, _, p in decoded], file=order)

    def _csv(self, data: bytes) -> Iterator[tuple[int, bytes, Payload]]:
        lines = text_lines(data).read().split("\n")
        first = 1 if self.columns else 2
        rows = csv_rows(lines, self.delimiter, self.columns, self.null_values)
        for offset, row in enumerate(rows):
            if not any(row.values()):
                continue
            number = first + offset
            raw = lines[number - 1].rstrip("\r").encode() if number - 1 < len(lines) else b""
            yield number, raw, row


class _File:
    """One file of a merge: the block of its lines read and not yet sent (from ``pos``), and their sort keys."""

    def __init__(self, order: int, blocks: Iterator[Run]) -> None:
        self.order = order
        self.blocks = blocks
        self.block = Run.empty()
        self.keys: list[Any] = []
        """The latest receive time up to each buffered line (nondecreasing): a line's place in the merge."""
        self.pos = 0
        self._latest: Any = None  # the latest receive time (key) read, None before the first

    def fill(self) -> bool:
        """Read the next block that holds a message; False at the end of the file."""
        for block in self.blocks:
            if len(block):
                self.block, self.pos = block, 0
                at = block.at
                latest = at[0] if self._latest is None else self._latest
                in_order = block.in_order if block.in_order is not None else at == sorted(at)  # checked in C
                if at[0] >= latest and in_order:  # as recorders write
                    self.keys = at
                else:
                    self.keys = list(accumulate(at, max, initial=latest))[1:]
                self._latest = self.keys[-1]
                return True
        return False

    def end(self) -> tuple[Any, int]:
        return self.keys[-1], self.order

    def head(self) -> tuple[Any, int]:
        return self.keys[self.pos], self.order

    def take(self, stop: int) -> Run:
        run = self.block.slice(self.pos, stop) if self.pos or stop < len(self.keys) else self.block
        self.pos = stop
        return run


def _sorted(taking: list[_File], h: Any, order: int, heads: list[tuple[Any, int]]) -> Run:
    """The buffered lines of ``taking`` (files in file order) that may go out before key ``h`` of file ``order``
    (the bound: of files after it in name order, only lines before ``h``), merged by sort key; the sort is stable,
    so ties keep file order. A file with lines left pushes its next head on ``heads``.

    The lines are gathered column by column and picked in sorted order once: the merge's cost per line, when many
    files share each instant, is these few list operations (BENCHMARKS.md, replay)."""
    keys: list[Any] = []
    columns: tuple[list[Any], ...] = ([], [], [], [], [])
    for f in taking:
        start = f.pos
        stop = len(f.keys) if f.order == order else (
            bisect_right if f.order < order else bisect_left)(f.keys, h, start)
        keys += f.keys[start:stop]
        for mine, theirs in zip(columns, f.block._columns(), strict=True):
            if theirs:  # payloads are empty where lines are decoded after the merge (hfp)
                mine += theirs[start:stop]
        f.pos = stop
        if stop < len(f.keys):
            heapq.heappush(heads, f.head())
    pick = itemgetter(*sorted(range(len(keys)), key=keys.__getitem__))
    at, files, lines, raws, payloads = columns
    return Run(list(pick(at)), list(pick(files)), list(pick(lines)), list(pick(raws)),
               list(pick(payloads)) if payloads else [])
