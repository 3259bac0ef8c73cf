"""The edge daemon (``edgewise serve``): lifecycle, workers, backpressure, reload and drain.

Start: take the data directory's lock (a second daemon on the same directory is refused; a crashed one left no
lock behind, so no flag is needed after a crash), wait until no worker of a previous daemon is alive, open the
queue, put back what a crash left in flight, start the workers and let them empty the queue. Only then do
``/readyz`` and the broker sources (MQTT, NATS) come up; until then ingest answers 503. The HTTP server
listens from the first moment, so ``/healthz`` and ``/metrics`` show recovery progress.

Backpressure: above ``high_water`` queued events ingest answers 429 (with ``Retry-After``) and the broker sources
stop reading, until the queue is back under ``low_water``. A disk with less than ``min_free`` bytes free, or a
queue at ``max_queue_bytes``, answers 507 and writes nothing.

``SIGTERM``/``SIGINT``: stop accepting (503), stop the broker sources, let each worker finish and commit its
batch, return anything still leased to the queue, exit 0. ``SIGHUP``: load the pipeline file again; if it is
invalid, log why and keep running the old one; if it is valid, start workers on the new one after the old ones
finished their batches. The queue keeps accepting throughout, so a reload loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import os
import shutil
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import IO, Any

import orjson

from edgewise.config import BuildContext, load_document
from edgewise.config.plan import Plan
from edgewise.config.yamlpos import load_text
from edgewise.daemon.live import LiveHub
from edgewise.daemon.log import Log
from edgewise.daemon.metrics import DaemonMetrics
from edgewise.daemon.partitioned import prepare_partitions
from edgewise.daemon.pool import WorkerPool
from edgewise.daemon.queue import Append, Appended, FsyncPolicy, QueueReader, QueueStats, queue_path
from edgewise.daemon.readauth import ReadAccess
from edgewise.daemon.worker import WorkerOptions
from edgewise.daemon.writer import QueueWriter
from edgewise.engine.partitions import check_partitionable
from edgewise.errors import ConfigError, EdgewiseError
from edgewise.sources.base import DaemonSource
from edgewise.sources.http import HttpSource, HttpSourceConfig

DAEMON_SOURCE_TYPES = ("http", "mqtt", "nats")


@dataclass(frozen=True)
class DaemonOptions:
    pipeline_file: str
    host: str = "127.0.0.1"
    port: int = 8080
    data_dir: str = "./edgewise-data"
    fsync: FsyncPolicy = "group"
    workers: int = 1
    high_water: int = 1_000_000
    low_water: int | None = None
    max_queue_bytes: int | None = None
    min_free: int = 64 * 1024 * 1024
    commit_interval: float = 0.5
    max_batch: int = 4096
    worker_nice: int = 5
    """How much lower the workers' CPU priority is than the server's (``nice``): under contention for the cores,
    accepting and durably queueing events comes before processing the backlog (docs/daemon.md)."""
    max_attempts: int = 5
    drain_timeout: float = 30.0
    trace: str = "off"
    log_format: str = "text"
    stateless: bool = False
    concurrency: int = 64
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    """With a client CA, every client must present a certificate it signed (mutual TLS, e.g. mesh peers)."""
    max_header_bytes: int = 16 * 1024
    """Request headers larger than this get 431 before anything else is looked at."""
    read_token_env: str | None = None
    """The environment variable holding the read tokens (comma-separated) of protected endpoints (readauth.py)."""
    protect: frozenset[str] | None = None
    """The protected endpoint groups; None: state and queue when any http source requires credentials."""
    keep_recent: int = 1000
    """Queue entries of finished input kept for ``--check-reload`` (the last N sequence numbers; 0: none)."""

    def __post_init__(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("--tls-cert and --tls-key go together: the certificate and its private key")
        if self.read_token_env and not os.environ.get(self.read_token_env, "").strip():
            raise ConfigError(f"--read-token-env {self.read_token_env}: the environment variable is not set")
        if self.tls_client_ca and not self.tls_cert:
            raise ConfigError("--tls-client-ca checks clients' certificates over TLS: give --tls-cert and --tls-key")
        for flag, path in (("--tls-cert", self.tls_cert), ("--tls-key", self.tls_key),
                           ("--tls-client-ca", self.tls_client_ca)):
            if path and not os.path.isfile(path):
                raise ConfigError(f"{flag} {path}: no such file")


@dataclass(frozen=True)
class PipelineSpec:
    """A validated pipeline file: its text (what workers run, even if the file changes again) and its plan."""

    file: str
    text: str
    base_dir: str
    plan: Plan


def say_edge_address(plan: Plan, scheme: str, host: str, port: int) -> None:
    """Where the file splits pipelines over a spool link: the daemon's address, into the link's folder, where the
    hub's ``live`` sinks find the pages to post to (``placement.edge_address_file``). Written whole, then renamed."""
    from edgewise.placement import edge_address_file

    path = edge_address_file(plan)
    if path is None:
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if host in ("0.0.0.0", "::", ""):  # noqa: S104  # not a bind: listening on every address, a hub here reaches 127.0.0.1
        host = "127.0.0.1"
    with open(path + ".tmp", "wb") as fh:
        fh.write(orjson.dumps({"url": f"{scheme}://{host}:{port}"}))
    os.replace(path + ".tmp", path)


def load_spec(path: str, workers: int = 1) -> PipelineSpec:
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    base_dir = os.path.dirname(os.path.abspath(path))
    from edgewise.placement import edge_plan

    plan = edge_plan(load_document(load_text(text, path), base_dir=base_dir))  # split pipelines: the edge's part
    for s in plan.sources:
        if s.type not in DAEMON_SOURCE_TYPES:
            raise ConfigError(f"source {s.id}: type {s.type} is read by `edgewise run`; the daemon takes "
                              f"{', '.join(DAEMON_SOURCE_TYPES)} sources (remove it, or run it with `edgewise run`)")
    if workers > 1:
        check_partitionable(plan)
    return PipelineSpec(path, text, base_dir, plan)


def http_sources(plan: Plan) -> dict[str, HttpSource]:
    """The plan's ``http`` sources; without any, one open source named ``http``."""
    build = BuildContext(plan.base_dir)
    found = {s.id: HttpSource(s, build) for s in plan.sources if isinstance(s, HttpSourceConfig)}
    return found or {"http": HttpSource(HttpSourceConfig(id="http"), build)}


class Daemon:
    def __init__(self, options: DaemonOptions, log: Log | None = None) -> None:
        self.options = options
        self.log = log or Log(options.log_format)
        self.spec = load_spec(options.pipeline_file, options.workers)
        self.state = "starting"
        self.http = http_sources(self.spec.plan)
        self.sources: dict[str, DaemonSource] = {}
        self.data_dir = os.path.abspath(options.data_dir)
        self.port = options.port
        self.queued = 0
        self.backpressure = False
        self.disk_full = False
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested: asyncio.Event | None = None
        self._reloading = False
        self.writer: QueueWriter | None = None
        self._lockfile: IO[str] | None = None
        self.reader: QueueReader | None = None
        self._read_access: ReadAccess | None = None
        self.live = LiveHub()
        """Live result channels (``live`` sinks) that browsers subscribe to (``/v1/live/<channel>/events``,
        ``/ui/map``)."""
        self.stateless = None
        if options.stateless:
            from edgewise.daemon.stateless import StatelessRunner

            self.stateless = StatelessRunner(self.spec.plan, options.concurrency, live=self.live.publish)
        self.metrics = DaemonMetrics(self.queue_stats)
        self.partitioned = False
        self.pool = WorkerPool(self.data_dir, self._worker_options, self.metrics, self.log, options.max_attempts,
                               on_live=self.live.publish)

    @property
    def read_access(self) -> ReadAccess:
        """Who may read state, queue, metrics, pages and live channels (``readauth.py``); follows a reload."""
        protect = self.options.protect
        if protect is None:
            guarded = any(s.config.requires_auth for s in self.http.values())
            protect = frozenset({"state", "queue"}) if guarded else frozenset()
        if self._read_access is None or self._read_access.protect != protect:
            env = self.options.read_token_env
            tokens = os.environ.get(env, "").split(",") if env else []
            self._read_access = ReadAccess([t.strip() for t in tokens], protect)
        return self._read_access

    # -- queue access for the HTTP handlers and the broker sources ------------------------------------------

    @property
    def high_water(self) -> int:
        return self.options.high_water

    @property
    def low_water(self) -> int:
        lw = self.options.low_water
        return lw if lw is not None else self.options.high_water // 2

    def queue_stats(self) -> QueueStats:
        if self.reader is None:
            return QueueStats(0, 0, 0, 0, 0, 0)
        return self.reader.stats()

    def submit(self, append: Append) -> Future[Appended]:
        """``Ingest.submit``, for the broker sources (on threads of their own)."""
        assert self.writer is not None
        self._count_in(append)
        return self.writer.submit(append)

    def submit_async(self, append: Append) -> asyncio.Future[Appended]:
        """Queue from a coroutine on the daemon's loop (the HTTP handlers)."""
        assert self.writer is not None
        self._count_in(append)
        return self.writer.submit_async(append)

    def _count_in(self, append: Append) -> None:
        self.queued += append.count
        if self.queued >= self.high_water:  # at once, not at the next refresh: a burst must not overshoot
            self.backpressure = True
        self.metrics.ingested(append.source, append.count)

    def wait_for_room(self) -> None:
        """``Ingest.wait_for_room``: block a broker source's thread while the queue is over its high-water mark."""
        while (self.backpressure or self.disk_full) and not self._stop.is_set():
            time.sleep(0.05)

    def refuse_reason(self) -> tuple[int, str] | None:
        """Why ingest must answer with an error right now, if it must (status, message)."""
        if self.state in ("starting", "recovering"):
            return 503, "the daemon is recovering its queue; try again shortly"
        if self.state in ("draining", "stopped"):
            return 503, "the daemon is shutting down"
        if self.disk_full:
            return 507, "the disk holding the queue is (nearly) full; nothing was written"
        if self.backpressure:
            return 429, f"the queue holds more than {self.high_water} events; slow down"
        return None

    def _refresh(self) -> None:
        """Re-read the queue depth and free disk space; switch backpressure on and off with hysteresis."""
        if self.reader is None:
            return
        self.queued = self.reader.queued_events()
        if self.queued >= self.high_water:
            self.backpressure = True
        elif self.queued <= self.low_water:
            self.backpressure = False
        self.disk_full = shutil.disk_usage(self.data_dir).free < self.options.min_free

    # -- main -----------------------------------------------------------------------------------------------

    def run(self) -> int:
        """Run until SIGTERM/SIGINT; the exit code."""
        # the event loop and the queue's writer thread hand work to each other per commit: a shorter GIL switch
        # interval (default 5 ms) keeps a waiting reply from sitting behind the other thread's time slice
        sys.setswitchinterval(0.0005)
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvicorn[standard] brings it on Linux and macOS
            return asyncio.run(self.serve())
        return uvloop.run(self.serve())

    async def serve(self, ready: Callable[[Daemon], None] | None = None) -> int:
        import uvicorn

        from edgewise.daemon.app import build_app

        loop = asyncio.get_running_loop()
        self._loop = loop
        self.live.attach(loop)
        self._stop_requested = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop)
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGHUP, lambda: loop.create_task(self.reload()))

        if not self.options.stateless:
            self._open_queue()
        sock = socket.socket(socket.AF_INET6 if ":" in self.options.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # inherited by accepted connections: a reply written in two parts (head, body) must not wait for the
        # client's delayed ACK (Nagle), which costs 40 ms per request on loopback
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.bind((self.options.host, self.options.port))
        except OSError as exc:
            sock.close()
            self._close_queue()
            raise EdgewiseError(f"cannot listen on {self.options.host}:{self.options.port}: {exc.strerror}; "
                                "is another daemon running there? (--port chooses another)") from None
        sock.listen(2048)
        self.port = sock.getsockname()[1]
        tls: dict[str, Any] = {}
        if self.options.tls_cert:
            tls = {"ssl_certfile": self.options.tls_cert, "ssl_keyfile": self.options.tls_key}
            if self.options.tls_client_ca:
                tls |= {"ssl_ca_certs": self.options.tls_client_ca, "ssl_cert_reqs": ssl.CERT_REQUIRED}
        config = uvicorn.Config(build_app(self), log_level="warning", lifespan="off", access_log=False,
                                timeout_graceful_shutdown=5, **tls)
        server = _Server(config)
        serving = loop.create_task(server.serve(sockets=[sock]))
        while not server.started and not serving.done():
            await asyncio.sleep(0.01)
        if serving.done():
            serving.result()
        scheme = "https" if self.options.tls_cert else "http"
        self.log("listening", url=f"{scheme}://{self.options.host}:{self.port}", data_dir=self.data_dir,
                 mode="stateless" if self.options.stateless else "persistent", pid=os.getpid())
        say_edge_address(self.spec.plan, scheme, self.options.host, self.port)
        refresher = loop.create_task(self._refresh_loop())
        # everything loaded so far (plan, parsers, libraries) lives as long as the daemon: keep it out of the
        # garbage collector's full collections, which would otherwise pause replies for tens of milliseconds
        gc.collect()
        gc.freeze()
        try:
            if self.options.stateless:
                self.state = "ready"
            else:
                await self._recover_then_start()
            if ready is not None:
                ready(self)
            await self._stop_requested.wait()
        finally:
            await self._drain()
            refresher.cancel()
            server.should_exit = True
            await serving
            self._close_queue()
            if self.stateless is not None:
                self.stateless.close()
            self.state = "stopped"
            self.log("stopped", queued=self.queued)
        return 0

    def request_stop(self) -> None:
        if self._stop_requested is not None and not self._stop_requested.is_set():
            self.log("stopping", reason="signal")
            self._stop_requested.set()

    def _open_queue(self) -> None:
        os.makedirs(self.data_dir, exist_ok=True)
        self._lockfile = open(os.path.join(self.data_dir, "daemon.lock"), "a+")  # noqa: SIM115  # held while we run
        try:
            fcntl.flock(self._lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EdgewiseError(f"another edgewise daemon is using {self.data_dir}") from None
        # a worker of a crashed daemon dies with it (PDEATHSIG); wait until the last one is really gone
        with open(os.path.join(self.data_dir, "workers.lock"), "a+") as workers_lock:
            fcntl.flock(workers_lock, fcntl.LOCK_EX)
            fcntl.flock(workers_lock, fcntl.LOCK_UN)
        path = queue_path(self.data_dir)
        self.writer = QueueWriter(path, self.options.fsync, self.options.max_queue_bytes)
        self.reader = QueueReader(path)
        self.reader.keep_recent(self.options.keep_recent)

    def _close_queue(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.reader is not None:
            self.reader.release()
            self.reader.close()
        if self._lockfile is not None:
            self._lockfile.close()  # releases the data directory for the next daemon

    async def _recover_then_start(self) -> None:
        assert self.reader is not None
        self.state = "recovering"
        released, poisoned = self.reader.recover(self.options.max_attempts)
        stats = self.reader.stats()
        self.log("recovering", waiting_events=stats.queued_events, released_entries=released,
                 dead_lettered_entries=poisoned)
        self._start_workers()
        assert self._stop_requested is not None
        started = time.monotonic()
        while self.reader.queued_events() > 0 and not self._stop_requested.is_set():
            await asyncio.sleep(0.02)
        if self._stop_requested.is_set():
            return
        self.log("recovered", events=stats.queued_events, seconds=round(time.monotonic() - started, 3))
        self._start_sources()
        self.state = "ready"
        self.log("ready")

    def _start_sources(self) -> None:
        for config in self.spec.plan.sources:
            if config.type == "http":
                continue
            source = self.spec.plan.source(config)
            source.start(self)
            self.sources[config.id] = source

    def _stop_sources(self) -> None:
        for source in self.sources.values():
            source.stop()
        self.sources.clear()

    async def _refresh_loop(self) -> None:
        while True:
            self._refresh()
            await asyncio.sleep(0.05)

    # -- workers --------------------------------------------------------------------------------------------

    def _worker_options(self, index: int) -> WorkerOptions:
        o = self.options
        return WorkerOptions(pipeline_file=self.spec.file, pipeline_text=self.spec.text, base_dir=self.spec.base_dir,
                             data_dir=self.data_dir, index=index, max_batch=o.max_batch,
                             commit_interval=o.commit_interval, trace=o.trace, nice=o.worker_nice,
                             workers=o.workers, partitioned=self.partitioned)

    def _start_workers(self) -> None:
        """Start the workers; stateful pipelines over several workers first get their state per partition."""
        self.partitioned = prepare_partitions(self.spec.plan, self.data_dir, self.options.workers, self.log)
        self.pool.start(self.options.workers)

    async def lookup(self, step_id: str, key: str) -> dict[str, Any]:
        if self.stateless is not None:
            return self.stateless.lookup(step_id, key)
        return await self.pool.lookup(step_id, key)

    # -- reload and drain -----------------------------------------------------------------------------------

    async def reload(self) -> bool:
        """SIGHUP: switch to the pipeline file as it is now, or keep the old one if the new one is invalid."""
        if self._reloading or self.state not in ("ready", "recovering"):
            return False
        self._reloading = True
        try:
            try:
                spec = await asyncio.to_thread(load_spec, self.options.pipeline_file, self.options.workers)
                http = http_sources(spec.plan)
            except (EdgewiseError, OSError) as exc:
                message = exc.render() if isinstance(exc, ConfigError) else str(exc)
                self.log("reload-rejected", level="error", file=self.options.pipeline_file, error=message)
                self.metrics.reloads.labels("rejected").inc()
                return False
            self.log("reloading", file=self.options.pipeline_file)
            self._stop_sources()
            await self.pool.stop(self.options.drain_timeout)
            self.spec, self.http = spec, http
            self._start_workers()
            if self.state == "ready":
                self._start_sources()
            self.metrics.reloads.labels("applied").inc()
            self.log("reloaded", pipelines=len(spec.plan.pipelines))
            return True
        finally:
            self._reloading = False

    async def _drain(self) -> None:
        if self.state == "stopped":
            return
        self.state = "draining"
        self.live.close()  # browsers' streams end, so the HTTP server's shutdown does not wait for them
        self._stop_sources()
        self._stop.set()
        self.pool.closing.set()
        if self.pool.workers:
            await self.pool.stop(self.options.drain_timeout)
        if self.reader is not None:
            self.reader.release()
            self._refresh()


class _Server:
    """uvicorn's server without its own signal handling: the daemon decides what a signal means."""

    def __new__(cls, config: Any) -> Any:
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Generator[None, None, None]:
                yield

        return Server(config)
