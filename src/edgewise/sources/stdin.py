"""``stdin``: NDJSON (or another line format) from standard input. Used when a pipeline file declares no
source, or with ``edgewise run PIPELINE -``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import IO, ClassVar, Literal

from edgewise.config import BuildContext
from edgewise.config.models import SourceConfig
from edgewise.declare import Field
from edgewise.events import Batch
from edgewise.sources.base import Source, SourceContext
from edgewise.sources.file import decoder_for
from edgewise.sources.lines import line_batches


class StdinConfig(SourceConfig):
    type: Literal["stdin"] = "stdin"
    format: Literal["ndjson", "clf", "regex", "hfp"] = Field(default="ndjson", description="line format")
    regex: str | None = Field(default=None, description="with format: regex, a pattern with named groups")


class StdinSource(Source):
    kind: ClassVar[str] = "stdin"
    Config = StdinConfig
    config: StdinConfig

    def __init__(self, config: StdinConfig, ctx: BuildContext, stream: IO[bytes] | None = None) -> None:
        super().__init__(config, ctx)
        self.stream = stream

    def read(self, ctx: SourceContext) -> Iterator[Batch]:
        stream = self.stream if self.stream is not None else sys.stdin.buffer
        # stdin has no identity: ids are unique per run (and kept by a run that resumes from its state store)
        prefix = f"{self.id}:{ctx.run_id}:"
        yield from line_batches(stream, source_id=self.id, id_prefix=prefix, where="<stdin>",
                                decoder=decoder_for(self.config.format, self.config.regex), ctx=ctx)
