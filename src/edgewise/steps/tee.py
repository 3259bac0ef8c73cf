"""``tee`` sends each event (optionally reshaped) to a sink and passes the original on unchanged."""

from __future__ import annotations

from typing import ClassVar

from edgewise.config.models import Expr, StepConfig
from edgewise.declare import Field
from edgewise.engine.context import RunContext
from edgewise.events import Batch
from edgewise.expr.compiler import compile_expression
from edgewise.steps.annotate import make_assigner, split_path
from edgewise.steps.base import Step


class TeeConfig(StepConfig):
    """Copy events to a sink."""

    to: str = Field(description="the sink id that receives the copies")
    set: dict[str, Expr] | None = Field(default=None, description="fields to add or replace on the copy")
    keep: list[str] | None = Field(default=None, description="top-level fields the copy keeps (after `set`)")

    def sink_references(self) -> list[tuple[str, str]]:
        return [("to", self.to)]


class TeeStep(Step):
    kind: ClassVar[str] = "tee"
    Config = TeeConfig

    def __init__(self, config: TeeConfig) -> None:
        super().__init__(config)
        self.to = config.to
        self.assignments = [(split_path(k), compile_expression(v)) for k, v in (config.set or {}).items()]
        self._assign = make_assigner(self.assignments) if self.assignments else None
        self.keep = list(config.keep) if config.keep else None

    def process(self, batch: Batch, ctx: RunContext) -> Batch:
        copies = batch.payloads
        if self._assign is not None:
            assign = self._assign
            copies = [assign(p) for p in copies]
        if self.keep is not None:
            names = self.keep
            copies = [{k: p[k] for k in names if k in p} for p in copies]
        ctx.send(self.to, batch.replace(copies))
        return batch

    def describe(self) -> list[str]:
        lines = [f"{self.head()}: copy to {self.to}"]
        lines += [f"  set {'.'.join(p)} = {e.sql}" for p, e in self.assignments]
        if self.keep:
            lines.append(f"  keep {', '.join(self.keep)}")
        return lines
