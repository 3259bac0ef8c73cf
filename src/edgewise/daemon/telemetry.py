"""What a worker measures while it runs the pipelines: per-step latency and event counts (sent to the daemon,
which publishes them on ``/metrics``), and OpenTelemetry spans per pipeline run and per step.

Spans are made only when tracing is switched on (``edgewise serve --trace console|otlp``); the OpenTelemetry API
without an SDK would make no-op spans, but even those cost time on the hot path, so the meter skips them.
"""

from __future__ import annotations

import bisect
import importlib
import time
from collections import defaultdict
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from edgewise.engine.context import RunContext
from edgewise.engine.guard import GuardedStep
from edgewise.events import Batch

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0)
"""Upper bounds (seconds) of the step latency histogram: one step over one batch."""


class Histogram:
    __slots__ = ("buckets", "count", "sum")

    def __init__(self) -> None:
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.sum += seconds
        self.count += 1

    def as_json(self) -> dict[str, Any]:
        return {"buckets": list(self.buckets), "sum": self.sum, "count": self.count}


class StepMeter:
    """The engine's ``Instrument`` in a worker."""

    def __init__(self, tracer: Any = None) -> None:
        self.tracer = tracer
        self.parent: tuple[Any, list[Any]] = (None, [])
        """The trace the batch being run continues (its entries' ``traceparent``: ``tracecontext.parent_of``)."""
        self.latency: dict[tuple[str, str], Histogram] = defaultdict(Histogram)
        self.events: dict[tuple[str, str, str], int] = defaultdict(int)

    def pipeline(self, pipeline_id: str, events: int) -> AbstractContextManager[object]:
        if self.tracer is None:
            return nullcontext()
        parent, links = self.parent
        span: AbstractContextManager[object] = self.tracer.start_as_current_span(
            f"pipeline {pipeline_id}", context=parent, links=links,
            attributes={"edgewise.pipeline": pipeline_id, "edgewise.events": events})
        return span

    def step(self, pipeline_id: str, guarded: GuardedStep, batch: Batch, ctx: RunContext) -> Batch:
        step_id = guarded.step.id
        started = time.perf_counter()
        if self.tracer is None:
            out = guarded.run(batch, ctx)
        else:
            with self.tracer.start_as_current_span(f"step {step_id}", attributes={
                    "edgewise.pipeline": pipeline_id, "edgewise.step": step_id,
                    "edgewise.events_in": len(batch)}) as span:
                out = guarded.run(batch, ctx)
                span.set_attribute("edgewise.events_out", len(out))
        self.latency[(pipeline_id, step_id)].observe(time.perf_counter() - started)
        taken, given = len(batch), len(out)
        counted = getattr(guarded, "counted", None)  # a partitioned worker's step counts only its share
        if counted is not None:
            taken, given = counted(taken, given)
        self.events[(pipeline_id, step_id, "in")] += taken
        self.events[(pipeline_id, step_id, "out")] += given
        return out

    def snapshot(self) -> dict[str, Any]:
        return {"latency": [[p, s, h.as_json()] for (p, s), h in self.latency.items()],
                "events": [[p, s, what, n] for (p, s, what), n in self.events.items()]}


def make_tracer(kind: str, service: str) -> Any:
    """An OpenTelemetry tracer exporting to the console or over OTLP; ``None`` when tracing is off."""
    if kind == "off":
        return None
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    exporter: SpanExporter
    if kind == "otlp":
        try:
            otlp = importlib.import_module("opentelemetry.exporter.otlp.proto.http.trace_exporter")
        except ImportError as exc:
            raise RuntimeError("--trace otlp needs the OTLP exporter: pip install 'edgewise[otel]'") from exc
        exporter = otlp.OTLPSpanExporter()  # endpoint from OTEL_EXPORTER_OTLP_ENDPOINT, as usual
    else:
        exporter = ConsoleSpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return trace.get_tracer("edgewise")
