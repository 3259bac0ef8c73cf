"""``filter`` keeps events where a condition is TRUE; ``gate`` stops the pipeline for the others.

Both drop events whose condition is FALSE or NULL. They differ in what the drop means: a filtered event was
unwanted data; a gated event simply does not continue in this pipeline (binge's "continuation"), which shows in
metrics as ``stopped`` rather than ``filtered``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from edgewise.config.models import Condition, StepConfig
from edgewise.declare import Field
from edgewise.engine.context import RunContext
from edgewise.events import Batch, Payload
from edgewise.expr.compiler import compile_expression
from edgewise.steps.base import Step


class FilterConfig(StepConfig):
    """Keep events where ``where`` is TRUE."""

    where: Condition = Field(description="condition; events where it is FALSE or NULL are dropped")


class GateConfig(StepConfig):
    """Continue this pipeline only for events where ``where`` is TRUE."""

    where: Condition = Field(description="condition; the pipeline stops for events where it is FALSE or NULL")


class FilterStep(Step):
    kind: ClassVar[str] = "filter"
    Config: ClassVar[type[StepConfig]] = FilterConfig

    def __init__(self, config: FilterConfig | GateConfig) -> None:
        super().__init__(config)
        self.where = compile_expression(config.where)
        # a batch evaluator (`field = 'text'`) when the compiler has one for this condition
        self.mask: Callable[[list[Payload]], list[bool]] | None = getattr(self.where.evaluate, "mask", None)

    def process(self, batch: Batch, ctx: RunContext) -> Batch:
        if self.mask is not None:
            mask = self.mask(batch.payloads)
        else:
            where = self.where.evaluate
            mask = [where(p) is True for p in batch.payloads]
        kept = batch.select(mask)
        dropped = len(batch) - len(kept)
        if dropped:
            ctx.count(self.id, "filtered" if self.kind == "filter" else "stopped", dropped)
        return kept

    def describe(self) -> list[str]:
        return [f"{self.head()}: keep where {self.where.sql}"]


class GateStep(FilterStep):
    kind: ClassVar[str] = "gate"
    Config: ClassVar[type[StepConfig]] = GateConfig

    def describe(self) -> list[str]:
        return [f"{self.head()}: continue where {self.where.sql}"]


