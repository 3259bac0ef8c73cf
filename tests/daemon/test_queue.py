"""The durable queue on its own: group commit, ids, leases, recovery of in-flight entries, poison entries, dead
letters and their replay, a size cap that refuses instead of corrupting."""

from __future__ import annotations

import threading

import orjson
import pytest

from edgewise.daemon.queue import Append, QueueFull, QueueReader
from edgewise.daemon.writer import QueueWriter


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "queue.db")


def test_concurrent_appends_share_commits_and_get_distinct_ids(path):
    writer = QueueWriter(path, "group")
    futures = []
    barrier = threading.Barrier(8)

    def submit(t: int) -> None:
        barrier.wait()
        for i in range(50):
            futures.append(writer.submit(Append("http", "json", orjson.dumps([{"t": t, "i": i}] * 3), 3)))

    threads = [threading.Thread(target=submit, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    firsts = sorted(f.result(10).first for f in futures)
    assert firsts == list(range(1, 1 + 3 * 400, 3))  # every event number once, no gaps
    assert writer.commits < 400  # requests waiting together went into one commit
    writer.close()
    reader = QueueReader(path)
    assert reader.stats().queued_events == 1200


def test_always_commits_each_request_alone(path):
    writer = QueueWriter(path, "always")
    for f in [writer.submit(Append("s", "json", b"{}", 1)) for _ in range(20)]:
        f.result(10)
    assert writer.commits == 20
    writer.close()


def test_leases_acks_recovery_and_poison(path):
    writer = QueueWriter(path, "none")
    for n in range(4):
        writer.submit(Append("s", "ndjson", b'{"n": %d}\n{"n": 0}\n' % n, 2)).result(10)
    reader = QueueReader(path)
    first = reader.lease(worker=0, max_events=3)
    assert [e.seq for e in first] == [1]  # a second entry would exceed 3 events
    assert first[0].event_ids() == ["s:1", "s:2"]
    second = reader.lease(worker=1, max_events=100)
    assert [e.seq for e in second] == [2, 3, 4]
    reader.ack(first)
    assert reader.stats().queued_events == 6 and reader.stats().in_flight_entries == 3
    # worker 1 crashed: its entries wait again (attempt 1 of 2)
    assert reader.recover(max_attempts=2, worker=1) == (3, 0)
    again = reader.lease(worker=1, max_events=100)
    assert [e.attempts for e in again] == [1, 1, 1]
    # and crashed again: now they are set aside as dead letters instead of crashing workers forever
    assert reader.recover(max_attempts=2) == (0, 3)
    stats = reader.stats()
    assert stats.queued_events == 0 and stats.dead_letters == 6
    letters = reader.dead_letters()
    assert [d.event_id for d in letters] == ["s:3", "s:4", "s:5", "s:6", "s:7", "s:8"]
    assert letters[0].payload == {"n": 1} and letters[0].location == "worker"
    assert reader.replay_dead_letters([letters[0].n]) == 1
    replayed = reader.lease(worker=0, max_events=10)
    assert replayed[0].event_ids() == ["s:3"] and replayed[0].body == b'{"n":1}'
    writer.close()


def test_a_lease_takes_only_waiting_entries_around_its_own_unacknowledged_ones(path):
    """A lease chooses by the index (sequence and count) and reads the bodies after it took the lock's leave: an
    entry released by a crashed worker comes back around this worker's leases not yet acknowledged, which must
    not be given to it twice; a backlog of large bodies is not read to choose (this once held the lock for the
    whole backlog: BENCHMARKS.md, ingest)."""
    writer = QueueWriter(path, "none")
    big = b"".join(b'{"n": %d, "pad": "%s"}\n' % (i, b"x" * 200) for i in range(1000))
    for n in range(6):
        body = big if n >= 4 else b'{"n": %d}\n' % n
        writer.submit(Append("s", "ndjson", body, 1000 if n >= 4 else 1)).result(10)
    reader = QueueReader(path)
    assert [e.seq for e in reader.lease(worker=1, max_events=1)] == [1]
    mine = reader.lease(worker=0, max_events=1)
    assert [e.seq for e in mine] == [2]
    assert [e.seq for e in reader.lease(worker=1, max_events=1)] == [3]
    assert reader.recover(max_attempts=5, worker=1) == (2, 0)  # 1 and 3 wait again, 2 is still worker 0's
    again = reader.lease(worker=0, max_events=1003)
    assert [e.seq for e in again] == [1, 3, 4, 5]  # not 2 a second time; 6 would exceed the events asked for
    assert [e.body for e in again] == [b'{"n": 0}\n', b'{"n": 2}\n', b'{"n": 3}\n', big]
    assert [e.seq for e in reader.lease(worker=0, max_events=10)] == [6]  # one entry at least, whatever its size
    writer.close()


def test_a_lease_says_whether_it_left_a_backlog(path):
    """The worker sleeps after a lease only when the lease took everything waiting (``backlog`` false): a lease
    cut short by its size (four 1,000-event requests under max_batch 4,096) or by its entry limit leaves one."""
    writer = QueueWriter(path, "none")
    for n in range(5):
        writer.submit(Append("s", "ndjson", b'{"n": %d}\n' % n, 1000)).result(10)
    reader = QueueReader(path)
    assert [e.seq for e in reader.lease(worker=0, max_events=4096)] == [1, 2, 3, 4] and reader.backlog
    assert [e.seq for e in reader.lease(worker=0, max_events=4096)] == [5] and not reader.backlog
    assert reader.lease(worker=0, max_events=4096) == [] and not reader.backlog
    for n in range(3):
        writer.submit(Append("s", "ndjson", b'{"n": %d}\n' % n, 1)).result(10)
    assert len(reader.lease(worker=0, max_events=100, max_entries=2)) == 2 and reader.backlog
    assert len(reader.lease(worker=0, max_events=100, max_entries=2)) == 1 and not reader.backlog
    writer.close()


def test_a_size_cap_refuses_without_damage(path):
    writer = QueueWriter(path, "group", max_bytes=150_000)
    results = []
    for _ in range(6):
        try:
            results.append(writer.submit(Append("s", "json", b'{"pad": "' + b"x" * 50_000 + b'"}', 1)).result(10).first)
        except QueueFull:
            results.append("full")
    assert "full" in results and results[0] == 1
    reader = QueueReader(path)
    reader.ack(reader.lease(0, 100))
    assert reader.conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    # space freed by acknowledged entries is used again
    assert isinstance(writer.submit(Append("s", "json", b"{}", 1)).result(10).first, int)
    writer.close()


def test_finished_entries_stay_in_recent_up_to_the_last_n(path):
    """`--keep-recent N`: acked and dead-lettered entries are copied to `recent`, which keeps the last N sequence
    numbers (what `serve --check-reload` replays); 0 keeps none and empties it."""
    writer = QueueWriter(path, "none")
    for n in range(6):
        writer.submit(Append("s", "ndjson", b'{"n": %d}\n' % n, 1)).result(10)
    reader = QueueReader(path)
    reader.keep_recent(3)
    leased = reader.lease(worker=0, max_events=100)
    reader.ack(leased[:4])
    reader.dead_letter(leased[4:], [("s:5", "s", b'{"n": 4}', 0, "p/x", "boom")])
    assert [e.seq for e in reader.recent()] == [4, 5, 6]
    assert [orjson.loads(e.body) for e in reader.recent()] == [{"n": 3}, {"n": 4}, {"n": 5}]
    assert reader.stats().queued_events == 0
    reader.keep_recent(0)
    assert reader.recent() == []
    writer.close()


def test_a_reader_opened_while_the_writer_commits_waits_for_the_lock(path):
    """A worker opens its reader while the daemon's writer may be inside a commit (posts arrive while the worker
    starts): opening must wait for the write lock, not fail with "database is locked" (the worker then gave up
    for good and nothing was ever processed: a CI failure of test_ingest_auth)."""
    writer = QueueWriter(path, "group")
    holder = QueueReader(path)
    holder.conn.execute("BEGIN IMMEDIATE")  # what a commit in progress looks like to another connection
    opened: list[QueueReader] = []
    failed: list[BaseException] = []

    def open_reader() -> None:
        try:
            opened.append(QueueReader(path))
        except BaseException as exc:  # reported below
            failed.append(exc)

    thread = threading.Thread(target=open_reader)
    thread.start()
    thread.join(0.3)
    assert not failed, failed
    holder.conn.execute("COMMIT")
    thread.join(30)
    assert not failed, failed
    assert len(opened) == 1 and opened[0].stats().queued_events == 0
    for r in (*opened, holder):
        r.close()
    writer.close()


def test_an_ack_does_not_write_the_bodies_it_frees_again(path):
    """Issue 42: SQLite built with secure_delete on zeroes every page a DELETE frees, so an ack wrote each entry's
    body to the WAL a second time (as much as the append), under the write lock the replies wait for."""
    import os

    writer = QueueWriter(path)
    reader = QueueReader(path)
    try:
        body = b"\n".join(orjson.dumps({"n": i, "pad": os.urandom(100).hex()}) for i in range(1000))
        for _ in range(10):
            writer.submit(Append("s", "ndjson", body, 1000)).result(10)
        reader.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the WAL empty: what follows is the ack alone
        entries = reader.lease(0, 10_000)
        assert len(entries) == 10
        reader.ack(entries)
        wal = os.path.getsize(path + "-wal")
        assert wal < len(body), f"the ack wrote {wal:,} bytes to the WAL for {10 * len(body):,} bytes of bodies"
    finally:
        reader.close()
        writer.close()
