"""Running daemons in tests: in this process (a thread, for API tests) or as a real `edgewise serve` process (for
kill -9, SIGTERM and SIGHUP tests)."""

from __future__ import annotations

import asyncio
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx

from edgewise.clock import FakeClock
from edgewise.config import load_text_plan
from edgewise.daemon.log import Log
from edgewise.daemon.queue import QueueReader, queue_path
from edgewise.daemon.server import Daemon, DaemonOptions
from edgewise.daemon.worker import Worker, WorkerOptions


def worker_in(directory: Path, pipeline: str, clock: FakeClock | None = None, **options: Any) -> Worker:
    """A worker's loop in the test process, over the queue in ``directory``, committing only when told; with
    ``clock``, its engine runs on that clock."""
    plan = load_text_plan(pipeline, base_dir=str(directory))
    worker = Worker(plan, WorkerOptions(pipeline_file="p.yaml", pipeline_text=pipeline, base_dir=str(directory),
                                        data_dir=str(directory), commit_interval=3600, **options),
                    QueueReader(queue_path(str(directory))))
    if clock is not None:
        worker.engine.clock = clock
    worker.open()
    return worker


def worker_pauses(monkeypatch: Any, sleep: Any) -> None:
    """A worker's pauses (``idle_wait``) call ``sleep`` instead. The worker module's own view of ``time`` is
    patched: patching ``time.sleep`` itself made every thread of the test process that sleeps in a loop (a
    daemon's helper left by an earlier test) spin."""
    monkeypatch.setattr("edgewise.daemon.worker.time", SimpleNamespace(monotonic=time.monotonic, sleep=sleep))


def wait_for(condition: Any, timeout: float = 30.0, what: str = "condition") -> None:
    """Until ``condition()`` is true (checked every 50 ms): what a daemon does on its own clock (a free-space check,
    statistics sent every 0.5 s) is waited for, not slept for, so a loaded machine is slower, not failing."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def wait_processed(client: httpx.Client, n: int, timeout: float = 30) -> None:
    """Until the daemon behind ``client`` has processed at least ``n`` events and holds none waiting."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        q = client.get("/v1/queue").json()
        if q["processed_events"] >= n and q["queued_events"] == 0:
            return
        time.sleep(0.05)
    raise AssertionError(f"not processed in time: {client.get('/v1/queue').json()}")


def partitioned_workers_caught_up(client: httpx.Client, timeout: float = 30) -> list[dict[str, Any]]:
    """``/v1/queue``'s workers once each has reported reading up to the same last entry with nothing after it.

    A worker reports every ``stats_interval`` (0.5 s), after its work: when the queue is empty a worker's last
    report can still be from before its last lease, or missing for one slow to start. Every partitioned worker reads
    every entry, so caught up, they all report the same position."""
    workers: list[dict[str, Any]] = []

    def caught_up() -> bool:
        nonlocal workers
        workers = client.get("/v1/queue").json()["workers"]
        positions = {w.get("position", 0) for w in workers}
        return len(positions) == 1 and positions != {0} and all(w.get("lag_entries") == 0 for w in workers)

    wait_for(caught_up, timeout, f"every worker to report the queue read (last: {workers})")
    return workers


class InProcessDaemon:
    """A daemon on a thread of the test process; its workers are real processes."""

    def __init__(self, pipeline: Path, data_dir: Path, **options: Any) -> None:
        # read access is tested on its own (test_read_access.py); elsewhere tests read /v1/queue freely, unless
        # they pass protect=None (the daemon's default) or groups of their own
        options.setdefault("protect", frozenset())
        self.log = io.StringIO()
        self.options = DaemonOptions(pipeline_file=str(pipeline), port=0, data_dir=str(data_dir),
                                     commit_interval=options.pop("commit_interval", 0.05), **options)
        self.daemon = Daemon(self.options, Log(stream=self.log))
        ready = threading.Event()
        self.exit_code: int | None = None

        def main() -> None:
            self.exit_code = asyncio.run(self.daemon.serve(ready=lambda d: ready.set()))

        self.thread = threading.Thread(target=main, daemon=True)
        self.thread.start()
        if not ready.wait(60):
            raise RuntimeError(f"the daemon did not get ready:\n{self.log.getvalue()}")
        self.url = f"http://127.0.0.1:{self.daemon.port}"
        self.client = httpx.Client(base_url=self.url, timeout=30)

    def post(self, path: str, content: bytes | str, content_type: str | None = "application/json",
             **headers: str) -> httpx.Response:
        h = dict(headers)
        if content_type is not None:
            h["content-type"] = content_type
        return self.client.post(path, content=content, headers=h)

    def wait_processed(self, n: int, timeout: float = 30) -> None:
        try:
            wait_processed(self.client, n, timeout)
        except AssertionError as exc:  # why the workers did not get there is in the daemon's log
            raise AssertionError(f"{exc}\ndaemon log (last lines):\n{self.log.getvalue()[-4000:]}") from None

    def stop(self) -> None:
        loop = self.daemon._loop
        if loop is not None and self.thread.is_alive():
            loop.call_soon_threadsafe(self.daemon.request_stop)
        self.thread.join(60)
        self.client.close()


LISTENING = re.compile(r"listening url=(\S+)")


class DaemonProcess:
    """``edgewise serve`` as a child process, for signals and kill -9."""

    def __init__(self, pipeline: Path, data_dir: Path, *args: str, env: dict[str, str] | None = None,
                 wait_ready: bool = True) -> None:
        self.lines: list[str] = []
        self.url: str | None = None
        self._ready = threading.Event()
        self._listening = threading.Event()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edgewise", "serve", str(pipeline), "--port", "0", "--data-dir", str(data_dir),
             *(args if "--protect" in args else (*args, "--protect", "none"))],  # as InProcessDaemon
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})})
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._listening.wait(60):
            self.kill()
            raise RuntimeError("the daemon did not start:\n" + "".join(self.lines))
        if wait_ready:
            self.wait_ready()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            m = LISTENING.search(line)
            if m:
                self.url = m.group(1)
                self._listening.set()
            if " ready" in line:
                self._ready.set()

    def wait_ready(self, timeout: float = 60) -> None:
        if not self._ready.wait(timeout):
            raise RuntimeError("the daemon did not get ready:\n" + "".join(self.lines))

    def log(self) -> str:
        return "".join(self.lines)

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        self.proc.kill()
        self.wait(30)

    def wait(self, timeout: float = 60) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(10)  # it ends at EOF, once the daemon and its workers are gone
        if self.proc.stderr is not None and not self._reader.is_alive():
            self.proc.stderr.close()
        return code
