"""``entwine``: signed, hash-chained timelines (docs/entwine.md), through the commands users run: ``edgewise run``
with the step, ``keygen``, ``verify``, ``prove``; each kind of tampering must make ``verify`` fail at the right
position, a ``kill -9`` during appends must leave a timeline that verifies."""

from __future__ import annotations

import base64
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_cli import edgewise

PIPELINE = """
version: 1
sources: [{{id: in, type: file, path: {input}}}]
pipelines:
  - id: p
    steps:
      - entwine: {{id: e, timeline: {timeline}, key: {key}, into: receipt{extra}}}
"""


def _keygen(path: Path) -> str:
    done = edgewise("keygen", str(path))
    assert done.returncode == 0, done.stderr
    public = done.stdout.decode().strip()
    assert len(public) == 64 and int(public, 16) >= 0
    return public


def _run(tmp: Path, name: str, events: list[dict[str, object]], extra: str = "", key: str = "a.key",
         input_name: str | None = None) -> list[dict[str, object]]:
    """``edgewise run`` of the step over ``events`` in a file (``input_name``, default one per call): events are
    named ``in:<file>:<line>``, the same file read again gives the same events (a replay)."""
    input_name = input_name or f"{name}-{time.monotonic_ns()}.ndjson"
    (tmp / input_name).write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    pipeline = tmp / f"{name}.yaml"
    pipeline.write_text(PIPELINE.format(timeline=name, key=key, extra=extra, input=input_name))
    done = edgewise("run", str(pipeline))
    assert done.returncode == 0, done.stderr
    return [orjson.loads(line) for line in done.stdout.splitlines()]


def _verify(*args: str) -> subprocess.CompletedProcess[bytes]:
    return edgewise("verify", *args)


def _lines(timeline: Path) -> list[bytes]:
    return (timeline / "entries.log").read_bytes().splitlines(keepends=True)


def _write(timeline: Path, lines: list[bytes]) -> None:
    (timeline / "entries.log").write_bytes(b"".join(lines))


@pytest.fixture
def timeline(tmp_path: Path) -> tuple[Path, str]:
    """A timeline of 6 events written by `edgewise run`, and its owner's public key."""
    public = _keygen(tmp_path / "a.key")
    out = _run(tmp_path, "tl", [{"n": i, "v": i * 1.5} for i in range(6)], input_name="input.ndjson")
    assert [r["receipt"]["position"] for r in out] == list(range(6))  # type: ignore[index]
    assert {r["receipt"]["timeline"] for r in out} == {public}  # type: ignore[index]
    return tmp_path / "tl", public


def test_keygen_writes_a_private_key_only_its_owner_reads_and_never_overwrites(tmp_path: Path) -> None:
    _keygen(tmp_path / "k.key")
    assert stat.S_IMODE(os.stat(tmp_path / "k.key").st_mode) == 0o600
    again = edgewise("keygen", str(tmp_path / "k.key"))
    assert again.returncode == 2 and b"never overwrites" in again.stderr
    assert b"Traceback" not in again.stderr


def test_an_untouched_timeline_verifies_with_the_owners_key(timeline: tuple[Path, str]) -> None:
    directory, public = timeline
    done = _verify(str(directory), "--pubkey", public)
    assert done.returncode == 0, done.stdout
    assert b"6 entries hold" in done.stdout


def _assert_bad_at(directory: Path, public: str, lines: list[bytes], position: int) -> None:
    """The timeline rewritten with ``lines`` fails `verify` under the owner's key, naming ``position``."""
    _write(directory, lines)
    done = _verify(str(directory), "--pubkey", public)
    assert done.returncode == 1 and f"position {position} is bad".encode() in done.stdout, done.stdout


def test_one_changed_byte_fails_at_its_position(timeline: tuple[Path, str]) -> None:
    directory, public = timeline
    lines = _lines(directory)
    entry = lines[3]
    i = entry.index(b'"digest":"') + len(b'"digest":"')
    lines[3] = entry[:i] + (b"0" if entry[i:i + 1] != b"0" else b"1") + entry[i + 1:]
    _assert_bad_at(directory, public, lines, 3)


def test_a_dropped_entry_fails_where_it_was(timeline: tuple[Path, str]) -> None:
    directory, public = timeline
    lines = _lines(directory)
    del lines[2]
    _assert_bad_at(directory, public, lines, 2)


def test_two_swapped_entries_fail_at_the_first(timeline: tuple[Path, str]) -> None:
    directory, public = timeline
    lines = _lines(directory)
    lines[1], lines[4] = lines[4], lines[1]
    _assert_bad_at(directory, public, lines, 1)


def test_a_timeline_signed_again_with_another_key_fails_under_the_owners(timeline: tuple[Path, str],
                                                                          tmp_path: Path) -> None:
    """The forger re-chains and re-signs every entry with a key of their own and names it in timeline.json: it
    is consistent (verify without --pubkey passes, naming the forger's key), and fails at 0 under the owner's."""
    from edgewise.entwine.keys import load_private
    from edgewise.entwine.timeline import GENESIS, entry_hash

    directory, public = timeline
    forger_public = _keygen(tmp_path / "forger.key")
    forger = load_private(str(tmp_path / "forger.key"))
    prev, lines = GENESIS, []
    for line in _lines(directory):
        entry = orjson.loads(line)
        entry["prev"] = prev
        entry["hash"] = entry_hash(entry)
        entry["sig"] = base64.b64encode(forger.sign(bytes.fromhex(entry["hash"]))).decode()
        prev = entry["hash"]
        lines.append(orjson.dumps(entry, option=orjson.OPT_SORT_KEYS) + b"\n")
    _write(directory, lines)
    meta = orjson.loads((directory / "timeline.json").read_bytes())
    (directory / "timeline.json").write_bytes(orjson.dumps({**meta, "public_key": forger_public}))
    done = _verify(str(directory), "--pubkey", public)
    assert done.returncode == 1 and b"position 0 is bad" in done.stdout and b"signature" in done.stdout
    consistent = _verify(str(directory))
    assert consistent.returncode == 0 and forger_public.encode() in consistent.stdout


def test_a_replayed_event_gets_its_first_receipt_and_no_second_entry(timeline: tuple[Path, str],
                                                                      tmp_path: Path) -> None:
    """The same input file again (it grew by two lines) is the same events: a replay after a crash."""
    directory, _ = timeline
    before = _lines(directory)
    out = _run(tmp_path, "tl", [{"n": i, "v": i * 1.5} for i in range(8)], input_name="input.ndjson")
    assert [r["receipt"]["position"] for r in out] == list(range(8))  # type: ignore[index]
    assert _lines(directory)[:6] == before and len(_lines(directory)) == 8


def test_kill_9_during_appends_leaves_a_timeline_that_verifies(tmp_path: Path) -> None:
    public = _keygen(tmp_path / "a.key")
    writer = subprocess.Popen([sys.executable, "-c", f"""
from edgewise.entwine.keys import load_private
from edgewise.entwine.timeline import Timeline
t = Timeline({str(tmp_path / "tl")!r}, load_private({str(tmp_path / "a.key")!r}))
n = 0
while True:
    t.append([(f"e{{n + i}}", "ab" * 32) for i in range(50)])
    n += 50
"""])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not (tmp_path / "tl" / "entries.log").exists()
                                           or (tmp_path / "tl" / "entries.log").stat().st_size < 200_000):
        time.sleep(0.05)
    writer.send_signal(signal.SIGKILL)
    writer.wait(30)
    done = _verify(str(tmp_path / "tl"), "--pubkey", public)
    assert done.returncode == 0, done.stdout
    # and the writer goes on after the last whole entry (a torn line is cut off, and said so)
    out = _run(tmp_path, "tl", [{"after": "crash"}])
    entries = len(_lines(tmp_path / "tl"))
    assert out[0]["receipt"]["position"] == entries - 1  # type: ignore[index]
    assert _verify(str(tmp_path / "tl"), "--pubkey", public).returncode == 0


def test_a_torn_last_line_is_cut_by_the_next_writer_and_said(timeline: tuple[Path, str], tmp_path: Path) -> None:
    directory, public = timeline
    lines = _lines(directory)
    _write(directory, [*lines, lines[-1][:40]])  # what a crash in the middle of an append leaves
    assert b"cut short" in _verify(str(directory), "--pubkey", public).stdout
    pipeline = tmp_path / "again.yaml"
    (tmp_path / "more.ndjson").write_bytes(b'{"n": 99}\n')
    pipeline.write_text(PIPELINE.format(timeline="tl", key="a.key", extra="", input="more.ndjson"))
    done = edgewise("run", str(pipeline))
    assert done.returncode == 0 and b"truncated an incomplete entry" in done.stderr, done.stderr
    assert len(_lines(directory)) == 7
    assert _verify(str(directory), "--pubkey", public).returncode == 0


def test_an_inclusion_proof_verifies_and_a_forged_one_does_not(timeline: tuple[Path, str], tmp_path: Path) -> None:
    directory, public = timeline
    proved = edgewise("prove", str(directory), "in:input.ndjson:3")
    assert proved.returncode == 0, proved.stderr
    proof_file = tmp_path / "proof.json"
    proof_file.write_bytes(proved.stdout)
    (tmp_path / "event.json").write_bytes(orjson.dumps({"n": 2, "v": 3.0}))  # line 3 of the input
    ok = _verify("--proof", str(proof_file), "--pubkey", public, "--event", str(tmp_path / "event.json"))
    assert ok.returncode == 0 and b"position 2" in ok.stdout, ok.stdout
    (tmp_path / "other.json").write_bytes(orjson.dumps({"n": 2, "v": 3.5}))
    assert _verify("--proof", str(proof_file), "--event", str(tmp_path / "other.json")).returncode == 1
    proof = orjson.loads(proved.stdout)
    for forge in ({"event": "in:input.ndjson:5"}, {"pos": 4}, {"digest": "00" * 32}):
        forged = tmp_path / "forged.json"
        forged.write_bytes(orjson.dumps({**proof, "entry": {**proof["entry"], **forge}}))
        done = _verify("--proof", str(forged), "--pubkey", public)
        assert done.returncode == 1 and b"does not hold" in done.stdout, (forge, done.stdout)
    other = _keygen(tmp_path / "other.key")
    assert _verify("--proof", str(proof_file), "--pubkey", other).returncode == 1
    missing = edgewise("prove", str(directory), "in:input.ndjson:99")
    assert missing.returncode == 2 and b"not in timeline" in missing.stderr


def test_two_timelines_entwine_each_other_and_verify_checks_the_anchors(tmp_path: Path) -> None:
    """Two edges, a and b, each anchoring the other's head in every entry, written in turns; then a's anchor into b
    is made to name a hash b does not have, and a's verification fails there."""
    _keygen(tmp_path / "a.key")
    _keygen(tmp_path / "b.key")
    for turn in range(3):
        _run(tmp_path, "a", [{"edge": "a", "turn": turn, "i": i} for i in range(2)],
             extra=", anchor_every: 1, anchors: [b]", key="a.key")
        _run(tmp_path, "b", [{"edge": "b", "turn": turn, "i": i} for i in range(2)],
             extra=", anchor_every: 1, anchors: [a]", key="b.key")
    for name in ("a", "b"):
        done = _verify(str(tmp_path / name))
        assert done.returncode == 0, done.stdout
        checked = re.search(rb"(\d+) anchors checked", done.stdout)
        assert checked and int(checked.group(1)) > 0, done.stdout
    anchored = [orjson.loads(line) for line in _lines(tmp_path / "a")]
    assert all(e["anchors"] for e in anchored[2:]) and not anchored[0]["anchors"]  # b had not started then
    _resign(tmp_path / "b", tmp_path / "b.key", 1, {"digest": "11" * 32})
    assert _verify(str(tmp_path / "b")).returncode == 0  # b's owner rewrote its own history...
    done = _verify(str(tmp_path / "a"))
    assert done.returncode == 1 and b"anchor" in done.stdout, done.stdout  # ...which a's anchors reveal


def _resign(timeline: Path, key_file: Path, position: int, change: dict[str, object]) -> None:
    """The owner rewrites entry ``position`` of their own timeline and re-chains and re-signs everything after it
    with their own key: the timeline alone stays consistent."""
    from edgewise.entwine.keys import load_private
    from edgewise.entwine.timeline import entry_hash

    key = load_private(str(key_file))
    lines = _lines(timeline)
    prev = orjson.loads(lines[position])["prev"]
    rewritten = lines[:position]
    for i, line in enumerate(lines[position:]):
        e = orjson.loads(line)
        if i == 0:
            e.update(change)
        e["prev"] = prev
        e["hash"] = entry_hash(e)
        e["sig"] = base64.b64encode(key.sign(bytes.fromhex(e["hash"]))).decode()
        prev = e["hash"]
        rewritten.append(orjson.dumps(e, option=orjson.OPT_SORT_KEYS) + b"\n")
    _write(timeline, rewritten)


def test_entwine_is_refused_on_spark_before_spark_starts(tmp_path: Path) -> None:
    _keygen(tmp_path / "a.key")
    (tmp_path / "in").mkdir()
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(PIPELINE.format(timeline="tl", key="a.key", extra="", input="in"))
    done = edgewise("spark", str(pipeline), "--once")
    assert done.returncode == 2 and b"does not run on Spark" in done.stderr and b"p.yaml:7" in done.stderr, \
        done.stderr


def test_a_daemon_with_entwine_runs_one_worker(tmp_path: Path) -> None:
    _keygen(tmp_path / "a.key")
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(PIPELINE.format(timeline="tl", key="a.key", extra="", input="in").replace(
        "type: file, path: in", "type: http"))
    done = edgewise("serve", str(pipeline), "--workers", "2", "--port", "0", "--data-dir", str(tmp_path / "d"))
    assert done.returncode == 2 and b"appends to a timeline" in done.stderr, done.stderr


def test_the_docs_pipeline_validates_and_entwines(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    text = re.search(r"```yaml\n(.*?)```", (root / "docs" / "entwine.md").read_text(encoding="utf-8"), re.S)
    assert text is not None
    (tmp_path / "keys").mkdir()
    (tmp_path / "timelines").mkdir()
    _keygen(tmp_path / "keys" / "edge-a.key")
    (tmp_path / "input.ndjson").write_bytes(b'{"veh": 1, "spd": 2.5, "tst": "2020-11-18T10:00:00Z", "x": 1}\n'
                                            b'{"veh": 1, "spd": 2.5, "tst": "2020-11-18T10:00:00Z", "x": 2}\n')
    (tmp_path / "edge-a.yaml").write_text(text.group(1))
    done = edgewise("run", str(tmp_path / "edge-a.yaml"))
    assert done.returncode == 0, done.stderr
    receipts = [orjson.loads(line)["receipt"] for line in done.stdout.splitlines()]
    entries = [orjson.loads(line) for line in _lines(tmp_path / "timelines" / "edge-a")]
    # the digest covers veh, spd and tst only: the two events differ in x alone, so their digests are equal
    assert entries[0]["digest"] == entries[1]["digest"] and [r["position"] for r in receipts] == [0, 1]
    assert _verify(str(tmp_path / "timelines" / "edge-a")).returncode == 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 63), 2 ** 63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(value=json_values)
def test_the_canonical_json_is_the_one_the_docs_give(value: object) -> None:
    """docs/entwine.md's canonical JSON, written out by hand from the docs (tests/fuzz/timeline_model.py), is the
    engine's byte for byte: a verifier written elsewhere from the docs computes the same digests. (It found the docs
    wrong: they gave ``1e-07`` where every digest holds ``1e-7``.)"""
    from edgewise.entwine.canonical import canonical
    from tests.fuzz.timeline_model import canonical_json

    assert canonical(value).decode() == canonical_json(value)


@pytest.mark.parametrize(("value", "text"), [
    (1e-7, "1e-7"), (1.5e-6, "1.5e-6"), (1e-5, "0.00001"), (4.0, "4.0"), (-0.0, "-0.0"), (1e15, "1000000000000000.0"),
    (1e16, "1e+16"), (1.5e16, "1.5e+16"), (5e-324, "5e-324"), (0.1, "0.1"), (123.25, "123.25")])
def test_numbers_are_written_as_the_docs_say(value: float, text: str) -> None:
    from edgewise.entwine.canonical import canonical
    from tests.fuzz.timeline_model import number_text

    assert number_text(value) == text == canonical(value).decode()
