"""``edgewise inspect queue|dead-letters|state``: read a daemon's data directory, running or not."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime

import orjson

from edgewise.daemon.queue import QueueReader, queue_path
from edgewise.errors import EdgewiseError


def open_queue(data_dir: str) -> QueueReader:
    path = queue_path(data_dir)
    if not os.path.exists(path):
        raise EdgewiseError(f"no queue in {data_dir} (expected {path}); is --data-dir right?")
    return QueueReader(path)


def _time(us: int) -> str:
    return datetime.fromtimestamp(us / 1_000_000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")


def inspect_queue(data_dir: str, limit: int, as_json: bool) -> int:
    queue = open_queue(data_dir)
    try:
        stats = queue.stats()
        entries = queue.peek(limit)
    finally:
        queue.close()
    if as_json:
        _out(orjson.dumps(stats.as_json()).decode())
        for e in entries:
            _out(orjson.dumps({"seq": e.seq, "source": e.source, "kind": e.kind, "events": e.count,
                               "first_id": e.event_ids()[0], "ingested": _time(e.ingest_us),
                               "attempts": e.attempts}).decode())
        return 0
    _out(f"queued events: {stats.queued_events} in {stats.entries} entries ({stats.in_flight_entries} in flight); "
         f"dead letters: {stats.dead_letters}; {stats.bytes} bytes on disk")
    for e in entries:
        _out(f"  #{e.seq} {e.source} {e.kind} {e.count} events from {e.event_ids()[0]}, ingested "
             f"{_time(e.ingest_us)}, taken {e.attempts} times")
    return 0


def inspect_dead_letters(data_dir: str, limit: int, as_json: bool) -> int:
    queue = open_queue(data_dir)
    try:
        letters = queue.dead_letters(limit)
        total = queue.stats().dead_letters
    finally:
        queue.close()
    for d in letters:
        if as_json:
            _out(orjson.dumps(d.as_json()).decode())
        else:
            _out(f"#{d.n} {d.event_id} at {d.location} ({_time(d.failed_us)}): {d.error}\n"
                 f"    {orjson.dumps(d.payload).decode()[:300]}")
    if not as_json:
        _out(f"{total} dead letters" + (f" (first {len(letters)} shown)" if total > len(letters) else "")
             + ("; `edgewise replay-dead-letters` queues them again" if total else ""))
    return 0


def inspect_state(pipeline_file: str, data_dir: str, step: str | None, limit: int, as_json: bool) -> int:
    """The committed state of each stateful step, from the stores the daemon uses for this pipeline."""
    from edgewise.config import load
    from edgewise.daemon.worker import daemon_stores
    from edgewise.engine.partitions import stored_state
    from edgewise.engine.state import StateRuntime

    plan = load(pipeline_file)
    runtime = StateRuntime(plan, daemon_stores(plan, data_dir))
    runtime.open()
    try:
        for s in runtime.steps:
            if step is not None and s.id != step:
                continue
            rows = stored_state(runtime.stores[s.store_name], s.id)
            if not as_json:
                _out(f"step {s.id} (store {s.store_name!r}): {len(rows)} keys")
            for text, value in rows[:limit]:
                if as_json:
                    _out(orjson.dumps({"step": s.id, "key": text, "value": orjson.loads(value)}).decode())
                else:
                    _out(f"  {text}: {value.decode('utf-8', 'replace')[:300]}")
    finally:
        runtime.close()
    return 0
