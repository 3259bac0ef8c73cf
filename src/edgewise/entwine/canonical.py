"""Canonical JSON: the bytes an event's digest and an entry's hash are computed over.

One text for one value, whoever writes it: UTF-8, object keys sorted by code point, no whitespace, integers as
integers, other numbers in their shortest round-trip form (``2.5``, ``0.00001``, ``4.0``; below 1e-5 and from 1e16
as ``1e-7``, ``1.5e+16``), strings with JSON's minimal escapes
(orjson's ``OPT_SORT_KEYS``). Values JSON has no type for are written as edgewise's state store writes them:
``{"$ts": µs}``, ``{"$date": "2026-11-23"}``, ``{"$dec": "2.50"}``. NaN and the infinities are refused: they have
no JSON form, and a digest must not silently stand for ``null``.

>>> canonical({"b": 1, "a": [True, None, 2.5, "é"]})
b'{"a":[true,null,2.5,"\\xc3\\xa9"],"b":1}'
>>> digest({"x": 1}) == digest({"x": 1}) != digest({"x": 1.5})
True
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import orjson

from edgewise.errors import EvalError
from edgewise.steps.state_values import encode_value


def canonical(value: Any) -> bytes:
    _refuse_non_finite(value)
    return orjson.dumps(encode_value(value), option=orjson.OPT_SORT_KEYS)


def digest(value: Any) -> str:
    """SHA-256 of the canonical JSON, as hex."""
    return hashlib.sha256(canonical(value)).hexdigest()


def _refuse_non_finite(value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise EvalError("NOT_CANONICAL", f"{value!r} has no canonical JSON form (NaN and infinities are not JSON "
                        "numbers)")
    if isinstance(value, dict):
        for v in value.values():
            _refuse_non_finite(v)
    elif isinstance(value, list | tuple):
        for v in value:
            _refuse_non_finite(v)
