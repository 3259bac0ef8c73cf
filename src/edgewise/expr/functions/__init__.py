"""The built-in function table: every function an expression may call, by lower-case name."""

from __future__ import annotations

from edgewise.expr.functions import arrays, conditional, geo, hashing, math, strings, time
from edgewise.expr.functions.base import FunctionSpec

_TABLES = (strings.table, math.table, conditional.table, arrays.table, hashing.table, time.table, geo.table)

FUNCTIONS: dict[str, FunctionSpec] = {spec.name: spec for t in _TABLES for spec in t.specs}
"""Every built-in function, by name."""

__all__ = ["FUNCTIONS", "FunctionSpec"]
