"""The daemon's Prometheus metrics (``GET /metrics``).

Ingest is counted where it happens (the HTTP handlers, the broker sources). What workers do is counted in the
worker processes and sent to the daemon as cumulative snapshots; ``WorkerCollector`` adds up the latest snapshot
of every live worker and the last one of every worker that has exited, so counters never go down across worker
restarts or reloads.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from edgewise.daemon.queue import QueueStats
from edgewise.daemon.telemetry import LATENCY_BUCKETS


class WorkerTotals:
    """Cumulative worker snapshots: live ones by worker key, plus the sum of retired ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.live: dict[object, dict[str, Any]] = {}
        self.retired: list[dict[str, Any]] = []

    def update(self, key: object, snapshot: dict[str, Any]) -> None:
        with self._lock:
            self.live[key] = snapshot

    def retire(self, key: object) -> None:
        with self._lock:
            last = self.live.pop(key, None)
            if last is not None:
                self.retired.append(last)

    def latest(self, key: object) -> dict[str, Any]:
        """The last snapshot of a live worker (empty before its first)."""
        with self._lock:
            return self.live.get(key, {})

    def snapshots(self) -> list[dict[str, Any]]:
        with self._lock:
            return [*self.retired, *self.live.values()]

    def total(self, field: str) -> int:
        return sum(int(s.get(field, 0)) for s in self.snapshots())

    def steps(self) -> list[dict[str, Any]]:
        """Per pipeline and step, summed over workers: events in and out and the outcomes (late, failed, ...),
        in the order the workers first reported them (pipeline order)."""
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        outcomes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for s in self.snapshots():
            for pipeline, step, direction, n in s.get("events", []):
                row = rows.setdefault((pipeline, step), {"pipeline": pipeline, "step": step, "in": 0, "out": 0})
                row[direction] = row.get(direction, 0) + n
            for step, what, n in s.get("step_outcomes", []):
                outcomes[step][what] += n
        for row in rows.values():
            row["outcomes"] = dict(outcomes.get(row["step"], {}))
        return list(rows.values())


class WorkerCollector(Collector):
    def __init__(self, totals: WorkerTotals, queue_stats: Callable[[], QueueStats]) -> None:
        self.totals = totals
        self.queue_stats = queue_stats

    def collect(self) -> Iterator[Any]:
        snaps = self.totals.snapshots()
        q = self.queue_stats()
        yield GaugeMetricFamily("edgewise_queue_events", "events in the durable queue (waiting or in flight)",
                                value=q.queued_events)
        yield GaugeMetricFamily("edgewise_queue_in_flight_entries", "queue entries a worker holds",
                                value=q.in_flight_entries)
        yield GaugeMetricFamily("edgewise_queue_bytes", "size of the queue database on disk", value=q.bytes)
        yield GaugeMetricFamily("edgewise_dead_letters", "events in the dead-letter area", value=q.dead_letters)
        for name, field, text in (
                ("edgewise_processed_events", "acked", "events acknowledged after every pipeline and sink"),
                ("edgewise_dead_lettered_events", "dead_lettered", "events workers moved to the dead letters"),
                ("edgewise_failed_events", "failed", "events a step failed on (on_error: fail)"),
                ("edgewise_sink_failures", "sink_failures", "batches a sink could not take after its retries")):
            yield CounterMetricFamily(name, text, value=sum(int(s.get(field, 0)) for s in snaps))
        retries = CounterMetricFamily("edgewise_sink_retries", "sink writes tried again", labels=["sink"])
        by_sink: dict[str, int] = defaultdict(int)
        outcomes = CounterMetricFamily("edgewise_step_outcomes", "events by step outcome (failed, skipped, "
                                       "dead_lettered, retried, late, ...)", labels=["step", "outcome"])
        by_outcome: dict[tuple[str, str], int] = defaultdict(int)
        events = CounterMetricFamily("edgewise_step_events", "events into and out of each step",
                                     labels=["pipeline", "step", "direction"])
        by_events: dict[tuple[str, str, str], int] = defaultdict(int)
        latency: dict[tuple[str, str], list[Any]] = {}
        for s in snaps:
            for sink, n in s.get("sink_retries", {}).items():
                by_sink[sink] += n
            for step, what, n in s.get("step_outcomes", []):
                by_outcome[(step, what)] += n
            for p, step, direction, n in s.get("events", []):
                by_events[(p, step, direction)] += n
            for p, step, h in s.get("latency", []):
                acc = latency.setdefault((p, step), [[0] * (len(LATENCY_BUCKETS) + 1), 0.0])
                acc[0] = [a + b for a, b in zip(acc[0], h["buckets"], strict=True)]
                acc[1] += h["sum"]
        for sink, n in by_sink.items():
            retries.add_metric([sink], n)
        for (step, what), n in by_outcome.items():
            outcomes.add_metric([step, what], n)
        for key, n in by_events.items():
            events.add_metric(list(key), n)
        yield retries
        yield outcomes
        yield events
        hist = HistogramMetricFamily("edgewise_step_seconds", "time one step takes over one batch",
                                     labels=["pipeline", "step"])
        for (p, step), (buckets, total) in latency.items():
            cumulative, running = [], 0
            for bound, n in zip([*map(str, LATENCY_BUCKETS), "+Inf"], buckets, strict=True):
                running += n
                cumulative.append((bound, running))
            hist.add_metric([p, step], cumulative, sum_value=total)
        yield hist


class DaemonMetrics:
    """The registry of one daemon (not the process-global one: tests run several daemons in one process)."""

    def __init__(self, queue_stats: Callable[[], QueueStats]) -> None:
        self.registry = CollectorRegistry()
        self.workers = WorkerTotals()
        self.ingest_events = Counter("edgewise_ingest_events", "events accepted into the queue", ["source"],
                                     registry=self.registry)
        self.requests = Counter("edgewise_ingest_requests", "ingest requests by reply status",
                                ["source", "status"], registry=self.registry)
        self.reply_seconds = Histogram("edgewise_ingest_reply_seconds", "time from request to reply (includes "
                                       "the commit)", ["source"], registry=self.registry,
                                       buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5))
        self.worker_restarts = Counter("edgewise_worker_restarts", "worker processes restarted after they died",
                                       registry=self.registry)
        self.reloads = Counter("edgewise_reloads", "pipeline reloads (SIGHUP) by result", ["result"],
                               registry=self.registry)
        self.registry.register(WorkerCollector(self.workers, queue_stats))
        self._children: dict[tuple[str, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        """A labelled series, looked up once (``labels()`` takes a lock and builds a key on every call)."""
        key = (metric._name, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def ingested(self, source: str, events: int) -> None:
        self._child(self.ingest_events, source).inc(events)

    def replied(self, source: str, status: int, seconds: float | None = None) -> None:
        self._child(self.requests, source, str(status)).inc()
        if seconds is not None:
            self._child(self.reply_seconds, source).observe(seconds)
