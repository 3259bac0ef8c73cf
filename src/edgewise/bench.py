"""``edgewise bench``: how fast a pipeline file runs on the local engine, on its own input, and where the time goes.

The input (the file's finite sources, or an NDJSON file) is read once into batches before any round, so rounds
time the pipelines only: ingest (event times), every step, the end of input (open windows flushed), counters.
Sinks are replaced by ones that discard and state lives in memory: a round measures what the pipeline costs, not what a
disk, a broker or a database costs (``bench/ingest.py`` measures the daemon's durable path). Each round is a
fresh engine over the same batches; the median of the rounds is the result, as in ``BENCHMARKS.md``, because a
shared machine's single runs vary by tens of percent. Decoding is left out, and with it the fused head
(``engine/fused.py``), which runs a pipeline's first steps while lines are decoded: rounds time the steps one
batch pass at a time, which also shows each step's share.
"""

from __future__ import annotations

import io
import resource
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, ClassVar

from edgewise.clock import FakeClock
from edgewise.config import BuildContext
from edgewise.config.models import SinkConfig
from edgewise.config.plan import Plan
from edgewise.engine.context import RunContext
from edgewise.engine.guard import GuardedStep
from edgewise.engine.local import STDOUT, LocalEngine
from edgewise.errors import ConfigError
from edgewise.events import Batch
from edgewise.sinks.base import Sink
from edgewise.sources.base import Source, SourceContext
from edgewise.state.memory import MemoryStore

FINITE_SOURCES = ("file", "generator", "replay")
"""Sources that end by themselves: the ones a benchmark can read to the end before it starts."""


@dataclass
class BenchResult:
    events: int
    read_seconds: float
    round_seconds: list[float]
    events_out: dict[str, int]
    step_seconds: dict[str, float]
    """Time inside each step over all rounds, by ``pipeline/step``."""
    peak_memory_mb: float
    failed: int = 0

    @property
    def median_seconds(self) -> float:
        return statistics.median(self.round_seconds)

    @property
    def events_per_second(self) -> float:
        return self.events / self.median_seconds if self.median_seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        total = sum(self.round_seconds)
        return {
            "events": self.events, "rounds": len(self.round_seconds), "read_seconds": round(self.read_seconds, 4),
            "round_seconds": [round(s, 4) for s in self.round_seconds],
            "events_per_second_median": round(self.events_per_second),
            "events_out": self.events_out, "failed": self.failed,
            "step_share": {k: round(v / total, 4) for k, v in self.step_seconds.items()} if total else {},
            "peak_memory_mb": round(self.peak_memory_mb, 1),
        }


class _DiscardingSink(Sink):
    """Stands in for every sink of the file (the engine's own counters count what reaches it)."""

    kind: ClassVar[str] = "discard"
    Config = SinkConfig

    def __init__(self, sink_id: str) -> None:
        super().__init__(SinkConfig.model_construct(id=sink_id, type="discard"), BuildContext("."))

    def write(self, batch: Batch) -> None:
        pass


@dataclass
class _StepClock:
    """The engine's instrument: time inside each step."""

    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def pipeline(self, pipeline_id: str, events: int) -> AbstractContextManager[object]:
        return nullcontext()

    def step(self, pipeline_id: str, guarded: GuardedStep, batch: Batch, ctx: RunContext) -> Batch:
        started = time.perf_counter()
        try:
            return guarded.run(batch, ctx)
        finally:
            self.seconds[f"{pipeline_id}/{guarded.step.id}"] += time.perf_counter() - started


def read_input(sources: list[Source], limit: int | None, batch_size: int) -> list[Batch]:
    """Every batch of ``sources``, read to their end (or to ``limit`` events)."""
    for source in sources:
        kind = getattr(source.config, "type", source.kind)
        if kind not in FINITE_SOURCES:
            raise ConfigError(f"source {source.id} ({kind}) does not end by itself: edgewise bench reads its input "
                              f"to the end before timing; give an NDJSON file instead (--input FILE)")
    malformed: list[str] = []
    ctx = SourceContext(_frozen_clock(), malformed.append, batch_size)
    batches: list[Batch] = []
    total = 0
    for source in sources:
        for batch in source.read(ctx):
            if limit is not None and total + len(batch) > limit:
                batch = batch.slice(0, limit - total)
            if len(batch):
                batches.append(batch)
                total += len(batch)
            if limit is not None and total >= limit:
                return batches
    if not batches:
        raise ConfigError("the input holds no events" + (f" ({len(malformed)} malformed records)" if malformed else ""))
    return batches


def run_rounds(plan: Plan, batches: list[Batch], rounds: int, *, read_seconds: float, only: list[str] | None = None,
               on_round: Callable[[int, float], None] | None = None) -> BenchResult:
    events = sum(len(b) for b in batches)
    clock = _StepClock()
    seconds: list[float] = []
    out: dict[str, int] = {}
    failed = 0
    names = {"default", *plan.stores, *(s.store_name for s in plan.stateful_steps())}
    for r in range(rounds):
        sinks: dict[str, Sink] = {sid: _DiscardingSink(sid) for sid in [*plan.sinks, STDOUT]}
        engine = LocalEngine(plan, pipelines=only, sinks=sinks, stores={n: MemoryStore() for n in names},
                             instrument=clock, errors=io.StringIO(), clock=_frozen_clock())
        engine.open()
        started = time.perf_counter()
        for batch in batches:
            engine.process(batch)
        engine.finish()
        seconds.append(time.perf_counter() - started)
        engine.close()
        round_out = dict(engine.stats.events_out)
        if r and round_out != out:  # each round is the same work, or the comparison means nothing
            raise RuntimeError(f"round {r + 1} gave {round_out}, round 1 {out}")
        out, failed = round_out, engine.stats.failed
        if on_round is not None:
            on_round(r, seconds[-1])
    return BenchResult(events, read_seconds, seconds, out, dict(clock.seconds), _peak_memory_mb(), failed)


def _frozen_clock() -> FakeClock:
    return FakeClock(0)  # ingestion times are not what is measured; a fixed clock makes rounds alike


def _peak_memory_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def report(result: BenchResult, title: str) -> str:
    """The result as text: throughput, the rounds, the share of each step."""
    per_round = [result.events / s if s else 0.0 for s in result.round_seconds]
    lines = [title,
             f"  {result.events_per_second:,.0f} events/s (median of {len(per_round)} rounds: "
             f"{min(per_round):,.0f}–{max(per_round):,.0f}), one core; input read beforehand in "
             f"{result.read_seconds:.2f} s; peak memory {result.peak_memory_mb:,.0f} MB",
             "  out: " + (", ".join(f"{k} {v:,}" for k, v in result.events_out.items()) or "nothing")
             + (f"; {result.failed:,} events failed" if result.failed else "")]
    total = sum(result.round_seconds)
    if total:
        lines.append("  time per step:")
        width = max((len(k) for k in result.step_seconds), default=0)
        for name, s in sorted(result.step_seconds.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {name.ljust(width)}  {s / total:6.1%}")
        rest = total - sum(result.step_seconds.values())
        lines.append(f"    {'(outside steps)'.ljust(width)}  {rest / total:6.1%}  event times, batches, counters, "
                     "end of input")
    lines.append("  sinks replaced by counters, state in memory: the pipeline's own cost")
    return "\n".join(lines)
