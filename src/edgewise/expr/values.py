"""Spark 4 (ANSI mode) value semantics for the local engine: type names, casts, arithmetic and comparison.

Values are plain Python objects: ``None`` (NULL), ``bool``, ``int`` (BIGINT: 64-bit, overflow raises), ``float``
(DOUBLE), ``Decimal`` (DECIMAL: decimal literals such as ``1.5``), ``str``, ``bytes`` (BINARY), ``list``
(ARRAY), ``dict`` (STRUCT; JSON objects), ``datetime`` (TIMESTAMP, always UTC) and ``date`` (DATE).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from edgewise.errors import EvalError

LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def type_name(v: Any) -> str:
    """Spark's name for the type of a value."""
    if v is None:
        return "VOID"
    if isinstance(v, bool):
        return "BOOLEAN"
    if isinstance(v, int):
        return "BIGINT"
    if isinstance(v, float):
        return "DOUBLE"
    if isinstance(v, Decimal):
        return "DECIMAL"
    if isinstance(v, str):
        return "STRING"
    if isinstance(v, bytes):
        return "BINARY"
    if isinstance(v, list):
        return "ARRAY"
    if isinstance(v, dict):
        return "STRUCT"
    if isinstance(v, datetime):
        return "TIMESTAMP"
    if isinstance(v, date):
        return "DATE"
    return type(v).__name__.upper()


def mismatch(what: str, *values: Any) -> EvalError:
    types = ", ".join(type_name(v) for v in values)
    return EvalError("DATATYPE_MISMATCH", f"{what} cannot take {types}")


def check_long(n: int) -> int:
    if LONG_MIN <= n <= LONG_MAX:
        return n
    raise EvalError("ARITHMETIC_OVERFLOW", f"{n} overflows BIGINT; use the try_ form to get NULL instead")


# ---------------------------------------------------------------- to string


def double_to_string(d: float) -> str:
    """Java's ``Double.toString``, which is how Spark casts a DOUBLE to STRING."""
    if math.isnan(d):
        return "NaN"
    if math.isinf(d):
        return "Infinity" if d > 0 else "-Infinity"
    if d == 0:
        return "-0.0" if math.copysign(1.0, d) < 0 else "0.0"
    a = abs(d)
    if 1e-3 <= a < 1e7:
        r = repr(d)
        if "e" in r or "E" in r:  # repr may still use exponent form in this range for some values
            r = format(d, "f")
        return r if "." in r else r + ".0"
    shortest = Decimal(repr(a)).normalize()  # repr gives the shortest digits that round-trip
    digits = "".join(map(str, shortest.as_tuple().digits))
    sign = "-" if d < 0 else ""
    head, tail = digits[0], digits[1:] or "0"
    exponent = shortest.adjusted()
    return f"{sign}{head}.{tail}E{exponent}"


def timestamp_to_string(ts: datetime) -> str:
    base = ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    if ts.microsecond:
        base += "." + f"{ts.microsecond:06d}".rstrip("0")
    return base


def to_string(v: Any) -> str | None:
    """``CAST(v AS STRING)``."""
    if v is None:
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return double_to_string(v)
    if isinstance(v, Decimal):
        return format(v, "f")
    if isinstance(v, datetime):
        return timestamp_to_string(v)
    if isinstance(v, date):
        return v.isoformat()
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        return "[" + ", ".join("null" if x is None else str(to_string(x)) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join("null" if x is None else str(to_string(x)) for x in v.values()) + "}"
    raise mismatch("CAST AS STRING", v)


# ---------------------------------------------------------------- numeric casts

_INT_TEXT = re.compile(r"^[+-]?\d+$")
_NUM_TEXT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[dDfF]?$")


def _invalid(v: Any, target: str) -> EvalError:
    return EvalError(
        "CAST_INVALID_INPUT",
        f"the value {v!r} of type {type_name(v)} cannot be cast to {target}; use try_cast to get NULL instead",
    )


def to_long(v: Any, target: str = "BIGINT", lo: int = LONG_MIN, hi: int = LONG_MAX) -> int | None:
    """``CAST(v AS BIGINT)`` (or a narrower integer type with its range)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return 1 if v else 0
    if isinstance(v, int):
        n = v
    elif isinstance(v, float):
        if math.isnan(v) or math.isinf(v) or not (lo - 1 < v < hi + 1):
            raise EvalError("CAST_OVERFLOW", f"the value {double_to_string(v)} cannot be cast to {target}")
        n = int(v)
    elif isinstance(v, Decimal):
        n = int(v)
    elif isinstance(v, str):
        s = v.strip()
        if _INT_TEXT.match(s):
            n = int(s)
        else:
            raise _invalid(v, target)
        if not lo <= n <= hi:
            raise _invalid(v, target)
    elif isinstance(v, datetime):
        n = math.floor((v - EPOCH).total_seconds())
    else:
        raise mismatch(f"CAST AS {target}", v)
    if not lo <= n <= hi:
        raise EvalError("CAST_OVERFLOW", f"the value {to_string(v)} cannot be cast to {target}")
    return n


def to_double(v: Any) -> float | None:
    """``CAST(v AS DOUBLE)``."""
    if v is None:
        return None
    if isinstance(v, float):
        return v
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, int | Decimal):
        return float(v)
    if isinstance(v, str):
        s = v.strip()
        low = s.lower()
        if low in ("nan",):
            return math.nan
        if low in ("infinity", "+infinity", "inf", "+inf"):
            return math.inf
        if low in ("-infinity", "-inf"):
            return -math.inf
        if _NUM_TEXT.match(s):
            return float(s.rstrip("dDfF"))
        raise _invalid(v, "DOUBLE")
    if isinstance(v, datetime):
        return (v - EPOCH).total_seconds()
    raise mismatch("CAST AS DOUBLE", v)


def to_decimal(v: Any, precision: int = 10, scale: int = 0) -> Decimal | None:
    """``CAST(v AS DECIMAL(p, s))``: rounds half up to the scale; too many digits raise."""
    if v is None:
        return None
    try:
        if isinstance(v, bool):
            d = Decimal(int(v))
        elif isinstance(v, float):
            if math.isnan(v) or math.isinf(v):
                raise _invalid(v, f"DECIMAL({precision},{scale})")
            d = Decimal(repr(v))
        elif isinstance(v, int | Decimal):
            d = Decimal(v)
        elif isinstance(v, str):
            s = v.strip()
            if not _NUM_TEXT.match(s):
                raise _invalid(v, f"DECIMAL({precision},{scale})")
            d = Decimal(s.rstrip("dDfF"))
        else:
            raise mismatch("CAST AS DECIMAL", v)
        q = d.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
    except InvalidOperation:
        raise _invalid(v, f"DECIMAL({precision},{scale})") from None
    if len(q.as_tuple().digits) > precision and q != 0:
        raise EvalError("NUMERIC_VALUE_OUT_OF_RANGE",
                        f"{to_string(v)} cannot be represented as DECIMAL({precision},{scale})")
    return q


def to_boolean(v: Any) -> bool | None:
    """``CAST(v AS BOOLEAN)``."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int | float | Decimal):
        return v != 0
    if isinstance(v, str):
        s = v.strip().lower()
        if s in ("t", "true", "y", "yes", "1"):
            return True
        if s in ("f", "false", "n", "no", "0"):
            return False
        raise _invalid(v, "BOOLEAN")
    raise mismatch("CAST AS BOOLEAN", v)


def is_number(v: Any) -> bool:
    return isinstance(v, int | float | Decimal) and not isinstance(v, bool)


def numeric(v: Any, what: str) -> int | float | Decimal:
    """A number for a unary operator or a math function: text is implicitly cast to DOUBLE (ANSI), other types
    are a mismatch."""
    if isinstance(v, int | float | Decimal) and not isinstance(v, bool):
        return v
    if isinstance(v, str):
        d = to_double(v)
        assert d is not None
        return d
    raise mismatch(what, v)


def with_text(text: str, other: Any, what: str) -> tuple[Any, Any]:
    """Spark's (ANSI) implicit cast of text meeting a number in a binary operator or a comparison: to BIGINT
    against an integer (``'2.5' + 1`` fails, ``'7' / 2`` is 3.5), to DOUBLE against a DOUBLE or DECIMAL (the other
    side becomes DOUBLE too). Text against text, or anything else, is a type mismatch."""
    if isinstance(other, bool) or not isinstance(other, int | float | Decimal):
        raise mismatch(what, text, other)
    if isinstance(other, int):
        return to_long(text), other
    return to_double(text), float(other)


# ---------------------------------------------------------------- arithmetic


def _coerce_pair(a: Any, b: Any, what: str) -> tuple[Any, Any]:
    if a.__class__ is str:
        a, b = with_text(a, b, what)
    elif b.__class__ is str:
        b, a = with_text(b, a, what)
    if isinstance(a, bool) or not isinstance(a, int | float | Decimal):
        raise mismatch(what, a, b)
    if isinstance(b, bool) or not isinstance(b, int | float | Decimal):
        raise mismatch(what, a, b)
    if isinstance(a, float) or isinstance(b, float):
        return float(a), float(b)
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        return Decimal(a), Decimal(b)
    return a, b


def _null_beside(a: Any, b: Any) -> None:
    """Arithmetic with a NULL operand is NULL; text beside it must still be a number, as on Spark, which casts a
    text operand before it looks at values (``'abc' + NULL`` fails there; the NULL's type is unknown here, so the
    text is checked as a DOUBLE)."""
    text = a if b is None else b
    if text.__class__ is str:
        to_double(text)
    return None


def _date_plus_days(day: date, days: int) -> date:
    """``date + n`` (Spark's date_add, as its ``+`` reads a DATE beside an integer)."""
    if not -(2**31) <= days < 2**31:
        raise EvalError("ARITHMETIC_OVERFLOW", f"{days} days is out of the INT range date arithmetic takes")
    try:
        return day + timedelta(days=days)
    except OverflowError:
        raise EvalError("ARITHMETIC_OVERFLOW", f"{day} + {days} days is out of the DATE range") from None


def _is_day(v: Any) -> bool:
    return v.__class__ is date


def _is_integer(v: Any) -> bool:
    return v.__class__ is int


def add(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return _null_beside(a, b)
    if a.__class__ is int and b.__class__ is int:
        return check_long(a + b)
    if _is_day(a) and _is_integer(b):
        return _date_plus_days(a, b)
    if _is_integer(a) and _is_day(b):
        return _date_plus_days(b, a)
    x, y = _coerce_pair(a, b, "+")
    return check_long(x + y) if isinstance(x, int) else x + y


def sub(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return _null_beside(a, b)
    if a.__class__ is int and b.__class__ is int:
        return check_long(a - b)
    if _is_day(a) and _is_integer(b):
        return _date_plus_days(a, -b)
    x, y = _coerce_pair(a, b, "-")
    return check_long(x - y) if isinstance(x, int) else x - y


def mul(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return _null_beside(a, b)
    if a.__class__ is int and b.__class__ is int:
        return check_long(a * b)
    x, y = _coerce_pair(a, b, "*")
    return check_long(x * y) if isinstance(x, int) else x * y


def _divide_by_zero() -> EvalError:
    return EvalError("DIVIDE_BY_ZERO", "division by zero; use try_divide to get NULL instead")


def _decimal_digits(d: Decimal) -> tuple[int, int]:
    """(precision, scale) of a decimal value as Spark would type it."""
    _, digits, exp = d.as_tuple()
    scale = max(0, -int(exp))
    precision = max(len(digits), scale)
    return precision, scale


def div(a: Any, b: Any) -> Any:
    """``/``: always fractional. Integers and doubles give DOUBLE; decimals give DECIMAL at Spark's scale."""
    if a is None or b is None:
        return _null_beside(a, b)
    x, y = _coerce_pair(a, b, "/")
    if isinstance(x, Decimal):
        if y == 0:
            raise _divide_by_zero()
        # an integer operand counts with its own digits, as Spark types an integer literal
        p1, s1 = _decimal_digits(x) if isinstance(a, Decimal) else (len(str(abs(int(x)))), 0)
        p2, s2 = _decimal_digits(y) if isinstance(b, Decimal) else (len(str(abs(int(y)))), 0)
        scale = max(6, s1 + p2 + 1)
        precision = p1 - s1 + s2 + scale
        if precision > 38:
            int_digits = precision - scale
            scale = max(38 - int_digits, min(scale, 6))
        return (x / y).quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
    if y == 0:
        raise _divide_by_zero()
    return float(x) / float(y)


def int_div(a: Any, b: Any) -> Any:
    """``div``: integral division, truncating toward zero, BIGINT result."""
    if a is None or b is None:
        return _null_beside(a, b)
    x, y = _coerce_pair(a, b, "div")
    if y == 0:
        raise _divide_by_zero()
    if isinstance(x, int):
        q = abs(x) // abs(y)
        return check_long(q if (x >= 0) == (y >= 0) else -q)
    return check_long(int(Decimal(x) / Decimal(y)) if isinstance(x, Decimal) else int(x / y))


def mod(a: Any, b: Any) -> Any:
    """``%``: the remainder takes the sign of the dividend (like Java, unlike Python's ``%``)."""
    if a is None or b is None:
        return _null_beside(a, b)
    x, y = _coerce_pair(a, b, "%")
    if y == 0:
        raise _divide_by_zero()
    if isinstance(x, int):
        r = abs(x) % abs(y)
        return r if x >= 0 else -r
    if isinstance(x, Decimal):
        return x % y  # Decimal % keeps the dividend's sign, as Spark does
    return math.fmod(x, y)


def neg(a: Any) -> Any:
    if a is None:
        return None
    x = numeric(a, "unary -")
    return check_long(-x) if isinstance(x, int) else -x


# ---------------------------------------------------------------- comparison


def _as_timestamp_for_compare(v: Any) -> datetime:
    from edgewise.expr.timefmt import cast_to_timestamp

    ts = cast_to_timestamp(v)
    assert ts is not None
    return ts


def compare(a: Any, b: Any) -> int | None:
    """-1, 0 or 1 (NULL when either side is NULL), with Spark's implicit casts between types."""
    if a is None or b is None:
        return None
    ca, cb = a.__class__, b.__class__
    if ca is cb and ca is not dict and ca is not float and ca is not list:
        return int((a > b) - (a < b))
    if is_number(a) and is_number(b):
        if isinstance(a, float) or isinstance(b, float):
            fa, fb = float(a), float(b)
            # Spark orders NaN above every other value and NaN = NaN
            if math.isnan(fa) or math.isnan(fb):
                return int(math.isnan(fa)) - int(math.isnan(fb))
            return int(fa > fb) - int(fa < fb)
        return int(a > b) - int(a < b)
    if isinstance(a, str) and is_number(b):
        return compare(*with_text(a, b, "comparison"))
    if is_number(a) and isinstance(b, str):
        y, x = with_text(b, a, "comparison")
        return compare(x, y)
    if isinstance(a, bool) and isinstance(b, str):
        return compare(a, to_boolean(b))
    if isinstance(a, str) and isinstance(b, bool):
        return compare(to_boolean(a), b)
    if isinstance(a, datetime) and isinstance(b, str | date):
        return compare(a, _as_timestamp_for_compare(b))
    if isinstance(a, str | date) and isinstance(b, datetime):
        return compare(_as_timestamp_for_compare(a), b)
    if isinstance(a, date) and isinstance(b, str):
        return compare(a.isoformat(), b[:10])
    if isinstance(a, str) and isinstance(b, date):
        return compare(a[:10], b.isoformat())
    if isinstance(a, list) and isinstance(b, list):
        for x, y in zip(a, b, strict=False):
            if x is None or y is None:
                if x is None and y is None:
                    continue
                return -1 if x is None else 1
            c = compare(x, y)
            if c:
                return c
        return (len(a) > len(b)) - (len(a) < len(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return compare(list(a.values()), list(b.values()))
    raise mismatch("comparison", a, b)


def equals(a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return None
    if a.__class__ is b.__class__ and a.__class__ is not float:
        return bool(a == b)
    return compare(a, b) == 0


def timestamp_from_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def timestamp_to_us(ts: datetime) -> int:
    delta = ts - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
