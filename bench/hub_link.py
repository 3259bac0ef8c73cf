"""The edge/hub split (issue 38): what the link carries, how long an event takes from the edge to the hub's result,
and how long the hub takes to stop.

1. **Link volume** on the showcase: the HSL recordings as the replay posts them (``edgewise replay --to -``) through
   the edge part of ``examples/hsl/live.yaml``'s ``hub-cells`` pipeline (``edgewise run --part edge``): events and
   bytes ingested against events and bytes the link holds, and against the link had it forwarded every field
   (each event whole, in the same envelope: what the earlier ``to-hub`` spool wrote).
2. **Latency**: an edge daemon (``edgewise serve``) and one continuous hub (``edgewise spark --master local[2]``)
   from one file split at a stateless step; events posted at a steady pace, each stamped with its send time; the
   hub's ``http`` sink posts its results to a receiver in this process. An event's latency is from the daemon's
   ``202`` (the edge has it durably) to its result reaching the receiver: p50 and p99 over the run, and over the
   events posted from the 10th second on (the first micro-batches of a new query compile its code).
3. **Stop**: SIGTERM to the hub, until its process exits (exit code 0 required), once per round.

    .venv/bin/python bench/hub_link.py [--rounds 3] [--seconds 60] [--rate 20] [--out bench/results/hub_link.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml
from common import ROOT, write_result

EDGEWISE = str(Path(sys.executable).with_name("edgewise"))


def link_volume(tmp: Path) -> dict[str, Any]:
    recorded = subprocess.run([EDGEWISE, "replay", "data/hsl-hfp-apc-dumps/*/hfp.dump", "--dedupe-lines", "--speed",
                               "max", "--to", "-", "--quiet", "--progress", "off"], cwd=ROOT, capture_output=True,
                              check=True).stdout
    (tmp / "in.ndjson").write_bytes(recorded)
    # live.yaml with only its hub-cells pipeline (the others' live sinks need a daemon), its link here
    doc = yaml.safe_load((ROOT / "examples" / "hsl" / "live.yaml").read_text())
    doc["pipelines"] = [p for p in doc["pipelines"] if p["id"] == "hub-cells"]
    doc["sinks"] = [s for s in doc["sinks"] if s["id"] in doc["pipelines"][0]["to"]]
    doc["link"]["path"] = str(tmp / "link")
    doc["sources"][0].pop("idle_timeout", None)
    (tmp / "live.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    subprocess.run([EDGEWISE, "run", str(tmp / "live.yaml"), str(tmp / "in.ndjson"), "--part", "edge", "--quiet"],
                   check=True)
    lines = [line for f in sorted((tmp / "link" / "hub-cells").glob("*.ndjson"))
             for line in f.read_bytes().splitlines()]
    link_bytes = sum(len(line) + 1 for line in lines)
    by_id = {orjson.loads(line)["id"]: line for line in lines}
    # the same envelopes with every field of the event: the ids are `input:in.ndjson:<line>`
    events = recorded.splitlines()
    whole = 0
    for ident, line in by_id.items():
        envelope = orjson.loads(line)
        envelope["payload"] = orjson.loads(events[int(ident.rsplit(":", 1)[1]) - 1])
        whole += len(orjson.dumps(envelope)) + 1
    return {"ingested_events": len(events), "ingested_bytes": len(recorded), "forwarded_events": len(lines),
            "forwarded_bytes": link_bytes, "forwarded_bytes_every_field": whole,
            "bytes_forwarded_per_ingested": round(link_bytes / len(recorded), 3),
            "bytes_pruned_per_whole": round(link_bytes / whole, 3)}


PIPELINE = """\
version: 1
sources: [{{id: in, type: http, anonymous: true}}]
event_time: "timestamp_millis(sent_ms)"
link: {{type: spool, path: {link}}}
pipelines:
  - id: p
    hub_from: mark
    steps:
      - filter: {{id: real, where: "sent_ms IS NOT NULL"}}
      - annotate: {{id: mark, set: {{at_hub: "true"}}}}
    to: [receiver]
sinks:
  - {{id: receiver, type: http, url: "http://127.0.0.1:{port}/results", batch_size: 1000}}
"""


class Receiver(ThreadingHTTPServer):
    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                body = self.rfile.read(int(self.headers["content-length"]))
                now = time.monotonic()
                for record in orjson.loads(body):
                    outer.arrived.setdefault(str(record["seq"]), now)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def latency_round(tmp: Path, seconds: float, rate: float) -> dict[str, Any]:
    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    pipeline = tmp / "latency.yaml"
    pipeline.write_text(PIPELINE.format(link=tmp / "link", port=receiver.server_address[1]))
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    with open(tmp / "daemon.log", "wb") as dlog, open(tmp / "hub.log", "wb") as hlog:
        daemon = subprocess.Popen([EDGEWISE, "serve", str(pipeline), "--port", "0", "--data-dir", str(tmp / "data")],
                                  stdout=dlog, stderr=subprocess.STDOUT)
        url = _wait_for(lambda: _listening(tmp / "daemon.log"), 60, "the daemon")
        hub = subprocess.Popen([EDGEWISE, "spark", str(pipeline), "--master", "local[2]", "--checkpoint",
                                str(tmp / "ck")], stdout=hlog, stderr=subprocess.STDOUT, env=env)
        try:
            _wait_for(lambda: "on Spark" in (tmp / "hub.log").read_text(errors="replace"), 300, "the hub")
            acked: dict[str, float] = {}
            with httpx.Client(timeout=10) as client:
                start = time.monotonic()
                n = 0
                while time.monotonic() - start < seconds:
                    due = start + n / rate
                    time.sleep(max(0.0, due - time.monotonic()))
                    sent_ms = int(time.time() * 1000)
                    r = client.post(f"{url}/v1/events", content=orjson.dumps({"seq": n, "sent_ms": sent_ms}),
                                    headers={"content-type": "application/json"})
                    r.raise_for_status()
                    acked[str(n)] = time.monotonic()
                    n += 1
            _wait_for(lambda: len(receiver.arrived) >= len(acked), 120, "every result")
            latencies = sorted(receiver.arrived[k] - acked[k] for k in acked)
            # after the hub's first micro-batches (Spark compiles each new query's code then): from 10 s on
            steady = sorted(receiver.arrived[k] - acked[k] for k in acked if acked[k] - start >= 10)
            stop_started = time.monotonic()
            hub.send_signal(signal.SIGTERM)
            code = hub.wait(120)
            stop_s = time.monotonic() - stop_started
        finally:
            for p in (hub, daemon):
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(60)
                    except subprocess.TimeoutExpired:
                        p.kill()
            receiver.shutdown()
    if code != 0:
        raise SystemExit(f"the hub exited {code} on SIGTERM:\n{(tmp / 'hub.log').read_text()[-3000:]}")
    return {"events": len(latencies), "p50_s": round(statistics.median(latencies), 3),
            "p99_s": round(latencies[int(0.99 * (len(latencies) - 1))], 3), "max_s": round(latencies[-1], 3),
            "after_10s_p50_s": round(statistics.median(steady), 3),
            "after_10s_p99_s": round(steady[int(0.99 * (len(steady) - 1))], 3),
            "stop_after_sigterm_s": round(stop_s, 2)}


def _listening(log: Path) -> str | None:
    import re

    found = re.search(r"listening url=(\S+)", log.read_text(errors="replace"))
    return found.group(1) if found else None


def _wait_for(probe: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60, help="posting time per round")
    parser.add_argument("--rate", type=float, default=20, help="events per second posted")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "hub_link.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="edgewise-hub-bench-") as tmp:
        volume = link_volume(Path(tmp))
    rounds = []
    for i in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="edgewise-hub-bench-") as tmp:
            rounds.append(latency_round(Path(tmp), args.seconds, args.rate))
            print(f"round {i + 1}: {json.dumps(rounds[-1])}", flush=True)
    write_result(args.out, {
        "benchmark": "hub_link", "link_volume": volume, "rounds": rounds,
        "latency_p50_s_median": statistics.median(r["p50_s"] for r in rounds),
        "latency_p99_s_median": statistics.median(r["p99_s"] for r in rounds),
        "latency_after_10s_p99_s_median": statistics.median(r["after_10s_p99_s"] for r in rounds),
        "stop_after_sigterm_s_median": statistics.median(r["stop_after_sigterm_s"] for r in rounds),
        "command": f"python bench/hub_link.py --rounds {args.rounds} --seconds {args.seconds:g} --rate {args.rate:g}"})


if __name__ == "__main__":
    main()
