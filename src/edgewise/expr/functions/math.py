"""Math functions."""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal
from typing import Any

from edgewise.errors import EvalError
from edgewise.expr import values as V
from edgewise.expr.functions.base import Evaluator, FunctionTable

table = FunctionTable("math")


def _d(v: Any) -> float:
    d = V.to_double(V.numeric(v, "math function"))
    assert d is not None
    return d


@table.fn("abs")
def abs_(v: Any) -> Any:
    """Absolute value (overflow of the smallest BIGINT raises)."""
    x = V.numeric(v, "abs")
    return V.check_long(abs(x)) if isinstance(x, int) else abs(x)


def _to_integral(v: Any, rounding: str, fn: Any) -> Any:
    x = V.numeric(v, "ceil/floor")
    if isinstance(x, int):
        return x
    if isinstance(x, Decimal):
        return x.to_integral_value(rounding=rounding)  # a DECIMAL stays DECIMAL (scale 0), as in Spark
    if math.isnan(x) or math.isinf(x):
        raise EvalError("CAST_OVERFLOW", f"{V.double_to_string(x)} cannot be rounded to BIGINT")
    return V.check_long(int(fn(x)))


@table.fn("ceil", "ceiling")
def ceil(v: Any) -> Any:
    """Smallest integer not below the value."""
    return _to_integral(v, ROUND_CEILING, math.ceil)


@table.fn("floor")
def floor(v: Any) -> Any:
    """Largest integer not above the value."""
    return _to_integral(v, ROUND_FLOOR, math.floor)


def _round(v: Any, scale: Any, mode: str) -> Any:
    x = V.numeric(v, "round")
    s = V.to_long(scale, "INT")
    assert s is not None
    if isinstance(x, float):
        if math.isnan(x) or math.isinf(x):
            return x
        # Spark rounds the shortest decimal form of the double (BigDecimal.valueOf), not its binary value
        return float(Decimal(repr(x)).quantize(Decimal(1).scaleb(-s), rounding=mode))
    if isinstance(x, int):
        if s >= 0:
            return x
        q = Decimal(x).quantize(Decimal(1).scaleb(-s), rounding=mode)
        return V.check_long(int(q))
    current_scale = max(0, -int(x.as_tuple().exponent))
    if s >= current_scale:
        return x  # Spark keeps the decimal's own scale when asked for more places
    return x.quantize(Decimal(1).scaleb(-s), rounding=mode)


@table.fn("round", args=(1, 2))
def round_(v: Any, scale: Any = 0) -> Any:
    """Rounds to ``scale`` decimal places, half away from zero (HALF_UP)."""
    return _round(v, scale, ROUND_HALF_UP)


@table.fn("bround", args=(1, 2))
def bround(v: Any, scale: Any = 0) -> Any:
    """Rounds to ``scale`` decimal places, half to even (banker's rounding)."""
    return _round(v, scale, ROUND_HALF_EVEN)


@table.fn("sqrt")
def sqrt(v: Any) -> float:
    """Square root (NaN for negative numbers)."""
    x = _d(v)
    return math.sqrt(x) if x >= 0 else math.nan


@table.fn("cbrt")
def cbrt(v: Any) -> float:
    """Cube root."""
    x = _d(v)
    return math.copysign(abs(x) ** (1 / 3), x) if x else x


@table.fn("pow", "power", args=2)
def power(a: Any, b: Any) -> float:
    """``a`` raised to ``b`` (DOUBLE)."""
    x, y = _d(a), _d(b)
    try:
        return math.pow(x, y)
    except (OverflowError, ValueError):
        if x == 0 and y < 0:
            return math.inf
        if x < 0:  # as Java's Math.pow: a negative base overflows to ±inf for integral exponents, else NaN
            if not y.is_integer():
                return math.nan
            return -math.inf if abs(y) % 2 == 1 else math.inf
        return math.inf


@table.fn("exp")
def exp(v: Any) -> float:
    """e raised to the value."""
    try:
        return math.exp(_d(v))
    except OverflowError:
        return math.inf


def _log(x: float, base: float | None = None) -> float | None:
    if x <= 0:
        return None
    if base is None:
        return math.log(x)
    if base <= 0:
        return None
    return math.log(x) / math.log(base)


@table.fn("ln")
def ln(v: Any) -> Any:
    """Natural logarithm (NULL for 0 and negative numbers)."""
    return _log(_d(v))


@table.fn("log10")
def log10(v: Any) -> Any:
    """Base-10 logarithm (NULL for 0 and negative numbers)."""
    x = _d(v)
    return math.log10(x) if x > 0 else None


@table.fn("log2")
def log2(v: Any) -> Any:
    """Base-2 logarithm (NULL for 0 and negative numbers)."""
    x = _d(v)
    return math.log2(x) if x > 0 else None


@table.fn("log", args=(1, 2))
def log(a: Any, b: Any = None) -> Any:
    """``log(x)`` is the natural logarithm; ``log(base, x)`` the logarithm to a base."""
    if b is None:
        return _log(_d(a))
    return _log(_d(b), _d(a))


@table.fn("sign", "signum")
def signum(v: Any) -> float:
    """-1.0, 0.0 or 1.0."""
    x = _d(v)
    return x if math.isnan(x) else float((x > 0) - (x < 0))


@table.fn("mod", args=2)
def mod(a: Any, b: Any) -> Any:
    """Remainder with the sign of the dividend (like ``%``)."""
    return V.mod(a, b)


@table.fn("pmod", args=2)
def pmod(a: Any, b: Any) -> Any:
    """Positive remainder."""
    r = V.mod(a, b)
    if r is not None and r < 0:
        r = V.mod(V.add(r, b), b)
    return r


@table.fn("negative")
def negative(v: Any) -> Any:
    """``-x``."""
    return V.neg(v)


@table.fn("positive")
def positive(v: Any) -> Any:
    """``+x``."""
    return V.numeric(v, "positive")


def _try(op: Any) -> Any:
    def attempt(a: Any, b: Any) -> Any:
        try:
            return op(a, b)
        except EvalError as exc:
            # Spark's try_ forms also give NULL where an implicit cast of text fails (try_multiply('2.5', 2))
            if exc.error_class in ("ARITHMETIC_OVERFLOW", "DIVIDE_BY_ZERO", "CAST_INVALID_INPUT"):
                return None
            raise

    return attempt


table.fn("try_add", args=2, doc="``a + b``, NULL on overflow or text that does not cast.")(_try(V.add))
table.fn("try_subtract", args=2, doc="``a - b``, NULL on overflow or text that does not cast.")(_try(V.sub))
table.fn("try_multiply", args=2, doc="``a * b``, NULL on overflow or text that does not cast.")(_try(V.mul))
table.fn("try_divide", args=2, doc="``a / b``, NULL when ``b`` is 0.")(_try(V.div))
table.fn("try_mod", args=2, doc="``a % b``, NULL when ``b`` is 0.")(_try(V.mod))


def _extreme(pick_greater: bool) -> Any:
    def build(args: list[Evaluator]) -> Evaluator:
        def extreme(p: Any) -> Any:
            best = None
            for a in args:
                v = a(p)
                if v is None:
                    continue
                if best is None:
                    best = v
                    continue
                if isinstance(v, str) != isinstance(best, str):  # Spark wants one type: no implicit cast here
                    raise V.mismatch("greatest/least", best, v)
                c = V.compare(v, best)
                if (c is not None and c > 0) if pick_greater else (c is not None and c < 0):
                    best = v
            return best

        return extreme

    return build


table.special("greatest", args=(2, None), doc="The largest argument, skipping NULLs.")(_extreme(True))
table.special("least", args=(2, None), doc="The smallest argument, skipping NULLs.")(_extreme(False))


@table.fn("pi", args=0)
def pi() -> float:
    """The constant pi."""
    return math.pi


@table.fn("e", args=0)
def e() -> float:
    """The constant e."""
    return math.e


def _unary(name: str, fn: Any, doc: str) -> None:
    table.fn(name, doc=doc)(lambda v: fn(_d(v)))


_unary("sin", math.sin, "Sine of an angle in radians.")
_unary("cos", math.cos, "Cosine of an angle in radians.")
_unary("tan", math.tan, "Tangent of an angle in radians.")
_unary("radians", math.radians, "Degrees to radians.")
_unary("degrees", math.degrees, "Radians to degrees.")
_unary("atan", math.atan, "Arc tangent, in radians.")


@table.fn("asin")
def asin(v: Any) -> float:
    """Arc sine, in radians (NaN outside -1..1)."""
    x = _d(v)
    return math.asin(x) if -1 <= x <= 1 else math.nan


@table.fn("acos")
def acos(v: Any) -> float:
    """Arc cosine, in radians (NaN outside -1..1)."""
    x = _d(v)
    return math.acos(x) if -1 <= x <= 1 else math.nan


@table.fn("atan2", args=2)
def atan2(y: Any, x: Any) -> float:
    """Angle of the point (x, y), in radians."""
    return math.atan2(_d(y), _d(x)) + 0.0


@table.fn("hypot", args=2)
def hypot(a: Any, b: Any) -> float:
    """sqrt(a² + b²)."""
    return math.hypot(_d(a), _d(b))
