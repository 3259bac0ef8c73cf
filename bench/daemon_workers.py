"""YSB through the edge daemon, timed from the first post to the last event processed, with the CPU each process
used: where a second worker could help, and how much (issue 41).

Each round starts a fresh `edgewise serve` (its own process, the workers its children) on a pipeline, posts the
whole input as NDJSON bodies of 1,000 events over 4 keep-alive connections (``bench/ingest.py``'s client), and
waits until the daemon says every event went through the pipelines (``processed_events`` of ``/v1/queue``). The
windowed pipeline's results (the file sink's segments) are checked by content every round against
``bench/ysb_windowed.py``'s plain loop: each (campaign, window) with its views.

Sides, alternating round by round: the ``windowed`` pipeline (YSB's windowed part: filter, campaign lookup, 10 s
tumbling count per campaign) at one and two workers (two: partitioned by campaign, ``engine/partitions.py``), and
the ``stateless`` one (the filter alone) at one and two workers. A round ends when every event is processed and
the queue is empty (every partition delivered everything). CPU seconds come from ``/proc`` (server, each worker)
and from this process (the client), so the report says which process is the bottleneck: with two cores, a second
worker can only help as far as the server leaves a core free.

    .venv/bin/python bench/daemon_workers.py [--events 500000] [--rounds 3] [--sides windowed]
        [--out bench/results/daemon_workers.json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench import ingest  # noqa: E402
from bench.common import campaign_table  # noqa: E402
from bench.ingest import Client, children, queue_of, run, start_daemon, wait_for_workers  # noqa: E402
from bench.ysb_windowed import WINDOW_MS, plain_loop  # noqa: E402

SIDES = [("windowed", 1), ("windowed", 2), ("stateless", 1), ("stateless", 2)]
WATERMARK_S = 5
"""The windows' watermark delay here: four connections post at once, so requests are queued a few apart from
their order in the input (events up to ~0.4 s of event time out of order); with 5 s none is late, and the closed
windows are the plain loop's, whatever the arrival order."""
PIPELINES = {**ingest.PIPELINES, "windowed": ingest.PIPELINES["windowed"].replace(
    "tumbling: 10s,", f"tumbling: 10s, watermark: {WATERMARK_S}s,")}
CONNECTIONS = 4


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (``/proc/<pid>/stat``); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def window_counts(directory: str) -> dict[tuple[str, int], int]:
    """(campaign, window start in ms) -> views, from the file sink's segments."""
    counts: dict[tuple[str, int], int] = {}
    for path in sorted(Path(directory).rglob("*.ndjson")):
        for line in path.read_bytes().splitlines():
            record = orjson.loads(line)
            record = record.get("payload", record)
            start_ms = round(datetime.fromisoformat(record["window_start"].replace("Z", "+00:00")).timestamp() * 1000)
            counts[(record["campaign_id"], start_ms)] = record["views"]
    return counts


def one_round(bodies: list[bytes], events: int, kind: str, workers: int) -> dict[str, Any]:
    directory = tempfile.mkdtemp(prefix="edgewise-bench-daemon-")
    proc, port = start_daemon(directory, "group", kind, workers=workers, text=PIPELINES[kind])
    try:
        wait_for_workers(port, count=workers)  # a worker still importing would take a core from the measurement
        pids = children(proc.pid)
        before = {pid: cpu_seconds(pid) for pid in [proc.pid, *pids]}
        client_before = time.process_time()
        began = time.perf_counter()

        async def post_all() -> None:
            async def connection(k: int) -> None:
                client = Client("127.0.0.1", port)
                for i in range(k, len(bodies), CONNECTIONS):
                    status = await client.post("/v1/events", bodies[i], "application/x-ndjson")
                    if status != 202:
                        raise RuntimeError(f"the daemon answered {status}")
            await asyncio.gather(*(connection(k) for k in range(CONNECTIONS)))

        run(post_all())
        posted = time.perf_counter() - began
        client_cpu = time.process_time() - client_before
        while (q := queue_of(port))["processed_events"] < events or q["queued_events"]:
            time.sleep(0.005)
        elapsed = time.perf_counter() - began
        used = {pid: cpu_seconds(pid) - before[pid] for pid in before}
        proc.terminate()  # drains: the file sink seals its last segment
        proc.wait(120)
        row = {"pipeline": kind, "workers": workers, "seconds": round(elapsed, 3), "posted_s": round(posted, 3),
               "events_per_s": round(events / elapsed), "server_cpu_s": round(used[proc.pid], 2),
               "worker_cpu_s": [round(used[p], 2) for p in pids if used[p] > 0.05],
               "client_cpu_s": round(client_cpu, 2)}
        if kind == "windowed":
            row["windows"] = window_counts(os.path.join(directory, "out"))  # the pipeline's ./out, beside it
        return row
    finally:  # a failed round leaves no daemon running and no directory behind
        if proc.poll() is None:
            proc.kill()
            proc.wait(60)
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sides", choices=["all", "windowed", "stateless"], default="all")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "daemon_workers.json"))
    args = parser.parse_args()
    from edgewise.sources.ysb import YsbWorkload

    lines = [orjson.dumps(e) for e in YsbWorkload(seed=1).events(args.events)]
    bodies = [b"\n".join(lines[i:i + 1000]) + b"\n" for i in range(0, len(lines), 1000)]
    # the windows the daemon closes: those whose end the watermark (the input's largest event time less the delay)
    # reaches (the daemon keeps the last ones open, in its state, until more events or its idle timeout close them)
    last_ms = max(int(orjson.loads(line)["event_time"]) for line in lines)
    expected = {window: views for window, views in plain_loop(b"".join(line + b"\n" for line in lines),
                                                                campaign_table()).items()
                if window[1] + WINDOW_MS <= last_ms - WATERMARK_S * 1000}
    rows: dict[str, list[dict[str, Any]]] = {}
    sides = [s for s in SIDES if args.sides in ("all", s[0])]
    for r in range(args.rounds):
        for kind, workers in sides if r % 2 == 0 else sides[::-1]:
            row = one_round(bodies, args.events, kind, workers)
            windows = row.pop("windows", None)
            if windows is not None and windows != expected:
                raise SystemExit(f"round {r}: the daemon's windows differ from the plain loop's "
                                 f"({len(windows)} against {len(expected)})")
            rows.setdefault(f"{kind}, {workers} worker{'s' if workers > 1 else ''}", []).append(row)
            print(f"round {r}: {kind} at {workers} worker(s): {row['seconds']:.2f} s ({row['events_per_s']:,}/s; "
                  f"posted in {row['posted_s']:.2f} s), CPU s: server {row['server_cpu_s']}, workers "
                  f"{row['worker_cpu_s']}, client {row['client_cpu_s']}", flush=True)
    summary = {name: {"median_s": statistics.median(x["seconds"] for x in got),
                      "median_events_per_s": round(statistics.median(x["events_per_s"] for x in got)),
                      "median_server_cpu_s": statistics.median(x["server_cpu_s"] for x in got),
                      "median_worker_cpu_s": statistics.median(sum(x["worker_cpu_s"]) for x in got)}
               for name, got in rows.items()}
    for kind in ("windowed", "stateless"):
        if f"{kind}, 1 worker" in rows:
            one, two = rows[f"{kind}, 1 worker"], rows[f"{kind}, 2 workers"]
            summary[f"{kind}: 2 workers / 1 worker (speed-up), per round"] = {
                "ratios": [round(a["seconds"] / b["seconds"], 3) for a, b in zip(one, two, strict=True)]}
    for name, line in summary.items():
        print(f"{name}: {line}")
    Path(args.out).write_text(orjson.dumps({"command": "python bench/daemon_workers.py " + " ".join(sys.argv[1:]),
                                            "cpus": os.cpu_count(), "rounds": rows, "summary": summary},
                                           option=orjson.OPT_INDENT_2).decode())
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
