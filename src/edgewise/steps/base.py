"""The step contract.

A step takes a batch of events and returns the batch that continues down the pipeline. It never mutates its
input: payloads it changes are copied. ``when``, ``retry`` and ``on_error`` are applied around every step by the
engine (``edgewise.engine.guard``), so a step's ``process`` only does its own job and raises ``EvalError`` or
``StepError`` for an event it cannot handle.

Pure steps (``per_event = False``) may be re-run on a single event after a batch failed, to find the failing
event; steps with side effects set ``per_event = True`` and are always run one event at a time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from edgewise.config.models import StepConfig
from edgewise.events import Batch

if TYPE_CHECKING:
    from edgewise.config import BuildContext
    from edgewise.engine.context import RunContext


class Step(ABC):
    """One step of a pipeline."""

    kind: ClassVar[str]
    """The step type as written in pipeline files (``filter``)."""
    Config: ClassVar[type[StepConfig]]
    """The config class of the step's fields (declared as a pydantic model is: ``declare.py``)."""
    per_event: ClassVar[bool] = False
    """True when ``process`` has side effects, so the engine never re-runs it on events it already handled."""
    needs_order: ClassVar[bool] = False
    """True when the step must see events in order, by one process (state per key, a timeline): the daemon then
    runs its pipeline file with one worker."""

    def __init__(self, config: StepConfig) -> None:
        self.config = config
        self.id = config.id

    @classmethod
    def from_config(cls, config: Any, ctx: BuildContext) -> Step:
        """Build the step from its validated config. Raise ``ConfigError`` for problems the model cannot see
        (a lookup table that does not exist); the loader adds the location."""
        return cls(config)

    def open(self, ctx: RunContext) -> None:  # noqa: B027  # optional hook; most steps need nothing
        """Called once before the first batch."""

    def close(self) -> None:  # noqa: B027  # optional hook
        """Called once after the last batch, also after a failure."""

    @abstractmethod
    def process(self, batch: Batch, ctx: RunContext) -> Batch:
        """The events that continue after this step. Raise ``EvalError``/``StepError`` when an event fails;
        the engine then isolates the failing events and applies ``on_error``."""

    @abstractmethod
    def describe(self) -> list[str]:
        """Lines for ``edgewise explain``: what the step does, with its compiled expressions."""

    def head(self) -> str:
        return f"{self.kind} {self.id}"
