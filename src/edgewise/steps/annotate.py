"""``annotate`` adds or replaces fields: ``set: {path: expression}``.

Paths use dots for nested fields (``geo.cell``); missing parents are created. Every expression sees the event
as it was before the step (the assignments do not see each other), as in a SQL SELECT list.
"""

from __future__ import annotations

from typing import Any, ClassVar

from edgewise.config.models import Expr, StepConfig
from edgewise.declare import Field
from edgewise.engine.context import RunContext
from edgewise.events import Batch, Payload
from edgewise.expr.compiler import Expression, compile_expression
from edgewise.steps.base import Step


class AnnotateConfig(StepConfig):
    """Add or replace fields."""

    set: dict[str, Expr] = Field(min_length=1, description="field path -> expression giving its new value")


def split_path(path: str) -> tuple[str, ...]:
    """``a.b`` -> ``('a', 'b')``; backticks keep dots inside a name (```odd.key```)."""
    parts: list[str] = []
    buf = ""
    quoted = False
    for ch in path:
        if ch == "`":
            quoted = not quoted
        elif ch == "." and not quoted:
            parts.append(buf)
            buf = ""
        else:
            buf += ch
    parts.append(buf)
    return tuple(parts)


def set_path(payload: Payload, path: tuple[str, ...], value: Any) -> Payload:
    """A copy of ``payload`` with ``path`` set; only the dicts on the path are copied."""
    out = dict(payload)
    if len(path) == 1:
        out[path[0]] = value
        return out
    child = out.get(path[0])
    out[path[0]] = set_path(child if isinstance(child, dict) else {}, path[1:], value)
    return out


def make_assigner(assignments: list[tuple[tuple[str, ...], Expression]]) -> Any:
    """A function payload -> new payload applying every assignment (expressions see the old payload)."""
    flat = [(path[0], expr.evaluate) for path, expr in assignments if len(path) == 1]
    nested = [(path, expr.evaluate) for path, expr in assignments if len(path) > 1]
    if not nested and len(flat) == 1:
        (name, fn), = flat

        def assign_one(p: Payload) -> Payload:
            out = dict(p)
            out[name] = fn(p)
            return out

        return assign_one

    def assign(p: Payload) -> Payload:
        values = [(name, fn(p)) for name, fn in flat]
        nested_values = [(path, fn(p)) for path, fn in nested]
        out = dict(p)
        for name, value in values:
            out[name] = value
        for path, value in nested_values:
            out = set_path(out, path, value)
        return out

    return assign


class AnnotateStep(Step):
    kind: ClassVar[str] = "annotate"
    Config = AnnotateConfig

    def __init__(self, config: AnnotateConfig) -> None:
        super().__init__(config)
        self.assignments = [(split_path(path), compile_expression(text)) for path, text in config.set.items()]
        self._assign = make_assigner(self.assignments)

    def process(self, batch: Batch, ctx: RunContext) -> Batch:
        assign = self._assign
        return batch.replace([assign(p) for p in batch.payloads])

    def describe(self) -> list[str]:
        return [f"{self.head()}: set"] + [f"  {'.'.join(p)} = {e.sql}" for p, e in self.assignments]
