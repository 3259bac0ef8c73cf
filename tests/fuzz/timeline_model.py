"""docs/entwine.md's timeline, written from the docs alone (issue 39: the reference interpreter's ``entwine``).

An entry's digest, hash and chain as "The format" gives them: canonical JSON (UTF-8, keys sorted by code point, no
whitespace, integers as integers, other numbers in their shortest round-trip form, JSON's minimal string escapes),
SHA-256, ``edgewise-entwine/1\\n`` before the hashed body, ``prev`` 64 zeros for the first entry, and an Ed25519
signature of the hash's 32 bytes. Nothing here reads the engine's code: the canonical form is written out by hand
(``canonical_json``), the signature checked with ``cryptography`` directly.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

OWNER_KEY = "owner.key"
"""The key file beside a reference case's pipeline (``Case.tables``)."""

FIRST_PREV = "0" * 64
HASHED_PREFIX = b"edgewise-entwine/1\n"


def _owner() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(bytes(range(32)))  # one fixed key: cases are reproducible


def owner_pem() -> str:
    """The owner's private key as ``edgewise keygen`` writes it (PKCS#8 PEM)."""
    return _owner().private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()).decode()


def owner_public() -> str:
    """The owner's public key as 64 hex digits: the ``timeline`` of a receipt."""
    return _owner().public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def number_text(value: float) -> str:
    """A finite double's shortest round-trip digits (Python's ``repr`` finds them), written plainly from 1e-5 up to
    1e16 (``0.00001``, ``4.0``, ``1000000000000000.0``) and otherwise as ``<digit>[.<digits>]e<sign><exponent>``
    with no zeros before the exponent (``1e-7``, ``1.5e+16``)."""
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    exact = Decimal(repr(abs(value)))
    digits = "".join(map(str, exact.as_tuple().digits)).rstrip("0") or "0"
    exponent = exact.adjusted()
    if -6 < exponent < 16:
        if exponent >= 0:
            whole, fraction = digits[:exponent + 1].ljust(exponent + 1, "0"), digits[exponent + 1:] or "0"
        else:
            whole, fraction = "0", "0" * (-exponent - 1) + digits
        return f"{sign}{whole}.{fraction}"
    mantissa = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
    return f"{sign}{mantissa}e{'+' if exponent > 0 else '-'}{abs(exponent)}"


def canonical_json(value: Any) -> str:
    """docs/entwine.md's canonical JSON of a JSON value (NaN and infinities have none: ``ValueError``)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no canonical JSON form")
        return number_text(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ",".join(canonical_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{canonical_json(value[k])}"
                              for k in sorted(value)) + "}"
    raise TypeError(f"no JSON value: {value!r}")


def _sha256(text: bytes) -> str:
    return hashlib.sha256(text).hexdigest()


def covered(payload: dict[str, Any], fields: list[str] | None) -> Any:
    """What an event's digest covers: the whole event, or ``{name: value}`` of ``fields`` (top-level names here;
    a missing one null)."""
    return payload if not fields else {name: payload.get(name) for name in fields}


def appended(entries: list[dict[str, Any]], event_id: str, payload: dict[str, Any],
             fields: list[str] | None) -> dict[str, Any]:
    """The entry for an event (appended to ``entries``), or the entry the timeline already holds for its id."""
    for entry in entries:
        if entry["event"] == event_id:
            return entry
    body = {"anchors": [], "digest": _sha256(canonical_json(covered(payload, fields)).encode()),
            "event": event_id, "pos": len(entries), "prev": entries[-1]["hash"] if entries else FIRST_PREV}
    entry = {**body, "hash": _sha256(HASHED_PREFIX + canonical_json(body).encode())}
    entries.append(entry)
    return entry


def receipt(entry: dict[str, Any]) -> dict[str, Any]:
    return {"position": entry["pos"], "hash": entry["hash"], "timeline": owner_public()}


def timeline_differences(expected: list[dict[str, Any]], directory: Path) -> list[str]:
    """How the timeline in ``directory`` (``timeline.json``, ``entries.log``) differs from ``expected``: its key,
    each entry's fields, and each signature under the owner's public key."""
    problems = []
    described = json.loads((directory / "timeline.json").read_text())
    if described.get("public_key") != owner_public():
        problems.append(f"timeline {directory.name}: public_key {described.get('public_key')}")
    log = directory / "entries.log"
    written = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    got = [{k: v for k, v in entry.items() if k != "sig"} for entry in written]
    if got != expected:
        problems.append(f"timeline {directory.name}: entries {got[:3]} ... where the docs give {expected[:3]} ...")
    public = _owner().public_key()
    for entry in written:
        try:
            public.verify(base64.b64decode(entry["sig"]), bytes.fromhex(entry["hash"]))
        except Exception:  # InvalidSignature, or a signature that is not base64
            problems.append(f"timeline {directory.name}: position {entry.get('pos')}'s signature does not hold")
    return problems
