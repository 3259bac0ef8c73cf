"""A timeline on disk: appending (one writer), reading a head for anchors, verifying, proving inclusion.

Each entry is one line of ``entries.log``::

    {"anchors":[…],"digest":"<sha256 of the event>","event":"<event id>","hash":"<hex>","pos":7,
     "prev":"<hash of entry 6>","sig":"<base64 Ed25519 signature of the hash>"}

``hash`` is SHA-256 over ``edgewise-entwine/1\\n`` and the canonical JSON of the other fields but ``sig``; the
first entry's ``prev`` is 64 zeros. An anchor names another timeline's head when the entry was written:
``{"timeline": <its public key>, "pos": n, "hash": <its entry n's hash>, "at": <where it was read>}``.

Appending writes whole lines and fsyncs before the step returns, so a ``kill -9`` can leave at most one torn line
at the end; opening the timeline again truncates it and says so. Every entry is signed, so an inclusion proof is
one entry and needs no other part of the timeline.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from edgewise.entwine.canonical import canonical
from edgewise.entwine.keys import public_from_text, public_hex, signature_holds
from edgewise.errors import ConfigError

log = logging.getLogger("edgewise.entwine")

FORMAT = "edgewise-entwine/1"
PROOF_FORMAT = "edgewise-entwine-proof/1"
GENESIS = "0" * 64
ENTRIES, META, LOCK = "entries.log", "timeline.json", ".lock"
SIGNED_FIELDS = ("anchors", "digest", "event", "pos", "prev")


def entry_hash(entry: dict[str, Any]) -> str:
    body = {k: entry[k] for k in SIGNED_FIELDS}
    return hashlib.sha256(FORMAT.encode() + b"\n" + canonical(body)).hexdigest()


def read_meta(directory: str) -> dict[str, Any]:
    try:
        with open(os.path.join(directory, META), "rb") as fh:
            meta = orjson.loads(fh.read())
    except FileNotFoundError:
        raise ConfigError(f"{directory} is not a timeline (no {META})") from None
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{os.path.join(directory, META)} is not JSON: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ConfigError(f"{os.path.join(directory, META)}: not an {FORMAT} timeline")
    return meta


def _lines(directory: str) -> Iterator[tuple[int, bytes]]:
    """(byte offset, line without its newline) of each line; a last line without a newline is yielded too."""
    path = os.path.join(directory, ENTRIES)
    if not os.path.exists(path):
        return
    offset = 0
    with open(path, "rb") as fh:
        for line in fh:
            yield offset, line
            offset += len(line)


class Timeline:
    """The writer of one timeline directory (an exclusive lock: one writer at a time)."""

    def __init__(self, directory: str, key: Ed25519PrivateKey, *, fields: list[str] | None = None) -> None:
        self.directory = directory
        self.key = key
        self.public = public_hex(key.public_key())
        os.makedirs(directory, exist_ok=True)
        self._lock = open(os.path.join(directory, LOCK), "a")  # noqa: SIM115  # held for the writer's life
        try:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise ConfigError(f"timeline {directory} is being written by another process (one writer at a time: "
                              "run the pipeline with --workers 1, and point two pipelines at two timelines)"
                              ) from None
        meta_path = os.path.join(directory, META)
        if os.path.exists(meta_path):
            meta = read_meta(directory)
            if meta.get("public_key") != self.public:
                self.close()
                raise ConfigError(f"timeline {directory} belongs to key {meta.get('public_key')}, not to the key "
                                  f"given ({self.public}): a timeline has one owner")
        else:
            _write_atomically(meta_path, orjson.dumps({"format": FORMAT, "public_key": self.public,
                                                      "fields": fields}, option=orjson.OPT_INDENT_2))
        self.by_event: dict[str, dict[str, Any]] = {}
        self.head: dict[str, Any] | None = None
        self._recover()
        self._file = open(os.path.join(directory, ENTRIES), "ab")  # noqa: SIM115  # appended to until close

    def _recover(self) -> None:
        """Read the entries; truncate a torn last line (what a crash mid-append leaves), refuse other damage."""
        good_end = 0
        for offset, line in _lines(self.directory):
            try:
                if not line.endswith(b"\n"):
                    raise ValueError("no newline")
                entry = orjson.loads(line)
                expected = 0 if self.head is None else self.head["pos"] + 1
                if entry["pos"] != expected or entry_hash(entry) != entry["hash"]:
                    raise ValueError("out of order")
            except (ValueError, KeyError, TypeError):
                if offset + len(line) >= self._size():  # the last line: a torn append
                    log.warning("timeline %s: truncated an incomplete entry at its end (%d bytes at byte %d, "
                                "left by a crash during an append)", self.directory, len(line), offset)
                    break
                self.close()
                raise ConfigError(f"timeline {self.directory} is damaged at byte {offset} (after position "
                                  f"{-1 if self.head is None else self.head['pos']}); `edgewise verify "
                                  f"{self.directory}` says where; edgewise does not append to it") from None
            self.head = entry
            self.by_event.setdefault(entry["event"], entry)
            good_end = offset + len(line)
        if self._size() > good_end:
            with open(os.path.join(self.directory, ENTRIES), "r+b") as fh:
                fh.truncate(good_end)
                fh.flush()
                os.fsync(fh.fileno())

    def _size(self) -> int:
        path = os.path.join(self.directory, ENTRIES)
        return os.path.getsize(path) if os.path.exists(path) else 0

    def append(self, items: list[tuple[str, str]], anchors: list[dict[str, Any]] | None = None,
               anchor_every: int = 0) -> list[dict[str, Any]]:
        """Entries for ``(event id, digest)`` pairs, written and synced before this returns. An event already in
        the timeline (a replay after a crash) gets its entry back and is not appended again."""
        out: list[dict[str, Any]] = []
        lines: list[bytes] = []
        for event_id, event_digest in items:
            known = self.by_event.get(event_id)
            if known is not None:
                out.append(known)
                continue
            pos = 0 if self.head is None else self.head["pos"] + 1
            entry: dict[str, Any] = {
                "anchors": anchors if anchors and anchor_every and pos % anchor_every == 0 else [],
                "digest": event_digest, "event": event_id, "pos": pos,
                "prev": GENESIS if self.head is None else self.head["hash"]}
            entry["hash"] = entry_hash(entry)
            entry["sig"] = base64.b64encode(self.key.sign(bytes.fromhex(entry["hash"]))).decode()
            lines.append(orjson.dumps(entry, option=orjson.OPT_SORT_KEYS) + b"\n")
            self.head = entry
            self.by_event[event_id] = entry
            out.append(entry)
        if lines:
            self._file.write(b"".join(lines))
            self._file.flush()
            os.fsync(self._file.fileno())
        return out

    def close(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()
        self._lock.close()


def _write_atomically(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_head(directory: str) -> dict[str, Any] | None:
    """Another timeline's head, for an anchor: its last complete entry (a writer may be appending)."""
    meta = read_meta(directory)
    path = os.path.join(directory, ENTRIES)
    if not os.path.exists(path):
        return None
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        tail = b""
        step = 4096
        while True:
            start = max(0, size - step)
            fh.seek(start)
            tail = fh.read(size - start)
            complete = tail[:tail.rfind(b"\n") + 1]
            lines = complete.splitlines()
            if len(lines) >= 2 or start == 0:
                break
            step *= 4
    if not lines or not lines[-1].strip():
        return None
    entry = orjson.loads(lines[-1])
    return {"timeline": meta["public_key"], "pos": entry["pos"], "hash": entry["hash"], "at": directory}


# ---------------------------------------------------------------- verification


@dataclass
class Report:
    """What ``verify`` found: ``bad`` is the first bad position (or None) and why."""

    entries: int = 0
    public_key: str = ""
    bad: tuple[int, str] | None = None
    anchors_checked: int = 0
    anchors_unchecked: list[str] = field(default_factory=list)
    torn_tail: bool = False
    """The last line is an append a crash cut short (not an entry; cutting entries off the end is what anchors in
    other timelines reveal)."""


def verify(directory: str, pubkey: str | None = None, anchored: dict[str, str] | None = None) -> Report:
    """Check the whole chain: positions in order from 0, each ``prev`` the hash before, each hash recomputed, each
    signature under ``pubkey`` (default: the key ``timeline.json`` names), and each anchor against the anchored
    timeline where it can be read (``anchored``: public key -> directory; else the directory the anchor names)."""
    meta = read_meta(directory)
    owner = pubkey or meta.get("public_key") or ""
    key = public_from_text(owner)
    report = Report(public_key=public_hex(key))
    others: dict[str, dict[int, str] | None] = {}
    for pos, entry, problem in _chain(directory, key):
        if entry is None and problem is None:
            report.torn_tail = True
            break
        if problem is None and entry is not None:
            problem = next((p for a in entry["anchors"]
                            if (p := _anchor_problem(a, directory, anchored or {}, others, report))), None)
        if problem:
            report.bad = (pos, problem)
            return report
        report.entries += 1
    return report


def _chain(directory: str, key: Ed25519PublicKey) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """The entries in order: ``(position, entry, None)`` while the chain holds, then ``(position, entry or None,
    what is wrong)`` where it breaks. A last line without its newline (an append a crash cut short; its writer
    truncates it on start) is no entry: ``(position, None, None)``, and the walk ends."""
    prev = GENESIS
    for pos, (_, line) in enumerate(_lines(directory)):
        if not line.endswith(b"\n"):
            yield pos, None, None
            return
        try:
            entry = orjson.loads(line)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            yield pos, None, "the entry is not JSON (changed or cut)"
            return
        problem = _entry_problem(entry, key, pos, prev)
        yield pos, entry, problem
        if problem:
            return
        prev = entry["hash"]


def _entry_problem(entry: dict[str, Any], key: Ed25519PublicKey, expected: int, prev: str) -> str | None:
    missing = [k for k in (*SIGNED_FIELDS, "hash", "sig") if k not in entry]
    if missing:
        return f"the entry lacks {', '.join(missing)}"
    if entry["pos"] != expected:
        return f"position {entry['pos']} where {expected} was expected (an entry removed or moved)"
    if entry["prev"] != prev:
        return "it does not follow the entry before it (prev hash differs: an entry removed, moved or changed)"
    if entry_hash(entry) != entry["hash"]:
        return "its hash does not match its content (the entry was changed)"
    try:
        signature = base64.b64decode(entry["sig"], validate=True)
    except ValueError:
        return "its signature is not base64"
    if not signature_holds(key, signature, bytes.fromhex(entry["hash"])):
        return "its signature does not hold under the public key (another key signed it, or it was changed)"
    return None


def _anchor_problem(anchor: dict[str, Any], directory: str, anchored: dict[str, str],
                    others: dict[str, dict[int, str] | None], report: Report) -> str | None:
    other_key = str(anchor.get("timeline"))
    if other_key not in others:
        location = anchored.get(other_key) or str(anchor.get("at") or "")
        if location.startswith(("http://", "https://")):
            others[other_key] = _remote_hashes(location, other_key)
        else:
            if location and not os.path.isabs(location):
                location = os.path.normpath(os.path.join(directory, location))
            others[other_key] = (_verified_hashes(location, other_key) if location and os.path.isdir(location)
                                 else None)
    hashes = others[other_key]
    if hashes is None:
        if other_key not in report.anchors_unchecked:
            report.anchors_unchecked.append(other_key)
        return None
    if hashes.get(int(anchor.get("pos", -1))) != anchor.get("hash"):
        return (f"its anchor to timeline {other_key[:16]}… names position {anchor.get('pos')} with a hash that "
                "timeline does not have there")
    report.anchors_checked += 1
    return None


def _verified_hashes(location: str, public_key: str) -> dict[int, str] | None:
    """The hashes of the anchored timeline's entries, when it verifies under the key the anchor names (its own
    anchors are not followed: each timeline is verified on its own)."""
    try:
        meta = read_meta(location)
    except ConfigError:
        return None
    if meta.get("public_key") != public_key:
        return None
    return _chain_hashes(location, public_key)


def _remote_hashes(url: str, public_key: str) -> dict[int, str] | None:
    """``_verified_hashes`` of a timeline a daemon serves (``/v1/timelines/<step>``), or None where it cannot be
    read."""
    import tempfile

    import httpx

    try:
        meta = httpx.get(url, timeout=10.0)
        entries = httpx.get(f"{url}/entries", timeout=60.0)
    except httpx.HTTPError:
        return None
    if meta.status_code != 200 or entries.status_code != 200:
        return None
    with tempfile.TemporaryDirectory(prefix="edgewise-anchored-") as tmp:
        with open(os.path.join(tmp, META), "wb") as fh:
            fh.write(meta.content)
        with open(os.path.join(tmp, ENTRIES), "wb") as fh:
            fh.write(entries.content)
        return _verified_hashes(tmp, public_key)


def _chain_hashes(directory: str, public_key: str) -> dict[int, str] | None:
    """Each position's hash, while the whole chain holds under ``public_key`` (a torn last line: its writer is
    appending); None where it does not."""
    hashes: dict[int, str] = {}
    for pos, entry, problem in _chain(directory, public_from_text(public_key)):
        if problem:
            return None
        if entry is None:
            break
        hashes[pos] = entry["hash"]
    return hashes


# ---------------------------------------------------------------- inclusion proofs


def prove(directory: str, event_id: str) -> dict[str, Any]:
    """The inclusion proof of an event: its signed entry and the owner's public key."""
    meta = read_meta(directory)
    for _, line in _lines(directory):
        try:
            entry = orjson.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") == event_id:
            return {"format": PROOF_FORMAT, "public_key": meta["public_key"], "fields": meta.get("fields"),
                    "entry": entry}
    raise ConfigError(f"event {event_id!r} is not in timeline {directory}")


def check_proof(proof: dict[str, Any], pubkey: str | None = None, event: dict[str, Any] | None = None) -> str | None:
    """None when the proof holds (under ``pubkey`` where given, else the key it names; for ``event`` too, where
    given: its digest is the entry's); else what is wrong."""
    from edgewise.entwine.canonical import digest
    from edgewise.steps.entwine import selected

    if not isinstance(proof, dict) or proof.get("format") != PROOF_FORMAT or not isinstance(proof.get("entry"),
                                                                                             dict):
        return f"not an {PROOF_FORMAT} proof"
    key = public_from_text(pubkey or str(proof.get("public_key", "")))
    if pubkey and public_hex(key) != proof.get("public_key"):
        return f"the proof names key {proof.get('public_key')}, not {public_hex(key)}"
    entry = proof["entry"]
    problem = _entry_problem(entry, key, entry.get("pos", -1), entry.get("prev", ""))
    if problem:
        return problem
    if event is not None and digest(selected(event, proof.get("fields"))) != entry["digest"]:
        return "the event's digest is not the one in the entry (the event differs from the one entwined)"
    return None
