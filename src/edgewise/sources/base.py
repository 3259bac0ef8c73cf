"""The source contract.

A source yields batches of events. In command mode it is finite: ``read`` returns when the input ends. Each
event gets a stable id from the source: ``<source id>:<input identity>:<position>``, so re-reading the same file
gives the same ids (sinks can then deduplicate).

A record that cannot be decoded is reported through ``SourceContext.malformed`` with its position, and skipped;
the rest of the input is still read.
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, ClassVar

from edgewise.config.models import SourceConfig
from edgewise.events import Batch

if TYPE_CHECKING:
    from edgewise.clock import Clock
    from edgewise.config import BuildContext


class SourceContext:
    def __init__(self, clock: Clock, malformed: Callable[[str], None], batch_size: int = 1024,
                 run_id: str | None = None) -> None:
        self.clock = clock
        self.malformed = malformed
        self.batch_size = batch_size
        self.run_id = run_id or secrets.token_hex(6)
        """Identifies this reading of an input that has no identity of its own (stdin) in event ids. A run that
        resumes from a state store gets the interrupted run's id back, so replayed events keep their ids."""


class Source(ABC):
    kind: ClassVar[str]
    Config: ClassVar[type[SourceConfig]]

    def __init__(self, config: SourceConfig, ctx: BuildContext) -> None:
        self.config = config
        self.id = config.id

    @abstractmethod
    def read(self, ctx: SourceContext) -> Iterator[Batch]:
        """Yield batches until the input ends. Report malformed records with ``ctx.malformed`` and go on."""
