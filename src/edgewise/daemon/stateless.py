"""``edgewise serve --stateless``: no queue; each request runs the pipelines and the reply carries the results.

Nothing is kept if the process dies (the client still has its request and can send it again). Requests run one
at a time through one engine (the pipelines are CPU work under the GIL; more threads would not make them faster),
and at most ``concurrency`` requests may wait: the next one gets 429 at once instead of piling up.
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from typing import Any

from edgewise.config.plan import Plan
from edgewise.daemon.worker import lookup_reply
from edgewise.engine.local import LocalEngine
from edgewise.errors import SinkError
from edgewise.events import Batch
from edgewise.sinks.base import LivePublisher


class StatelessRunner:
    def __init__(self, plan: Plan, concurrency: int, live: LivePublisher | None = None) -> None:
        self.limit = max(1, concurrency)
        self.active = 0
        self._count_lock = threading.Lock()
        self._run_lock = threading.Lock()
        self._devnull = open(os.devnull, "wb")  # noqa: SIM115  # results go into the reply, not to stdout
        self.engine = LocalEngine(plan, collect=self._collect, commit_interval=0.0, stdout=self._devnull, live=live)
        self.engine.ctx.on_failed = self._failed
        self.engine.open()
        self._outputs: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._failures: list[dict[str, Any]] = []

    def try_enter(self) -> bool:
        with self._count_lock:
            if self.active >= self.limit:
                return False
            self.active += 1
            return True

    def leave(self) -> None:
        with self._count_lock:
            self.active -= 1

    def _collect(self, pipeline_id: str, batch: Batch) -> None:
        self._outputs[pipeline_id].extend(
            {"id": i, "payload": p} for i, p in zip(batch.ids(), batch.payloads, strict=True))

    def _failed(self, one: Batch, exc: Exception, pipeline_id: str, step_id: str) -> None:
        self._failures.append({"id": one.ids()[0], "pipeline": pipeline_id, "step": step_id,
                               "error": f"{getattr(exc, 'error_class', type(exc).__name__)}: {exc}"})

    def run(self, batch: Batch) -> tuple[int, dict[str, Any]]:
        """(HTTP status, reply body): 200 with the results, 422 if a step failed on an event, 502 if a sink
        could not take the results."""
        with self._run_lock:
            self._outputs = defaultdict(list)
            self._failures = []
            try:
                self.engine.process(batch)
                self.engine.tick()
                self.engine.flush_sinks()
            except SinkError as exc:
                return 502, {"error": str(exc), "results": dict(self._outputs)}
            if self._failures:
                return 422, {"error": f"{len(self._failures)} events failed", "failures": self._failures,
                             "results": dict(self._outputs)}
            return 200, {"results": dict(self._outputs)}

    def lookup(self, step_id: str, key: str) -> dict[str, Any]:
        with self._run_lock:
            return lookup_reply(self.engine, step_id, key)

    def close(self) -> None:
        self.engine.close()
        self._devnull.close()
