"""String functions."""

from __future__ import annotations

import base64
import re
from functools import lru_cache
from typing import Any

from edgewise.errors import EvalError
from edgewise.expr import values as V
from edgewise.expr.functions.base import FunctionTable

table = FunctionTable("string")


def _s(v: Any) -> str:
    s = V.to_string(v)
    assert s is not None
    return s


def _int(v: Any, what: str = "INT") -> int:
    n = V.to_long(v, what, -(2**31), 2**31 - 1)
    assert n is not None
    return n


@lru_cache(maxsize=512)
def java_regex(pattern: str) -> re.Pattern[str]:
    """A Java regular expression, as Spark uses them, compiled for Python (the common syntax is the same)."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise EvalError("INVALID_PARAMETER_VALUE.PATTERN", f"invalid regular expression {pattern!r}: {exc}") from None


@table.fn("concat", args=(0, None), nulls=True)
def concat(*args: Any) -> Any:
    """Joins strings (or arrays); NULL if any argument is NULL."""
    if any(a is None for a in args):
        return None
    if args and all(isinstance(a, list) for a in args):
        return [x for a in args for x in a]
    return "".join(_s(a) for a in args)


@table.fn("concat_ws", args=(1, None), nulls=True)
def concat_ws(sep: Any, *args: Any) -> Any:
    """Joins the non-NULL strings (and array elements) with a separator."""
    if sep is None:
        return None
    parts: list[str] = []
    for a in args:
        if a is None:
            continue
        if isinstance(a, list):
            parts.extend(_s(x) for x in a if x is not None)
        else:
            parts.append(_s(a))
    return _s(sep).join(parts)


@table.fn("length", "char_length", "character_length", "len")
def length(v: Any) -> int:
    """Number of characters (bytes for BINARY)."""
    return len(v) if isinstance(v, bytes) else len(_s(v))


@table.fn("lower", "lcase")
def lower(v: Any) -> str:
    """Lower case."""
    return _s(v).lower()


@table.fn("upper", "ucase")
def upper(v: Any) -> str:
    """Upper case."""
    return _s(v).upper()


@table.fn("initcap")
def initcap(v: Any) -> str:
    """First letter of each space-separated word upper case, the rest lower case."""
    return " ".join(w[:1].upper() + w[1:].lower() for w in _s(v).split(" "))


def _trimmer(v: Any, chars: Any, method: str) -> str:
    s = _s(v)
    strip = getattr(s, method)
    return str(strip(" " if chars is None else _s(chars)))


@table.fn("trim", args=(1, 2))
def trim(v: Any, chars: Any = None) -> str:
    """Removes leading and trailing spaces (or the given characters)."""
    return _trimmer(v, chars, "strip")


@table.fn("ltrim", args=(1, 2))
def ltrim(v: Any, chars: Any = None) -> str:
    """Removes leading spaces (or the given characters)."""
    return _trimmer(v, chars, "lstrip")


@table.fn("rtrim", args=(1, 2))
def rtrim(v: Any, chars: Any = None) -> str:
    """Removes trailing spaces (or the given characters)."""
    return _trimmer(v, chars, "rstrip")


def substring_sql(s: str, pos: int, length: int = 2**31 - 1) -> str:
    """Spark's 1-based SUBSTRING: position 0 is treated as 1, a negative position counts from the end."""
    n = len(s)
    start = pos - 1 if pos > 0 else (n + pos if pos < 0 else 0)
    end = start + length
    start = max(start, 0)
    if start >= end:
        return ""
    return s[start:end]


@table.fn("substring", "substr", args=(2, 3))
def substring(v: Any, pos: Any, length: Any = 2**31 - 1) -> Any:
    """Characters from 1-based ``pos`` (negative: from the end), ``len`` of them."""
    if isinstance(v, list):
        raise V.mismatch("substring", v)
    return substring_sql(_s(v), _int(pos), _int(length))


@table.fn("left", args=2)
def left(v: Any, n: Any) -> str:
    """The first ``n`` characters."""
    k = _int(n)
    return "" if k <= 0 else _s(v)[:k]


@table.fn("right", args=2)
def right(v: Any, n: Any) -> str:
    """The last ``n`` characters."""
    k = _int(n)
    return "" if k <= 0 else substring_sql(_s(v), -k)


@table.fn("replace", args=(2, 3))
def replace(v: Any, search: Any, repl: Any = "") -> str:
    """Replaces every occurrence of ``search``."""
    s, f = _s(v), _s(search)
    return s if f == "" else s.replace(f, _s(repl))


@table.fn("translate", args=3)
def translate(v: Any, src: Any, dst: Any) -> str:
    """Replaces each character of ``from`` by the character at the same place in ``to`` (or drops it)."""
    f, t = _s(src), _s(dst)
    mapping: dict[int, int | None] = {}
    for i, ch in enumerate(f):
        if ord(ch) not in mapping:
            mapping[ord(ch)] = ord(t[i]) if i < len(t) else None
    return _s(v).translate(mapping)


@table.fn("split", args=(2, 3))
def split(v: Any, pattern: Any, limit: Any = -1) -> list[str]:
    """Splits around matches of a regular expression; ``limit`` > 0 caps the number of parts."""
    s = _s(v)
    n = _int(limit)
    if _s(pattern) == "" and s:  # each character, as Spark splits around the empty pattern (no empty last part)
        return [*s] if n <= 0 or n >= len(s) else [*s[:n - 1], s[n - 1:]]
    rx = java_regex(_s(pattern))
    if s == "":
        return [""]
    parts = rx.split(s, maxsplit=n - 1 if n > 0 else 0)
    if rx.groups:
        parts = rx.split(s) if n <= 0 else parts
        parts = [p for i, p in enumerate(parts) if i % (rx.groups + 1) == 0]
    if parts and parts[0] == "" and (m := rx.match(s)) is not None and m.end() == 0:
        parts = parts[1:]  # Java drops the empty leading part a zero-width match makes
    return parts


@table.fn("split_part", args=3)
def split_part(v: Any, delim: Any, part: Any) -> str:
    """The ``part``-th (1-based; negative from the end) piece of splitting by a literal delimiter."""
    s, d, k = _s(v), _s(delim), _int(part)
    if k == 0:
        raise EvalError("INVALID_INDEX_OF_ZERO", "split_part() index 0 is invalid: indexes start at 1")
    pieces = s.split(d) if d else [s]
    i = k - 1 if k > 0 else len(pieces) + k
    return pieces[i] if 0 <= i < len(pieces) else ""


def _java_replacement(rep: str) -> str:
    out = []
    i = 0
    while i < len(rep):
        c = rep[i]
        if c == "\\" and i + 1 < len(rep):
            out.append(rep[i + 1].replace("\\", "\\\\"))
            i += 2
        elif c == "$" and i + 1 < len(rep) and rep[i + 1].isdigit():
            j = i + 1
            while j < len(rep) and rep[j].isdigit():
                j += 1
            out.append(f"\\g<{rep[i + 1:j]}>")
            i = j
        else:
            out.append("\\\\" if c == "\\" else c)
            i += 1
    return "".join(out)


@table.fn("regexp_replace", args=(3, 4))
def regexp_replace(v: Any, pattern: Any, rep: Any, pos: Any = 1) -> str:
    """Replaces every match of a regular expression; ``$1`` in the replacement is group 1."""
    s = _s(v)
    start = _int(pos) - 1
    if start < 0:
        raise EvalError("DATATYPE_MISMATCH.VALUE_OUT_OF_RANGE",
                        f"regexp_replace's position must be 1 or more, found {start + 1}")
    rx = java_regex(_s(pattern))
    return s[:start] + rx.sub(_java_replacement(_s(rep)), s[start:])


@table.fn("regexp_extract", args=(2, 3))
def regexp_extract(v: Any, pattern: Any, idx: Any = 1) -> str:
    """Group ``idx`` of the first match ('' when there is none)."""
    rx = java_regex(_s(pattern))
    group = _int(idx)
    if group > rx.groups or group < 0:
        raise EvalError("INVALID_PARAMETER_VALUE.REGEX_GROUP_INDEX",
                        f"the regex has {rx.groups} groups, but the index is {group}")
    m = rx.search(_s(v))
    if not m:
        return ""
    return m.group(group) or ""


@table.fn("regexp_extract_all", args=(2, 3))
def regexp_extract_all(v: Any, pattern: Any, idx: Any = 1) -> list[str]:
    """Group ``idx`` of every match."""
    rx = java_regex(_s(pattern))
    group = _int(idx)
    if group > rx.groups or group < 0:
        raise EvalError("INVALID_PARAMETER_VALUE.REGEX_GROUP_INDEX",
                        f"the regex has {rx.groups} groups, but the index is {group}")
    return [m.group(group) or "" for m in rx.finditer(_s(v))]


@table.fn("rlike", "regexp_like", "regexp", args=2)
def rlike(v: Any, pattern: Any) -> bool:
    """Whether a regular expression matches anywhere in the string (``a RLIKE 'x'``)."""
    return java_regex(_s(pattern)).search(_s(v)) is not None


@table.fn("instr", args=2)
def instr(v: Any, sub: Any) -> int:
    """1-based position of the first occurrence of ``sub``, 0 if none."""
    return _s(v).find(_s(sub)) + 1


@table.fn("locate", "position", args=(2, 3))
def locate(sub: Any, v: Any, pos: Any = 1) -> int:
    """1-based position of ``sub`` in the string at or after ``pos``, 0 if none."""
    start = _int(pos)
    if start < 1:
        return 0
    return _s(v).find(_s(sub), start - 1) + 1


def _pad(v: Any, n: Any, pad: Any, left_side: bool) -> str:
    s, k, p = _s(v), _int(n), _s(pad)
    if k <= 0:
        return ""
    if len(s) >= k or p == "":
        return s[:k]
    fill = (p * (k // len(p) + 1))[: k - len(s)]
    return fill + s if left_side else s + fill


@table.fn("lpad", args=(2, 3))
def lpad(v: Any, n: Any, pad: Any = " ") -> str:
    """Pads on the left to ``len`` characters (or cuts to it)."""
    return _pad(v, n, pad, True)


@table.fn("rpad", args=(2, 3))
def rpad(v: Any, n: Any, pad: Any = " ") -> str:
    """Pads on the right to ``len`` characters (or cuts to it)."""
    return _pad(v, n, pad, False)


@table.fn("reverse")
def reverse(v: Any) -> Any:
    """The characters (or array elements) in reverse order."""
    return list(reversed(v)) if isinstance(v, list) else _s(v)[::-1]


@table.fn("repeat", args=2)
def repeat(v: Any, n: Any) -> str:
    """The string repeated ``n`` times."""
    return _s(v) * max(0, _int(n))


@table.fn("startswith", args=2)
def startswith(v: Any, prefix: Any) -> bool:
    """Whether the string starts with ``prefix``."""
    return _s(v).startswith(_s(prefix))


@table.fn("endswith", args=2)
def endswith(v: Any, suffix: Any) -> bool:
    """Whether the string ends with ``suffix``."""
    return _s(v).endswith(_s(suffix))


@table.fn("contains", args=2)
def contains(v: Any, sub: Any) -> bool:
    """Whether ``sub`` occurs in the string."""
    return _s(sub) in _s(v)


@table.fn("ascii")
def ascii_(v: Any) -> int:
    """The code point of the first character (0 for '')."""
    s = _s(v)
    return ord(s[0]) if s else 0


@table.fn("chr", "char")
def chr_(v: Any) -> str:
    """The character with the given code (modulo 256; '' for negative numbers)."""
    n = V.to_long(v)
    assert n is not None
    return "" if n < 0 else chr(n % 256)


@table.fn("base64")
def base64_(v: Any) -> str:
    """Base64 of the UTF-8 bytes (or of BINARY)."""
    data = v if isinstance(v, bytes) else _s(v).encode("utf-8")
    return base64.b64encode(data).decode("ascii")


@table.fn("btrim", args=(1, 2))
def btrim(v: Any, chars: Any = None) -> str:
    """Removes leading and trailing spaces (or the given characters)."""
    return _trimmer(v, chars, "strip")


@table.fn("string")
def string(v: Any) -> Any:
    """``CAST(x AS STRING)``."""
    return V.to_string(v)
