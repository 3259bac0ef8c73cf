"""Hash functions over the UTF-8 bytes of a string (or BINARY)."""

from __future__ import annotations

import hashlib
import zlib
from typing import Any

from edgewise.expr import values as V
from edgewise.expr.functions.base import FunctionTable

table = FunctionTable("hash")


def _bytes(v: Any) -> bytes:
    if isinstance(v, bytes):
        return v
    s = V.to_string(v)
    assert s is not None
    return s.encode("utf-8")


@table.fn("md5")
def md5(v: Any) -> str:
    """MD5 as 32 hex digits."""
    return hashlib.md5(_bytes(v), usedforsecurity=False).hexdigest()


@table.fn("sha1", "sha")
def sha1(v: Any) -> str:
    """SHA-1 as 40 hex digits."""
    return hashlib.sha1(_bytes(v), usedforsecurity=False).hexdigest()


@table.fn("sha2", args=2)
def sha2(v: Any, bits: Any) -> Any:
    """SHA-2 with 224, 256 (or 0), 384 or 512 bits, as hex; NULL for another bit length."""
    n = V.to_long(bits)
    algo = {0: "sha256", 224: "sha224", 256: "sha256", 384: "sha384", 512: "sha512"}.get(n if n is not None else -1)
    if algo is None:
        return None
    return hashlib.new(algo, _bytes(v)).hexdigest()


@table.fn("crc32")
def crc32(v: Any) -> int:
    """CRC-32 as a BIGINT."""
    return zlib.crc32(_bytes(v)) & 0xFFFFFFFF
