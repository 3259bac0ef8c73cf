"""One conformance suite for every state store: memory, sqlite and redis (a real Redis on 127.0.0.1:6379)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from edgewise.state.base import StateStore
from edgewise.state.memory import MemoryStore
from edgewise.state.sqlite import SqliteStore
from tests.conftest import need, port_open

StoreFactory = Callable[[], StateStore]



@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.service)])
def factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """Makes stores that share one underlying state, like two processes opening the same store."""
    opened: list[StateStore] = []
    if request.param == "memory":
        shared = MemoryStore()

        def make() -> StateStore:
            return shared
    elif request.param == "sqlite":
        def make() -> StateStore:
            store = SqliteStore(str(tmp_path / "state.db"))
            opened.append(store)
            return store
    else:
        need(port_open(6379), "Redis on 127.0.0.1:6379")
        from edgewise.state.redis import RedisStore

        prefix = f"edgewise-test:{uuid.uuid4().hex}:"

        def make() -> StateStore:
            store = RedisStore("redis://127.0.0.1:6379/0", prefix)
            opened.append(store)
            return store
    yield make
    if request.param == "redis" and opened:
        cleanup = opened[0]
        for key, _ in list(cleanup.scan("")):
            cleanup.delete(key)
    for store in opened:
        store.close()


def test_get_put_delete(factory: StoreFactory) -> None:
    store = factory()
    assert store.get("a") is None
    assert store.put("a", b"1")
    assert store.get("a") == b"1"
    assert store.put("a", b"2")
    assert store.get("a") == b"2"
    assert store.delete("a")
    assert store.get("a") is None
    assert not store.delete("a")


def test_binary_values_and_odd_keys_round_trip(factory: StoreFactory) -> None:
    store = factory()
    value = bytes(range(256))
    for key in ("with space", "ünï/cödé", "glob*?[x]", "a\\b", ""):
        store.put(key, value)
        assert store.get(key) == value


def test_scan_lists_exactly_the_prefix_in_key_order(factory: StoreFactory) -> None:
    store = factory()
    for key in ("w/2", "w/10", "w/1", "wx", "v", "w*literal"):
        store.put(key, key.encode())
    assert [k for k, _ in store.scan("w/")] == ["w/1", "w/10", "w/2"]
    assert dict(store.scan("w/"))["w/10"] == b"w/10"
    assert [k for k, _ in store.scan("w*")] == ["w*literal"]  # glob characters are literal
    assert list(store.scan("nothing")) == []


def test_compare_and_swap_put(factory: StoreFactory) -> None:
    store = factory()
    assert store.put("k", b"1", prev=None)  # create only if absent
    assert not store.put("k", b"x", prev=None)
    assert not store.put("k", b"x", prev=b"0")
    assert store.get("k") == b"1"
    assert store.put("k", b"2", prev=b"1")
    assert store.get("k") == b"2"


def test_compare_and_swap_delete(factory: StoreFactory) -> None:
    store = factory()
    store.put("k", b"1")
    assert not store.delete("k", prev=b"0")
    assert store.get("k") == b"1"
    assert not store.delete("k", prev=None)
    assert store.delete("k", prev=b"1")
    assert store.get("k") is None
    assert not store.delete("k", prev=b"1")


def test_apply_is_all_or_nothing(factory: StoreFactory) -> None:
    store = factory()
    store.put("pos", b"10")
    store.put("old", b"x")
    assert not store.apply({"pos": b"20", "a": b"1", "old": None}, expect={"pos": b"11"})
    assert (store.get("pos"), store.get("a"), store.get("old")) == (b"10", None, b"x")
    assert store.apply({"pos": b"20", "a": b"1", "old": None}, expect={"pos": b"10", "missing": None})
    assert (store.get("pos"), store.get("a"), store.get("old")) == (b"20", b"1", None)
    assert store.apply({})


def test_two_writers_racing_on_one_key_lose_no_update(factory: StoreFactory) -> None:
    """Two writers (separate store handles, as two daemons) increment one counter through CAS; every increment
    must land: a writer whose CAS fails re-reads and retries."""
    increments = 150
    conflicts = [0, 0]
    start = threading.Barrier(2, timeout=60)  # a writer that fails to open must not hang the other

    def writer(n: int) -> None:
        store = factory()
        start.wait()
        for _ in range(increments):
            while True:
                current = store.get("counter")
                value = int(current or b"0") + 1
                if store.put("counter", str(value).encode(), prev=current):
                    break
                conflicts[n] += 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert factory().get("counter") == str(2 * increments).encode()


def test_a_second_handle_sees_committed_writes(factory: StoreFactory) -> None:
    first, second = factory(), factory()
    first.apply({"x": b"1", "y": b"2"})
    assert dict(second.scan("")) == {"x": b"1", "y": b"2"}
