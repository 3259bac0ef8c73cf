"""The compiled plan: what the engines run. Built from a pipeline file by ``edgewise.config.load``.

The local engine (and later the Spark compiler) read only this: validated configs, constructed steps, resolved
references. Nothing here touches files or the network; sources and sinks are opened by the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from edgewise.config.models import PipelineFileConfig, SinkConfig, SourceConfig
from edgewise.expr.compiler import Expression

if TYPE_CHECKING:
    from edgewise.config.yamlpos import Document
    from edgewise.errors import ConfigError
    from edgewise.steps.base import Step


@dataclass(frozen=True)
class PipelinePlan:
    id: str
    steps: list[Step]
    to: list[str]
    description: str | None = None
    position: int = 0
    """The pipeline's place in the file's ``pipelines:`` (errors found after loading are located with it)."""
    first_step: int = 0
    """The file's index of ``steps[0]``: a hub's part of a split pipeline starts at its ``hub_from`` step."""
    sources: frozenset[str] | None = None
    """The sources whose events enter this pipeline; None: every source (a hub reads each pipeline's own link)."""

    def step_path(self, index: int) -> tuple[str | int, ...]:
        """Where ``steps[index]`` is in the file (``("pipelines", 1, "steps", 3)``)."""
        return ("pipelines", self.position, "steps", self.first_step + index)

    def reads(self, source_id: str) -> bool:
        return self.sources is None or source_id in self.sources


@dataclass(frozen=True)
class Plan:
    file: str
    config: PipelineFileConfig
    event_time: Expression | None
    sources: list[SourceConfig]
    pipelines: list[PipelinePlan]
    sinks: dict[str, SinkConfig]
    source_classes: dict[str, Any] = field(default_factory=dict)
    sink_classes: dict[str, Any] = field(default_factory=dict)
    stores: dict[str, Any] = field(default_factory=dict)
    """State store configs by name (``edgewise.state``); empty: every stateful step keeps state in memory."""
    base_dir: str = "."
    """The pipeline file's directory: relative paths (tables, sqlite files) start here."""
    document: Document | None = None
    """The file as loaded, with the line of every value: for errors found after loading (an engine's checks)."""

    def error(self, path: tuple[str | int, ...], message: str) -> ConfigError:
        """A ``ConfigError`` located at ``path`` in the file (``("sources", 0, "format")``)."""
        from edgewise.errors import ConfigError

        return self.document.error(path, message) if self.document is not None else ConfigError(message)

    def source(self, config: SourceConfig) -> Any:
        """The source ``config`` declares, built with the file's directory as the start of its relative paths."""
        from edgewise.config import BuildContext

        return self.source_classes[config.id](config, BuildContext(self.base_dir))

    def stateful_steps(self) -> list[Any]:
        from edgewise.steps.stateful import StatefulStep

        return [s for p in self.pipelines for s in p.steps if isinstance(s, StatefulStep)]

    @property
    def name(self) -> str:
        return self.config.name or self.file

    def pipeline(self, pipeline_id: str) -> PipelinePlan:
        for p in self.pipelines:
            if p.id == pipeline_id:
                return p
        raise KeyError(pipeline_id)

    def explain(self) -> str:
        """The plan as text: sources, each pipeline's steps with their compiled expressions, sinks."""
        lines = [f"plan {self.name!r} (version {self.config.version})"]
        if self.event_time is not None:
            lines.append(f"  event time: {self.event_time.sql}")
        else:
            lines.append("  event time: ingestion time")
        for s in self.sources:
            lines.append(f"  source {s.id}: {s.type}")
        for p in self.pipelines:
            lines.append(f"  pipeline {p.id}:")
            for i, step in enumerate(p.steps, 1):
                for j, text in enumerate(step.describe()):
                    lines.append(f"    {i}. {text}" if j == 0 else f"       {text}")
            lines.append(f"    -> {', '.join(p.to) if p.to else 'stdout'}")
        for sink in self.sinks.values():
            lines.append(f"  sink {sink.id}: {sink.type}")
        for name, store in self.stores.items():
            lines.append(f"  state store {name}: {store.type}")
        return "\n".join(lines)
