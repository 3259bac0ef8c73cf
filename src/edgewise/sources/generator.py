"""``generator``: seeded synthetic workloads for demos, tests and benchmarks (``workload: ysb``)."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import ClassVar, Literal

from edgewise.config import BuildContext
from edgewise.config.models import SourceConfig
from edgewise.declare import Field
from edgewise.events import Batch
from edgewise.sources.base import Source, SourceContext
from edgewise.sources.lines import make_batch
from edgewise.sources.ysb import YsbWorkload


class GeneratorConfig(SourceConfig):
    type: Literal["generator"] = "generator"
    workload: Literal["ysb"] = Field(default="ysb", description="ysb: Yahoo Streaming Benchmark ad events")
    count: int = Field(default=10_000, ge=0, description="how many events to generate")
    seed: int = Field(default=1, description="the same seed gives the same events")
    campaigns: int = Field(default=100, ge=1)
    ads_per_campaign: int = Field(default=10, ge=1)
    events_per_second: int = Field(default=10_000, ge=1, description="event-time rate: spacing of event_time values")


class GeneratorSource(Source):
    kind: ClassVar[str] = "generator"
    Config = GeneratorConfig
    config: GeneratorConfig

    def __init__(self, config: GeneratorConfig, ctx: BuildContext) -> None:
        super().__init__(config, ctx)
        self.workload = YsbWorkload(seed=config.seed, campaigns=config.campaigns,
                                    ads_per_campaign=config.ads_per_campaign,
                                    events_per_second=config.events_per_second)

    def read(self, ctx: SourceContext) -> Iterator[Batch]:
        events = self.workload.events(self.config.count)
        prefix = f"{self.id}:{self.config.workload}-{self.config.seed}:"
        n = 0
        while True:
            chunk = list(islice(events, ctx.batch_size))
            if not chunk:
                return
            yield make_batch(chunk, list(range(n, n + len(chunk))), self.id, prefix, ctx)
            n += len(chunk)
