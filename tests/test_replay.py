"""The ``replay`` source and ``edgewise replay``: pace (fake clock and one real-time ratio), receive order across
files, ids as the ``file`` source gives them, duplicate lines of overlapping recordings, loops, malformed lines,
the other formats, and the command's stdout target (the daemon and MQTT targets: tests/daemon)."""

from __future__ import annotations

import heapq
import json
import subprocess
import sys
import time
from datetime import datetime, timedelta
from itertools import islice, pairwise
from pathlib import Path

import orjson
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from edgewise.clock import FakeClock, SystemClock
from edgewise.config import BuildContext
from edgewise.sources import recording
from edgewise.sources.base import SourceContext
from edgewise.sources.file import FileSource, FileSourceConfig
from edgewise.sources.lines import BYTES_PER_EVENT
from edgewise.sources.pacing import Pacer
from edgewise.sources.recording import receive_time_us
from edgewise.sources.replay import MIN_WAIT_S, ReplaySource, ReplaySourceConfig
from tests.conftest import ROOT

HSL = ROOT / "data" / "hsl-hfp-apc-dumps"
T0 = 1_700_000_000_000_000  # 2023-11-14T22:13:20Z in µs
HOUR_US = 3_600_000_000


SPELLINGS = ("Z", "+02:00", "ms")
"""How a test recording writes receive times: as HSL's recorders (``2023-11-14T22:13:20.000000Z``), in another zone
(``2023-11-15T00:13:20.000000+02:00``), or to the millisecond (``2023-11-14T22:13:20.000Z``, where that is exact)."""


def hfp_line(at_us: int, veh: int, n: int, spelling: str = "Z") -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at_us // 1_000_000)) + f".{at_us % 1_000_000:06d}Z"
    if spelling == "+02:00":
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at_us // 1_000_000 + 7200)) + \
            f".{at_us % 1_000_000:06d}+02:00"
    elif spelling == "ms" and at_us % 1000 == 0:
        stamp = stamp[:-4] + "Z"
    body = json.dumps({"VP": {"veh": veh, "n": n, "tst": stamp}})
    return f"{stamp} /hfp/v2/journey/ongoing/vp/bus/0018/{veh:05d}/1065/2/Rautatientori/06:05/1020106/3/60;24 {body}"


def write_recording(path: Path, offsets_s: list[float], veh: int = 1, spellings: tuple[str, ...] = ("Z",)) -> Path:
    """Line ``i`` at ``offsets_s[i]`` after ``T0``, its receive time spelled ``spellings[i % len(spellings)]``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # round, not int: 1.001 s is 1000999.99… µs as a float, and the oracle counts 1001000
    path.write_text("".join(hfp_line(T0 + round(s * 1_000_000), veh, i, spellings[i % len(spellings)]) + "\n"
                            for i, s in enumerate(offsets_s)))
    return path


def source(path: Path | str, **options: object) -> ReplaySource:
    return ReplaySource(ReplaySourceConfig(id="r", path=str(path), progress="off", **options), BuildContext("."))


def read(src: ReplaySource, clock: FakeClock | None = None, batch_size: int = 1024) -> tuple[list, list[str]]:
    """(batches as (ingest time, payload ns), problems) read with a fake clock starting at 0."""
    problems: list[str] = []
    ctx = SourceContext(clock or FakeClock(), problems.append, batch_size=batch_size)
    return [(b.ingest_time_us, b.ids(), b.payloads) for b in src.read(ctx)], problems


def test_each_message_is_sent_at_its_recorded_time_divided_by_speed(tmp_path: Path) -> None:
    rec = write_recording(tmp_path / "a.dump", [0, 1, 1, 3, 10])
    for speed in (1, 10, 0.5):
        batches, problems = read(source(rec, speed=speed))
        assert problems == []
        sent = [(at, [p["n"] for p in payloads]) for at, _, payloads in batches]
        assert sent == [(0, [0]), (int(1e6 / speed), [1, 2]), (int(3e6 / speed), [3]), (int(10e6 / speed), [4])]


def test_max_gap_shortens_silences_and_max_speed_never_waits(tmp_path: Path) -> None:
    rec = write_recording(tmp_path / "a.dump", [0, 1, 3601, 3602])
    batches, _ = read(source(rec, speed=1, max_gap="2s"))
    assert [at for at, _, _ in batches] == [0, 1_000_000, 3_000_000, 4_000_000]
    clock = FakeClock()
    batches, _ = read(source(rec, speed="max"), clock)
    assert clock.now_us() == 0 and [len(p) for _, _, p in batches] == [4]  # never slept: one batch


def test_a_line_recorded_before_the_previous_one_is_sent_at_once(tmp_path: Path) -> None:
    rec = write_recording(tmp_path / "a.dump", [0, 5, 2, 6])
    batches, _ = read(source(rec, speed=1))
    assert [(at, [p["n"] for p in ps]) for at, _, ps in batches] == [(0, [0]), (5_000_000, [1, 2]),
                                                                    (6_000_000, [3])]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.integers(0, 20_000), max_size=12), min_size=1, max_size=4),
       st.sampled_from([1.0, 7.5, "max"]), st.booleans(), st.sampled_from([1, 300, None]),
       st.sampled_from([("Z",), SPELLINGS, SPELLINGS[1:]]))
@example(files=[[1001]], speed=1.0, in_order=True, read_bytes=None, spellings=("Z",))  # found by this test: the
# recording writer truncated 1.001 s to 1000999 µs
def test_files_merge_in_receive_order_and_every_line_arrives_once(tmp_path_factory, files, speed, in_order,
                                                                  read_bytes, spellings) -> None:
    """Oracle: a line-by-line merge of the files by receive time (ties: file order), ``heapq.merge``, which sends
    a line recorded before the one preceding it in its file right after that one; ids as the ``file`` source's.
    ``read_bytes`` makes the merge read its files in blocks of about that many bytes (1: a line at a time);
    ``spellings`` mixes receive times written as HSL's recorders write them (compared as text) with others."""
    with pytest.MonkeyPatch.context() as patch:
        if read_bytes is not None:
            patch.setattr(recording, "BLOCK_BYTES", read_bytes)
        merged_as_oracle_says(tmp_path_factory.mktemp("rec"), files, speed, in_order, spellings)


def merged_as_oracle_says(base: Path, files: list[list[int]], speed: float | str, in_order: bool,
                          spellings: tuple[str, ...] = ("Z",)) -> None:
    per_file = []
    for k, offsets_ms in enumerate(files):
        offsets = sorted(offsets_ms) if in_order else offsets_ms
        write_recording(base / f"day{k}" / "hfp.dump", [ms / 1000 for ms in offsets], veh=k,
                        spellings=spellings[k % len(spellings):] + spellings[:k % len(spellings)])
        per_file.append([(T0 + ms * 1000, k, i + 1) for i, ms in enumerate(offsets)])
    expected = [f"r:day{k}/hfp.dump:{line}" for _, k, line in heapq.merge(*per_file)]
    batches, problems = read(source(base / "*" / "hfp.dump", speed=speed), batch_size=3)
    assert problems == []
    ids = [i for _, batch_ids, _ in batches for i in batch_ids]
    assert ids == expected
    if speed != "max":  # a message goes out when due (when the latest one recorded before it is), or with a
        # batch sent less than MIN_WAIT_S before it is due
        first = next(heapq.merge(*per_file))[0] if expected else 0  # the pace counts from the first one out
        latest = first
        for ingest, _, ps in batches:
            for p in ps:
                latest = max(latest, receive_time_us(p["received_at"]))
                due = int((latest - first) / float(speed))
                assert 0 <= due - ingest < MIN_WAIT_S * 1_000_000


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5_000), max_size=12), min_size=1, max_size=4),
       st.sampled_from(["hfp", "ndjson"]), st.sampled_from([1, 200, None]))
def test_order_time_replays_every_line_sorted_by_receive_time(tmp_path_factory, files, fmt, read_bytes) -> None:
    """``order: time``, for recordings not written in time order (grouped per vehicle): every line of every file
    once, in receive order; ties in file order, then line order. Oracle: Python's sort of (time, file, line)."""
    base = tmp_path_factory.mktemp("rec")
    lines = []
    for k, offsets_ms in enumerate(files):
        path = base / f"day{k}" / ("hfp.dump" if fmt == "hfp" else "rec.ndjson")
        if fmt == "hfp":
            write_recording(path, [ms / 1000 for ms in offsets_ms], veh=k)
        else:
            path.parent.mkdir(parents=True)
            path.write_text("".join(f'{{"ts": {ms}, "k": {k}}}\n' for ms in offsets_ms))
        lines += [(ms, k, i + 1) for i, ms in enumerate(offsets_ms)]
    name = "hfp.dump" if fmt == "hfp" else "rec.ndjson"
    expected = [f"r:day{k}/{name}:{line}" for _, k, line in sorted(lines)]
    options: dict[str, object] = {"order": "time", "speed": "max"}
    if fmt == "ndjson":
        options.update(format="ndjson", time_field="ts", time_unit="ms")
    with pytest.MonkeyPatch.context() as patch:
        if read_bytes is not None:
            patch.setattr(recording, "BLOCK_BYTES", read_bytes)
        batches, problems = read(source(base / "*" / name, **options), batch_size=5)
    assert problems == []
    assert [i for _, ids, _ in batches for i in ids] == expected


def test_replay_gives_the_events_and_ids_the_file_source_gives(tmp_path: Path) -> None:
    """On the bundled recordings: the same (id, payload) pairs as ``type: file``, in receive order."""
    replayed, problems = read(source(HSL / "*" / "hfp.dump", speed="max"))
    file_batches = list(FileSource(FileSourceConfig(id="r", path=str(HSL / "*" / "hfp.dump"), format="hfp"),
                                   BuildContext(".")).read(SourceContext(FakeClock(), problems.append)))
    assert problems == []
    as_replayed = [(i, p) for _, ids, ps in replayed for i, p in zip(ids, ps, strict=True)]
    as_filed = [(i, p) for b in file_batches for i, p in zip(b.ids(), b.payloads, strict=True)]
    assert len(as_replayed) == len(as_filed) > 3000
    assert sorted(as_replayed, key=lambda x: x[0]) == sorted(as_filed, key=lambda x: x[0])
    received = [p["received_at"] for _, p in as_replayed]
    assert received == sorted(received)


@pytest.mark.parametrize("batch_size", [1, 7, 100, 1024])
def test_batches_are_sized_as_the_file_source_sizes_them(batch_size: int) -> None:
    """At most ``batch_size`` messages and about ``batch_size * BYTES_PER_EVENT`` bytes of lines (HFP lines are
    ~400 bytes: 1,024 events make batches of about 320); full batches until the last one, and nothing lost."""
    paths = sorted(HSL.glob("*/hfp.dump"))
    lines = [line for path in paths for line in path.read_bytes().splitlines() if line.strip()]
    batches = list(source(HSL / "*" / "hfp.dump", speed="max").read(SourceContext(FakeClock(), print,
                                                                                     batch_size=batch_size)))
    sizes = [len(b) for b in batches]
    assert sum(sizes) == len(lines)
    full = sizes[0]
    assert set(sizes[:-1]) == {full} and 1 <= sizes[-1] <= full <= batch_size
    by_bytes = batch_size * BYTES_PER_EVENT / (sum(map(len, lines)) / len(lines))  # ~2.3, ~32, ~324 events
    assert max(1, int(0.5 * by_bytes)) <= full <= max(1, 2 * by_bytes)  # from the first lines' average length


@pytest.mark.parametrize("read_bytes", [None, 401, 4096])
def test_a_recording_with_crlf_line_ends_replays_as_the_same_recording_with_lf(tmp_path: Path, monkeypatch,
                                                                              read_bytes) -> None:
    """Oracle: the bundled recordings as they are. Written with ``\\r\\n``, read in blocks that cut some lines
    between their ``\\r`` and ``\\n``: the same messages, ids, order and duplicates left out; no ``\\r`` in a line."""
    if read_bytes is not None:
        monkeypatch.setattr(recording, "BLOCK_BYTES", read_bytes)
    for path in sorted(HSL.glob("*/hfp.dump")):
        target = tmp_path / path.parent.name / "hfp.dump"
        target.parent.mkdir()
        target.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    for dedupe in (False, True):
        lf, crlf = source(HSL / "*" / "hfp.dump", speed="max", dedupe_lines=dedupe), source(
            tmp_path / "*" / "hfp.dump", speed="max", dedupe_lines=dedupe)
        assert read(crlf) == read(lf)
        assert crlf.duplicates == lf.duplicates
    runs = list(crlf.recording(SourceContext(FakeClock(), print)).runs())
    assert sum(map(len, runs)) == 1990  # the bundled recordings' distinct lines
    assert not [raw for run in runs for raw in run.raws
                if not raw.endswith(b"\r\n") or b"\r" in raw[:-2] or b"\n" in raw[:-2]]


@pytest.mark.parametrize("read_bytes", [None, 401])
@pytest.mark.parametrize("end", [b"\n", b"\r\n", b""], ids=["lf", "crlf", "no-newline-at-the-end"])
def test_the_bytes_read_reach_the_recordings_size_exactly(tmp_path: Path, monkeypatch, read_bytes, end) -> None:
    """What the progress bar counts: at the end of a replay, every byte of every file once (lines with their
    ends, a last line without one included)."""
    if read_bytes is not None:
        monkeypatch.setattr(recording, "BLOCK_BYTES", read_bytes)
    for veh in (1, 2):
        lines = [hfp_line(T0 + i * 1_000_000, veh, i).encode() for i in range(7)]
        (tmp_path / f"{veh}.dump").write_bytes(b"\n".join(lines).replace(b"\n", end or b"\n") + end)
    rec = source(tmp_path / "*.dump", speed="max").recording(SourceContext(FakeClock(), print))
    assert sum(len(run) for run in rec.runs()) == 14
    assert rec.bytes_read == rec.total_bytes() > 0


@pytest.mark.parametrize("read_bytes", [None, 2048], ids=["whole-files", "small-blocks"])
def test_dedupe_lines_keeps_one_of_each_line_the_overlapping_recordings_share(monkeypatch, read_bytes) -> None:
    """Oracle: the distinct lines of all the bundled recordings (four of them record the same bus, same times);
    also with the merge reading a few lines of each file at a time (an instant's lines split across blocks)."""
    if read_bytes is not None:
        monkeypatch.setattr(recording, "BLOCK_BYTES", read_bytes)
    distinct = set()
    for path in sorted(HSL.glob("*/hfp.dump")):
        distinct |= {line.rstrip(b"\r\n") for line in path.read_bytes().splitlines() if line.strip()}
    src = source(HSL / "*" / "hfp.dump", speed="max", dedupe_lines=True)
    batches, _ = read(src)
    ids = [i for _, batch_ids, _ in batches for i in batch_ids]
    assert len(ids) == len(set(ids)) == len(distinct)
    assert src.duplicates == sum(1 for p in HSL.glob("*/hfp.dump") for x in p.read_bytes().splitlines()
                                 if x.strip()) - len(distinct)
    # the first file in name order keeps a shared line
    shared = "r:wrongServiceJourneySelectedAfterDeadRun/hfp.dump:1"
    assert shared in ids and "r:wrongServiceJourneySelectedBeforeDeadRun/hfp.dump:1" not in ids


def test_loop_starts_again_with_ids_naming_the_pass(tmp_path: Path) -> None:
    rec = write_recording(tmp_path / "a.dump", [0, 1])
    clock = FakeClock()
    src = source(rec, speed=1, loop=True)
    batches = list(islice(src.read(SourceContext(clock, print)), 6))
    assert [b.ids() for b in batches] == [["r:a.dump:1"], ["r:a.dump:2"], ["r:a.dump@2:1"], ["r:a.dump@2:2"],
                                          ["r:a.dump@3:1"], ["r:a.dump@3:2"]]
    assert [b.ingest_time_us for b in batches] == [0, 1_000_000, 1_000_000, 2_000_000, 2_000_000, 3_000_000]


def test_a_bad_line_in_the_middle_is_reported_and_the_rest_replayed(tmp_path: Path) -> None:
    rec = tmp_path / "a.dump"
    lines = [hfp_line(T0, 1, 0), "2023-11-14T22:13:21Z /hfp/v2/x {not json", "garbage",
             "yesterday /hfp/v2/x {\"VP\": {}}", hfp_line(T0 + 2_000_000, 1, 4)]
    rec.write_text("\n".join(lines) + "\n")
    batches, problems = read(source(rec, speed=1))
    assert [p["n"] for _, _, ps in batches for p in ps] == [0, 4]
    # lines without a receive time are found when read, a payload that does not decode when it is due
    by_line = dict(p.split(": ", 1) for p in problems)
    assert sorted(by_line) == [f"{rec}:2", f"{rec}:3", f"{rec}:4"]
    assert "malformed HFP JSON" in by_line[f"{rec}:2"]
    assert "the receive time 'garbage'" in by_line[f"{rec}:3"]
    assert "the receive time 'yesterday'" in by_line[f"{rec}:4"]


def test_hfp_times_written_otherwise_are_merged_by_their_time_and_absurd_ones_reported(tmp_path: Path) -> None:
    """Times HSL's recorders do not write (another zone, fewer digits, seconds since 1970) sort among the others by
    the time they mean; a time no calendar holds is a bad line, not a wait of millennia."""
    lines = [hfp_line(T0 + 2_000_000, 1, 0), hfp_line(T0, 1, 1, "+02:00"), "1700000001 " + hfp_line(T0, 1, 2)[28:],
             "99999999999999 " + hfp_line(T0, 1, 3)[28:], hfp_line(T0 + 3_000_000, 1, 4, "ms")]
    (tmp_path / "a.dump").write_text(lines[0] + "\n")
    (tmp_path / "b.dump").write_text("\n".join(lines[1:]) + "\n")
    batches, problems = read(source(tmp_path, speed="max"))
    assert [p["n"] for _, _, ps in batches for p in ps] == [1, 2, 0, 4]
    assert len(problems) == 1 and problems[0].startswith(f"{tmp_path / 'b.dump'}:3: ") and "out of range" in problems[0]


def test_ndjson_and_csv_recordings_take_their_time_field(tmp_path: Path) -> None:
    nd = tmp_path / "clicks.ndjson"
    nd.write_text("".join(json.dumps({"ts": 1_700_000_000_000 + ms, "n": i}) + "\n"
                          for i, ms in enumerate([0, 500, 500, 2000])))
    batches, _ = read(source(nd, format="ndjson", time_field="ts", time_unit="ms", speed=2))
    assert [(at, [p["n"] for p in ps]) for at, _, ps in batches] == [(0, [0]), (250_000, [1, 2]), (1_000_000, [3])]
    csv = tmp_path / "readings.csv"
    csv.write_text("at,value\n2024-01-01T00:00:00Z,1\n2024-01-01T00:00:04+00:00,2\n\n2024-01-01T00:00:02,3\n")
    batches, _ = read(source(csv, format="csv", time_field="at", speed=1))
    assert [(at, ids, [p["value"] for p in ps]) for at, ids, ps in batches] == [
        (0, ["r:readings.csv:2"], ["1"]), (4_000_000, ["r:readings.csv:3", "r:readings.csv:5"], ["2", "3"])]


@settings(max_examples=300)
@given(st.datetimes(), st.integers(0, 27), st.sampled_from(b"0123456789-T:.Z +x"))
@example(datetime(2024, 2, 29, 23, 59, 59, 999999), 9, ord("0"))  # Feb 29 of a leap year, made Feb 20
@example(datetime(2023, 2, 28), 9, ord("9"))  # Feb 29 of a year that is not a leap year
@example(datetime(2000, 2, 29), 0, ord("1"))  # 1000 is not a leap year, 2000 is
@example(datetime(1, 1, 1), 3, ord("0"))  # year 0
def test_an_hfp_sort_key_is_taken_as_text_exactly_when_it_is_a_time(moment, place, char) -> None:
    """Oracle: ``datetime``. An HFP line whose first 28 bytes are a time written as HSL writes it, in UTC to the
    microsecond, is sorted by those bytes (``_hfp_keys``); anything else, one character changed, is not (it is
    parsed and rewritten so, or reported): the text check accepts what ``datetime`` reads, and nothing more."""
    key = moment.isoformat(timespec="microseconds").encode() + b"Z "
    assert recording._hfp_keys([key + b"/hfp/v2/x {}"]) == ([key], True)
    assert recording.hfp_key_us(key) == receive_time_us(key.decode().strip())
    assert recording.hfp_key(receive_time_us(key.decode().strip())) == key
    changed = key[:place] + bytes([char]) + key[place + 1:]
    try:
        reads = datetime.strptime(changed[:26].decode(), "%Y-%m-%dT%H:%M:%S.%f")
        as_written = reads.isoformat(timespec="microseconds").encode() + b"Z " == changed
    except ValueError:
        as_written = False
    assert (recording._hfp_keys([changed + b"/hfp/v2/x {}"]) is not None) == as_written


@settings(max_examples=300)
@given(st.datetimes(), st.lists(st.integers(0, 3_599_999_999) | st.integers(0, 40 * HOUR_US), min_size=1,
                                max_size=40),
       st.booleans(), st.integers(0, 10**6), st.integers(0, 27), st.sampled_from(b"0123456789-T:.Z +x"))
@example(datetime(2024, 2, 13, 16), [0, 1, 2], True, 1, 14, ord("9"))  # minute 90 between two good keys
@example(datetime(2024, 2, 13, 16), [0, 1, 61_000_000], True, 1, 17, ord("9"))  # second 90, still in order
@example(datetime(2024, 2, 28, 23), [0, 3_599_999_999], True, 0, 9, ord("9"))  # the block ends on Feb 29th
@example(datetime(2024, 2, 13, 16), [0, HOUR_US, HOUR_US + 1, HOUR_US + 2, 2 * HOUR_US], True, 2, 14, ord("9"))
# minute 90 in the middle of the middle one of three hours (out of order then)
@example(datetime(2024, 2, 13, 16), [0, HOUR_US, HOUR_US + 1, HOUR_US + 2, 2 * HOUR_US], True, 3, 14, ord("9"))
# minute 90 in the last key of the middle hour (still in order)
@example(datetime(2024, 2, 28, 22), [0, HOUR_US, 2 * HOUR_US], True, 2, 9, ord("9"))  # the third hour on Feb 29th
@example(datetime(2024, 2, 13), [h * HOUR_US for h in range(12)], True, 10, 14, ord("9"))  # more hours than are
# checked one by one, minute 90 in the 11th
def test_a_block_of_hfp_keys_is_taken_as_text_exactly_when_each_one_is(start, offsets_us, in_order, which, place,
                                                                         char) -> None:
    """Oracle: ``datetime``, key by key. A block's keys are checked together (``_hfp_keys``: by their layout, and,
    when the block is in order, an hour at a time by the first and the last key and every key's tens of seconds);
    one key changed anywhere in the block, in order or not, within an hour or across many, makes the block's keys
    not taken exactly when that key is not a time as HSL writes it."""
    moments = [start + timedelta(microseconds=us) for us in (sorted(offsets_us) if in_order else offsets_us)
               if start + timedelta(microseconds=us) <= datetime.max]
    assume(moments)
    keys = [m.isoformat(timespec="microseconds").encode() + b"Z " for m in moments]
    assert recording._hfp_keys([key + b"/hfp/v2/x {}" for key in keys]) == (keys, keys == sorted(keys))
    i = which % len(keys)
    keys[i] = keys[i][:place] + bytes([char]) + keys[i][place + 1:]
    try:
        reads = datetime.strptime(keys[i][:26].decode(), "%Y-%m-%dT%H:%M:%S.%f")
        as_written = reads.isoformat(timespec="microseconds").encode() + b"Z " == keys[i]
    except ValueError:
        as_written = False
    taken = recording._hfp_keys([key + b"/hfp/v2/x {}" for key in keys])
    assert (taken == (keys, keys == sorted(keys))) if as_written else (taken is None)


def test_receive_times_in_every_spelling() -> None:
    assert receive_time_us("2024-02-13T16:33:00.005271Z") == 1707841980005271
    assert receive_time_us("2024-02-13T18:33:00.005271+02:00") == 1707841980005271
    assert receive_time_us("13/Feb/2024:16:33:00 +0000") == 1707841980000000
    assert receive_time_us(1707841980.5) == 1707841980500000
    assert receive_time_us("1707841980500", "ms") == 1707841980500000
    for bad in (None, True, "", "soon"):
        with pytest.raises(Exception, match="not"):
            receive_time_us(bad)


def test_the_real_clock_keeps_the_ratio_of_speeds(tmp_path: Path) -> None:
    """The one real-time check (ratio, not absolute): a 2 s recording at speed 1 and at speed 10. The bounds are
    wide because the machine is shared; the exact schedule is checked with the fake clock above."""
    rec = write_recording(tmp_path / "a.dump", [0, 0.5, 1.0, 1.5, 2.0])

    def took(speed: float) -> float:
        started = time.monotonic()
        list(source(rec, speed=speed).read(SourceContext(SystemClock(), print)))
        return time.monotonic() - started

    slow, fast = took(1), took(10)
    assert slow >= 2.0  # it cannot be early
    assert 4 < slow / fast <= 20, (slow, fast)


def test_pacer_refuses_a_speed_that_is_not_above_zero() -> None:
    with pytest.raises(ValueError, match="above 0"):
        Pacer(FakeClock(), 0)


def test_replay_config_errors_name_file_line_and_field(tmp_path: Path) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("version: 1\nsources:\n  - {id: r, type: replay, path: x.ndjson, format: ndjson}\n"
                        "  - {id: s, type: replay, path: y.dump, speed: 0}\npipelines: [{id: p, steps: []}]\n")
    out = subprocess.run([sys.executable, "-m", "edgewise", "validate", str(pipeline)], capture_output=True,
                         text=True)
    assert out.returncode == 2
    assert "p.yaml:3" in out.stderr and "time_field" in out.stderr
    assert "p.yaml:4" in out.stderr and "speed" in out.stderr


def edgewise(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgewise", *args], capture_output=True, text=True, timeout=120)


def test_the_command_writes_the_paced_events_to_stdout() -> None:
    out = edgewise("replay", str(HSL / "*" / "hfp.dump"), "--speed", "max", "--dedupe-lines")
    assert out.returncode == 0, out.stderr
    events = [orjson.loads(line) for line in out.stdout.splitlines()]
    replayed, _ = read(source(HSL / "*" / "hfp.dump", speed="max", dedupe_lines=True))
    assert events == [p for _, _, ps in replayed for p in ps]
    assert f"replayed {len(events)} messages" in out.stderr and "duplicate lines left out" in out.stderr
    assert "Traceback" not in out.stderr


def test_the_command_explains_bad_arguments() -> None:
    for args, expected in ((("--speed", "0"), "above 0"), (("--to", "ftp://x"), "expected http://"),
                           (("--format", "ndjson"), "time_field")):
        out = edgewise("replay", str(HSL / "stopChange" / "hfp.dump"), *args)
        assert out.returncode == 2 and expected in out.stderr and "Traceback" not in out.stderr, out.stderr
    missing = edgewise("replay", "no/such/*.dump")
    assert missing.returncode == 2 and "no file matches" in missing.stderr  # as a missing pipeline file


def test_the_docs_pipeline_replays_the_bundled_recordings_on_schedule(tmp_path: Path) -> None:
    """docs/replay.md's pipeline, run with a fake clock: every distinct VP message arrives, and the replay takes
    the time a plain computation over the lines says (silences over 5 s shortened, at 60x)."""
    import re

    from edgewise.config import load
    from edgewise.testing import run_sources

    text = re.search(r"```yaml\n(.*?)```", (ROOT / "docs" / "replay.md").read_text(encoding="utf-8"), re.S)
    assert text is not None
    (tmp_path / "data").symlink_to(ROOT / "data")
    where = tmp_path / "examples" / "replay"
    where.mkdir(parents=True)
    (where / "p.yaml").write_text(text.group(1))
    plan = load(str(where / "p.yaml"))
    clock = FakeClock()
    result = run_sources(plan, [plan.source(s) for s in plan.sources], clock=clock)
    distinct = {line for p in HSL.glob("*/hfp.dump") for line in p.read_bytes().splitlines() if line.strip()}
    assert len(result.outputs["positions"]) == sum(b'{"VP":' in line for line in distinct)
    times = sorted(receive_time_us(line.split(b" ", 1)[0].decode()) for line in distinct)
    expected_us = sum(min(b - a, 5_000_000) for a, b in pairwise(times)) / 60
    assert abs(clock.now_us() - expected_us) < 1_000, (clock.now_us(), expected_us)


def test_what_spark_cannot_read_is_refused_at_its_line_before_spark_starts(tmp_path: Path) -> None:
    """A replay source, a glob that matches nothing, an NDJSON spool path that is not a directory: all three
    reported at their file and line, exit 2, and no JVM (no checkpoint made, no Spark log)."""
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("version: 1\nsources:\n  - {id: a, type: replay, path: x.dump}\n"
                        "  - {id: b, type: file, path: 'none/*.dump', format: hfp}\n"
                        "  - {id: c, type: file, path: p.yaml}\npipelines: [{id: p, steps: []}]\n")
    for command in (["spark", str(pipeline), "--once", "--checkpoint", str(tmp_path / "ck")],
                    ["explain", str(pipeline), "--engine", "spark"]):
        out = edgewise(*command)
        assert out.returncode == 2, out.stderr
        lines = out.stderr.splitlines()
        assert lines[1].startswith(f"{pipeline}:3:") and "not replay" in lines[1]
        assert lines[2].startswith(f"{pipeline}:4:") and "no file matches" in lines[2]
        assert lines[3].startswith(f"{pipeline}:5:") and "not a directory" in lines[3]
        assert "log4j" not in out.stderr and not (tmp_path / "ck").exists()
