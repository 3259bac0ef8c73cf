"""kill -9 while a load generator posts: every event that got a 2xx reply reaches the sinks (at least once; with
an idempotent sink, exactly once). The numbers of a run are printed (pytest -s) for the issue note and BENCHMARKS.

EDGEWISE_CRASH_KILLS sets the number of kills (default 12; the soak-sized run: 20 or more)."""

from __future__ import annotations

import glob
import os
import random
import secrets
import signal
import threading
import time
from collections import defaultdict
from pathlib import Path

import httpx
import orjson
import pytest

from tests.conftest import need, port_open
from tests.daemon.helpers import DaemonProcess

KILLS = int(os.environ.get("EDGEWISE_CRASH_KILLS", "12"))
DSN = "postgresql://postgres@127.0.0.1:5432/test"


class LoadGenerator:
    """Threads posting NDJSON batches to whatever daemon is current, recording what was acknowledged."""

    def __init__(self, threads: int = 4, batch: int = 20) -> None:
        self.url = ""
        self.acked: dict[str, str] = {}  # event id -> the key the client put in it
        self.sent = 0
        self.refused = 0
        self.errors = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.batch = batch
        self.threads = [threading.Thread(target=self._run, args=(t,), daemon=True) for t in range(threads)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _run(self, t: int) -> None:
        n = 0
        with httpx.Client(timeout=10) as client:
            while not self.stop.is_set():
                keys = [f"t{t}-{n + i}" for i in range(self.batch)]
                n += self.batch
                body = b"".join(orjson.dumps({"key": k, "t": t}) + b"\n" for k in keys)
                try:
                    r = client.post(self.url + "/v1/events", content=body,
                                    headers={"content-type": "application/x-ndjson"})
                except httpx.HTTPError:
                    with self.lock:
                        self.errors += 1
                    time.sleep(0.02)
                    continue
                with self.lock:
                    self.sent += self.batch
                    if r.status_code == 202:
                        for event_id, key in zip(r.json()["ids"], keys, strict=True):
                            self.acked[event_id] = key
                    else:
                        self.refused += 1
                if r.status_code != 202:
                    time.sleep(0.02)


@pytest.mark.service
@pytest.mark.slow
def test_kill_minus_nine_loses_no_acknowledged_event(tmp_path: Path) -> None:
    need(port_open(5432), "PostgreSQL on 127.0.0.1:5432")
    import psycopg

    table = f"crash_{secrets.token_hex(4)}"
    out = tmp_path / "out"
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(f"""
version: 1
pipelines:
  - id: p
    steps:
      - annotate: {{id: mark, set: {{seen: "true"}}}}
    to: [spool, db]
sinks:
  - {{id: spool, type: file, path: {out}, envelope: true}}
  - {{id: db, type: postgres, dsn: "{DSN}", table: {table}}}
""")
    data = tmp_path / "data"
    args = ("--commit-interval", "0.1")
    load = LoadGenerator()
    daemon = DaemonProcess(pipeline, data, *args)
    load.url = daemon.url or ""
    load.start()
    rng = random.Random(7)
    recoveries = []
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.3, 0.9))
            daemon.kill()  # SIGKILL, mid-load
            started = time.monotonic()
            daemon = DaemonProcess(pipeline, data, *args)
            recoveries.append(time.monotonic() - started)
            load.url = daemon.url or ""
        time.sleep(0.5)
    finally:
        load.stop.set()
        for t in load.threads:
            t.join(30)
    with httpx.Client(base_url=daemon.url or "", timeout=10) as client:
        deadline = time.monotonic() + 60
        while client.get("/v1/queue").json()["queued_events"] and time.monotonic() < deadline:
            time.sleep(0.1)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(60) == 0, daemon.log()

    lines: dict[str, list[dict]] = defaultdict(list)
    for name in glob.glob(str(out / "*.ndjson")):
        with open(name, "rb") as fh:
            for line in fh:
                record = orjson.loads(line)
                lines[record["id"]].append(record["payload"])
    with psycopg.connect(DSN) as conn:
        rows = {i: p for i, p in conn.execute(f"SELECT id, payload FROM {table}")}
        conn.execute(f"DROP TABLE {table}")

    acked = load.acked
    missing_file = [i for i in acked if i not in lines]
    missing_db = [i for i in acked if i not in rows]
    wrong = [i for i, key in acked.items() if any(p["key"] != key for p in lines.get(i, []))
             or (i in rows and rows[i]["key"] != key)]
    file_lines = sum(len(v) for v in lines.values())
    print(f"\ncrash test: {KILLS} kills, {load.sent} events sent, {len(acked)} acknowledged (202), "
          f"{load.refused} requests refused (503 while recovering), {load.errors} connection errors; "
          f"file sink: {file_lines} lines for {len(lines)} ids ({file_lines - len(lines)} repeats), "
          f"missing {len(missing_file)}; postgres: {len(rows)} rows, missing {len(missing_db)}; "
          f"restart-to-ready p50 {sorted(recoveries)[len(recoveries) // 2]:.2f}s max {max(recoveries):.2f}s")
    assert len(acked) > 1000
    assert not missing_file, missing_file[:5]
    assert not missing_db, missing_db[:5]
    assert not wrong, wrong[:5]
    # exactly once by id: every acknowledged id is one row; and nothing came out that was never sent
    assert all(rows[i]["key"].startswith("t") for i in rows)
