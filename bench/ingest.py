"""Durable ingest of the edge daemon: NDJSON batches of 1,000 events and single-event POSTs, for each fsync
policy, with reply latency (p50/p99), next to the raw limit measured in the same run: parse + framed append +
fdatasync per 1,000 events to a plain file, in one Python process.

The daemon runs as `edgewise serve` (a process of its own, its worker another); the load comes from this process
over loopback with an asyncio HTTP/1.1 client (keep-alive connections). Closed loop (each connection sends its
next request when the reply arrives) for throughput; open loop at half the measured single-event throughput for
the latency target, timed from each request's scheduled send time so queueing delay is not hidden.

    python bench/ingest.py [--seconds 5] [--out bench/results/ingest.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import ROOT

CAMPAIGNS = ROOT / "examples" / "ysb" / "campaigns.csv"
PIPELINES = {
    "stateless": """
version: 1
pipelines:
  - id: p
    steps:
      - filter: {id: views, where: "event_type = 'view'"}
    to: [out]
sinks:
  - {id: out, type: file, path: ./out, max_events: 1000000}
""",
    # YSB's windowed part, as examples/ysb/windowed.yaml, fed over HTTP: state is committed with the queue position
    "windowed": f"""
version: 1
event_time: "timestamp_millis(cast(event_time AS BIGINT))"
pipelines:
  - id: p
    steps:
      - filter: {{id: views, where: "event_type = 'view'"}}
      - lookup: {{id: campaign, table: {CAMPAIGNS}, key: ad_id, fields: [campaign_id]}}
      - window: {{id: per-campaign, key: [campaign_id], tumbling: 10s, aggs: {{views: count()}}}}
    to: [out]
sinks:
  - {{id: out, type: file, path: ./out, max_events: 1000000}}
""",
}


def sample_events(n: int) -> list[bytes]:
    from edgewise.sources.ysb import YsbWorkload

    return [orjson.dumps(e) for e in YsbWorkload(seed=1).events(n)]


def raw_limit(lines: list[bytes], directory: str, seconds: float) -> float:
    """Events/s of parse + length-framed append + fdatasync per 1,000 events, to a file (the floor of any durable
    queue written from Python)."""
    path = os.path.join(directory, "raw.log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    done = 0
    start = time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            for i in range(0, len(lines), 1000):
                chunk = lines[i:i + 1000]
                for line in chunk:
                    orjson.loads(line)
                os.write(fd, b"".join(len(x).to_bytes(4, "little") + x for x in chunk))
                os.fdatasync(fd)
                done += len(chunk)
    finally:
        os.close(fd)
    return done / (time.perf_counter() - start)


class Client:
    """A minimal keep-alive HTTP/1.1 client: enough to load a local server without measuring a client library."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes, content_type: str) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: {content_type}\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        m = re.search(rb"(?i)content-length: (\d+)", head)
        await self.reader.readexactly(int(m.group(1)) if m else 0)
        return status


async def closed_loop(port: int, bodies: list[bytes], content_type: str, connections: int, seconds: float,
                      events_per_request: int) -> dict[str, Any]:
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    deadline = time.perf_counter() + seconds

    async def run(k: int) -> None:
        client = Client("127.0.0.1", port)
        i = k
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            status = await client.post("/v1/events", bodies[i % len(bodies)], content_type)
            latencies.append(time.perf_counter() - started)
            statuses[str(status)] = statuses.get(str(status), 0) + 1
            i += connections

    start = time.perf_counter()
    await asyncio.gather(*(run(k) for k in range(connections)))
    elapsed = time.perf_counter() - start
    ok = statuses.get("202", 0)
    return {"events_per_s": ok * events_per_request / elapsed, "requests_per_s": ok / elapsed,
            "p50_ms": _pct(latencies, 50), "p99_ms": _pct(latencies, 99), "statuses": statuses,
            "connections": connections}


async def open_loop(port: int, bodies: list[bytes], rate: float, seconds: float,
                    connections: int = 64) -> dict[str, Any]:
    """Requests scheduled at a fixed rate; latency from each request's scheduled time."""
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    idle: asyncio.Queue[Client] = asyncio.Queue()
    for _ in range(connections):
        idle.put_nowait(Client("127.0.0.1", port))
    total = int(rate * seconds)
    start = time.perf_counter()
    tasks = []

    async def one(i: int, scheduled: float) -> None:
        client = await idle.get()
        status = await client.post("/v1/events", bodies[i % len(bodies)], "application/json")
        latencies.append(time.perf_counter() - scheduled)
        statuses[str(status)] = statuses.get(str(status), 0) + 1
        idle.put_nowait(client)

    for i in range(total):
        scheduled = start + i / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, scheduled)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    return {"target_rate": rate, "achieved_per_s": statuses.get("202", 0) / elapsed, "p50_ms": _pct(latencies, 50),
            "p99_ms": _pct(latencies, 99), "statuses": statuses}


def run(coro: Any) -> Any:
    """Run the load generator on uvloop (as the daemon does), so the client's own overhead stays small."""
    gc.collect()
    gc.freeze()  # the client's own garbage collections must not show up as server latency
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def _pct(values: list[float], p: int) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))], 3)


def start_daemon(directory: str, fsync: str, kind: str, nice: int | None = None, workers: int = 1,
                 text: str | None = None) -> tuple[subprocess.Popen[str], int]:
    """``edgewise serve`` on ``PIPELINES[kind]`` (or the pipeline ``text``); its process and port."""
    pipeline = os.path.join(directory, "pipeline.yaml")
    Path(pipeline).write_text(text or PIPELINES[kind])
    niceness = [] if nice is None else ["--worker-nice", str(nice)]
    proc = subprocess.Popen([sys.executable, "-m", "edgewise", "serve", pipeline, "--port", "0", "--data-dir",
                             os.path.join(directory, f"data-{fsync}"), "--fsync", fsync, "--high-water",
                             "100000000", "--workers", str(workers), *niceness],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=directory)
    assert proc.stderr is not None
    port = 0
    for line in proc.stderr:
        m = re.search(r"listening url=http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
        if " ready" in line:
            break
    return proc, port


MEMORY: dict[str, dict[str, Any]] = {}


def children(pid: int) -> list[int]:
    """The process ids of a process's children (the daemon's workers)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def peak_rss_mb(pid: int) -> float | None:
    """The process's peak resident memory (VmHWM), in MB."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def queue_of(port: int) -> Any:
    return orjson.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/queue", timeout=5).read())


def queued(port: int) -> Any:
    """What the daemon's queue holds (events not yet through the pipelines)."""
    return queue_of(port)["queued_events"]


def wait_for_workers(port: int, timeout: float = 60, count: int = 1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queue = orjson.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/queue", timeout=5).read())
        if len(queue["workers"]) >= count and all(w["ready"] for w in queue["workers"]):
            return
        time.sleep(0.05)
    raise RuntimeError("the daemon's workers did not start")


@contextlib.contextmanager
def fresh_daemon(directory: str, fsync: str, pause_workers: bool, kind: str = "stateless",
                 nice: int | None = None) -> Iterator[int]:
    """A fresh daemon (empty queue). With ``pause_workers`` its worker processes are stopped (SIGSTOP) while the
    load runs: that measures ingest capacity (HTTP + checks + durable commit) rather than the pipelines, which
    would otherwise take one of the two cores from the server and the load generator (processing speed is what
    the YSB benchmarks measure). Latency at a fixed rate is measured with the workers running, as in operation."""
    phase = tempfile.mkdtemp(dir=directory)
    proc, port = start_daemon(phase, fsync, kind, nice)
    wait_for_workers(port)  # a worker still importing at the start would take a core from the measurement
    workers = children(proc.pid) if pause_workers else []
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield port
    finally:
        MEMORY[f"{fsync}:{kind}:{len(MEMORY)}"] = {"daemon_peak_rss_mb": peak_rss_mb(proc.pid), "worker_peak_rss_mb": [
            peak_rss_mb(p) for p in children(proc.pid)]}
        for pid in workers:
            os.kill(pid, signal.SIGCONT)
        proc.kill()  # the queue is thrown away with the directory: no need to drain it
        proc.wait(60)
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(phase, ignore_errors=True)


def running_by_nice(directory: str, events: list[bytes], batches: list[bytes], seconds: float, rounds: int,
                    nices: list[int]) -> dict[str, Any]:
    """Batches of 1,000 with the pipelines running, the workers at each ``--worker-nice`` in turn (the order
    alternating round by round), each beside a raw limit measured right before it: what the workers' priority
    gives ingest, and what it costs processing (events the workers finished per second of load)."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for r in range(rounds):
        for nice in nices if r % 2 == 0 else nices[::-1]:
            for kind in PIPELINES:
                raw_now = raw_limit(events, directory, seconds)
                with fresh_daemon(directory, "group", pause_workers=False, kind=kind, nice=nice) as port:
                    row = run(closed_loop(port, batches, "application/x-ndjson", 4, seconds, 1000))
                    after = queue_of(port)
                row.update(raw_limit_events_per_s=raw_now, ratio_to_raw=row["events_per_s"] / raw_now,
                           processed_per_s=after["processed_events"] / seconds, queued_after=after["queued_events"])
                rows.setdefault(f"{kind}, worker nice {nice}", []).append(row)
                print(f"round {r}, {kind}, worker nice {nice}: {row['ratio_to_raw']:.2f}x raw "
                      f"({row['events_per_s']:,.0f} of {raw_now:,.0f} events/s), p99 {row['p99_ms']} ms, "
                      f"processed {row['processed_per_s']:,.0f} events/s", flush=True)
    summary = {name: {"median_ratio_to_raw": round(statistics.median(x["ratio_to_raw"] for x in got), 3),
                      "ratios": [round(x["ratio_to_raw"], 3) for x in got],
                      "median_processed_per_s": round(statistics.median(x["processed_per_s"] for x in got)),
                      "median_p99_ms": statistics.median(x["p99_ms"] for x in got)} for name, got in rows.items()}
    for name, line in summary.items():
        print(f"{name}: median {line['median_ratio_to_raw']}x raw {line['ratios']}, processed "
              f"{line['median_processed_per_s']:,}/s, p99 {line['median_p99_ms']} ms", flush=True)
    return {"rounds": rows, "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ingest.json"))
    parser.add_argument("--policies", default="group,always,none", help="fsync policies, in this order")
    parser.add_argument("--nice-rounds", type=int, default=0, metavar="N",
                        help="only the pipelines-running phase, N rounds, once per --worker-nice value")
    parser.add_argument("--worker-nice", default="0,5", help="with --nice-rounds: the values compared")
    args = parser.parse_args()
    events = sample_events(20_000)
    batches = [b"\n".join(events[i:i + 1000]) + b"\n" for i in range(0, len(events), 1000)]
    singles = events[:5000]
    results: dict[str, Any] = {"command": "python bench/ingest.py " + " ".join(sys.argv[1:]),
                               "event_bytes": round(statistics.mean(len(e) for e in events)), "cpus": os.cpu_count(),
                               "note": "closed-loop phases with workers paused (ingest capacity), fixed-rate "
                               "phases with workers running (see fresh_daemon)"}
    if args.nice_rounds:
        with tempfile.TemporaryDirectory(dir=ROOT / "bench") as directory:
            results["running_by_worker_nice"] = running_by_nice(
                directory, events, batches, args.seconds, args.nice_rounds,
                [int(n) for n in args.worker_nice.split(",")])
        Path(args.out).write_text(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode())
        print(f"written to {args.out}")
        return
    with tempfile.TemporaryDirectory(dir=ROOT / "bench") as directory:
        for fsync in args.policies.split(","):
            raw = raw_limit(events, directory, args.seconds)
            with fresh_daemon(directory, fsync, pause_workers=True) as port:
                batched = run(closed_loop(port, batches, "application/x-ndjson", 4, args.seconds, 1000))
            with fresh_daemon(directory, fsync, pause_workers=True) as port:
                single = run(closed_loop(port, singles, "application/json", 32, args.seconds, 1))
            with fresh_daemon(directory, fsync, pause_workers=False) as port:
                half = run(open_loop(port, singles, max(100.0, single["requests_per_s"] / 2), args.seconds))
            with fresh_daemon(directory, fsync, pause_workers=False) as port:  # the target: p99 at 2,500/s
                target = run(open_loop(port, singles, min(2500.0, single["requests_per_s"]), args.seconds))
            batched["raw_limit_events_per_s"] = raw
            batched["ratio_to_raw"] = batched["events_per_s"] / raw
            results[fsync] = {"batched_1000": batched, "single": single, "single_at_half_rate": half,
                              "single_at_2500": target}
            if fsync == "group":  # the default policy, with the pipelines running as in operation
                for kind in PIPELINES:
                    raw_now = raw_limit(events, directory, args.seconds)
                    with fresh_daemon(directory, fsync, pause_workers=False, kind=kind) as port:
                        running = run(closed_loop(port, batches, "application/x-ndjson", 4, args.seconds, 1000))
                        running["queued_after"] = queued(port)
                    running["raw_limit_events_per_s"] = raw_now
                    running["ratio_to_raw"] = running["events_per_s"] / raw_now
                    with fresh_daemon(directory, fsync, pause_workers=False, kind=kind) as port:
                        at_2500 = run(open_loop(port, singles, 2500.0, args.seconds))
                        at_2500["queued_after"] = queued(port)
                    results[fsync][f"batched_1000_running_{kind}"] = running
                    results[fsync][f"single_at_2500_running_{kind}"] = at_2500
                    print(f"fsync={fsync}, {kind} pipeline running: raw {raw_now:,.0f} events/s; batches of 1,000 "
                          f"{running['events_per_s']:,.0f} events/s ({running['ratio_to_raw']:.2f}x raw; p99 "
                          f"{running['p99_ms']} ms; {running['queued_after']} queued at the end); single at 2,500/s: "
                          f"{at_2500['achieved_per_s']:,.0f}/s, p50 {at_2500['p50_ms']} ms, p99 {at_2500['p99_ms']} ms",
                          flush=True)
            print(f"fsync={fsync}: raw limit {raw:,.0f} events/s; batches of 1,000 {batched['events_per_s']:,.0f} "
                  f"events/s ({batched['ratio_to_raw']:.2f}x raw; p50 {batched['p50_ms']} ms, p99 "
                  f"{batched['p99_ms']} ms); single {single['requests_per_s']:,.0f}/s (p50 {single['p50_ms']} ms, "
                  f"p99 {single['p99_ms']} ms); at {half['target_rate']:,.0f}/s: p50 {half['p50_ms']} ms, "
                  f"p99 {half['p99_ms']} ms; at {target['target_rate']:,.0f}/s: p50 {target['p50_ms']} ms, "
                  f"p99 {target['p99_ms']} ms", flush=True)
    results["memory"] = MEMORY
    daemon_peaks = [m["daemon_peak_rss_mb"] for m in MEMORY.values() if m["daemon_peak_rss_mb"]]
    if daemon_peaks:
        print(f"peak RSS: daemon {max(daemon_peaks)} MB; workers "
              f"{max((w for m in MEMORY.values() for w in m['worker_peak_rss_mb'] if w), default=0)} MB")
    Path(args.out).write_text(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode())
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
