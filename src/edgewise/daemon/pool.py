"""The daemon's worker processes: start them, read what they report, restart one that dies (its leases go back
to the queue, or to the dead letters after repeated crashes), stop them after their current batch, and ask one
for queryable state.

Processes are started with ``spawn`` from the daemon's main thread (a worker asks Linux to kill it when the thread
that started it ends, see ``worker._die_with_parent``); the supervisor thread only reads pipes and asks the loop
to start replacements.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing.connection import Connection, wait
from typing import Any

from edgewise.daemon.log import Log
from edgewise.daemon.metrics import DaemonMetrics
from edgewise.daemon.queue import QueueReader, queue_path
from edgewise.daemon.worker import WorkerOptions, worker_process


class WorkerHandle:
    def __init__(self, index: int, process: Any, control: Connection) -> None:
        self.index = index
        self.process = process
        self.control = control
        self.key = (index, process.pid)
        self.expected_exit = False
        self.ready = False
        self.failure: str | None = None
        self._send_lock = threading.Lock()

    def send(self, message: tuple[Any, ...]) -> None:
        with self._send_lock, contextlib.suppress(OSError, ValueError):
            self.control.send(message)


class WorkerPool:
    def __init__(self, data_dir: str, options_for: Callable[[int], WorkerOptions], metrics: DaemonMetrics,
                 log: Log, max_attempts: int,
                 on_live: Callable[[str, list[bytes]], None] | None = None) -> None:
        self.data_dir = data_dir
        self.options_for = options_for
        self.metrics = metrics
        self.log = log
        self.max_attempts = max_attempts
        self.on_live = on_live
        self.workers: dict[int, WorkerHandle] = {}
        self.closing = threading.Event()
        self._lookups: dict[int, Future[dict[str, Any]]] = {}
        self._requests = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._supervisor: threading.Thread | None = None

    def start(self, count: int) -> None:
        """Start ``count`` workers (from the event loop's thread) and, the first time, the supervisor."""
        self._loop = asyncio.get_running_loop()
        if self._supervisor is None:
            self._supervisor = threading.Thread(target=self._supervise, name="edgewise-supervisor", daemon=True)
            self._supervisor.start()
        for index in range(count):
            self._start_worker(index)

    def _start_worker(self, index: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        ours, theirs = ctx.Pipe()
        process = ctx.Process(target=worker_process, args=(self.options_for(index), theirs, os.getpid()),
                              name=f"edgewise-worker-{index}", daemon=False)
        process.start()
        theirs.close()
        self.workers[index] = WorkerHandle(index, process, ours)

    def _supervise(self) -> None:
        """Read what workers send; restart a worker that died unexpectedly."""
        reader = QueueReader(queue_path(self.data_dir))
        try:
            while not self.closing.is_set() or self.workers:
                handles = list(self.workers.values())
                if not handles:
                    time.sleep(0.05)
                    continue
                by_conn = {h.control: h for h in handles}
                by_sentinel = {h.process.sentinel: h for h in handles}
                for ready in wait([*by_conn, *by_sentinel], timeout=0.2):
                    if ready in by_conn:
                        self._receive(by_conn[ready])
                    elif ready in by_sentinel:
                        self._exited(by_sentinel[ready], reader)
        finally:
            reader.close()

    def _receive(self, handle: WorkerHandle) -> bool:
        """Handle one message from a worker; False once its end of the pipe is closed."""
        try:
            message = handle.control.recv()
        except (EOFError, OSError):
            return False
        kind = message[0]
        if kind == "stats":
            self.metrics.workers.update(handle.key, message[1])
        elif kind == "live":
            if self.on_live is not None:
                self.on_live(message[1], message[2])
        elif kind == "ready":
            handle.ready = True
        elif kind == "lookup":
            future = self._lookups.pop(message[1], None)
            if future is not None:
                future.set_result(message[2])
        elif kind == "sink-down":
            self.log("worker-sink-down", level="error", worker=handle.index, error=message[2],
                     then="restarting it: it resumes from its last commit, the events wait in the queue")
        elif kind == "failed":
            handle.failure = message[2]
            self.log("worker-failed", level="error", worker=handle.index, error=message[2])
        return True

    def _exited(self, handle: WorkerHandle, reader: QueueReader) -> None:
        with contextlib.suppress(OSError):
            while handle.control.poll() and self._receive(handle):  # what it said last (its final stats)
                pass
        handle.process.join()
        if self.workers.get(handle.index) is handle:
            del self.workers[handle.index]
        self.metrics.workers.retire(handle.key)
        released, poisoned = reader.recover(self.max_attempts, handle.index)
        if handle.expected_exit or self.closing.is_set():
            return
        self.log("worker-died", level="error", worker=handle.index, exit_code=handle.process.exitcode,
                 released_entries=released, dead_lettered_entries=poisoned)
        if handle.failure is not None:  # it could not even start (a broken sink config): retrying is pointless
            self.log("worker-not-restarted", level="error", worker=handle.index, error=handle.failure)
            return
        self.metrics.worker_restarts.inc()
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._start_worker, handle.index)

    async def stop(self, timeout: float) -> None:
        """Let every worker finish and commit its batch, then exit; kill those that take longer than ``timeout``."""
        handles = list(self.workers.values())
        for h in handles:
            h.expected_exit = True
            h.send(("stop",))
        deadline = time.monotonic() + timeout
        while any(h.process.is_alive() for h in handles) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for h in handles:
            if h.process.is_alive():
                self.log("worker-killed", level="warning", worker=h.index, reason="did not stop in time")
                h.process.kill()
        while any(self.workers.get(h.index) is h for h in handles):
            await asyncio.sleep(0.01)

    async def lookup(self, step_id: str, key: str) -> dict[str, Any]:
        """Queryable state. Each worker holds the keys of its partitions: every one is asked, and the one that
        holds the key answers (with one worker, it is the only one)."""
        handles = [h for h in list(self.workers.values()) if h.ready]
        if not handles:
            return {"error": "no worker is running", "status": 503}
        replies = await asyncio.gather(*(self._ask(h, step_id, key) for h in handles))
        found = [r for r in replies if "value" in r]
        if found:
            return found[0]
        return min(replies, key=lambda r: {404: 1}.get(r.get("status", 0), 0))  # a worker's error before not found

    async def _ask(self, handle: WorkerHandle, step_id: str, key: str) -> dict[str, Any]:
        request = next(self._requests)
        future: Future[dict[str, Any]] = Future()
        self._lookups[request] = future
        handle.send(("lookup", request, step_id, key))
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout=5)
        except TimeoutError:
            self._lookups.pop(request, None)
            return {"error": "the worker did not answer in time", "status": 504}
