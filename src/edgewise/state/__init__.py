"""State stores: where stateful steps (aggregate, window, complete, dedupe) keep what they remember.

The pipeline file names stores under ``state:``; ``default`` is the one steps use unless they say
``store: <name>``. Without a ``state:`` section every step keeps its state in memory (a one-shot command
forgets it on exit); with ``sqlite`` or ``redis`` a killed run restarts where it left off.

>>> store = open_store(MemoryStoreConfig(type="memory"), base_dir=".")
>>> store.put("k", b"1"), store.put("k", b"2", prev=b"0"), store.get("k")
(True, False, b'1')
"""

from __future__ import annotations

import os
from typing import Annotated, Literal

from edgewise.declare import Field, Model
from edgewise.state.base import UNSET, StateStore

__all__ = [
    "STORE_CONFIGS",
    "UNSET",
    "MemoryStoreConfig",
    "RedisStoreConfig",
    "SqliteStoreConfig",
    "StateStore",
    "StoreConfig",
    "open_store",
]


class MemoryStoreConfig(Model):
    """Kept in this process only."""

    type: Literal["memory"]


class SqliteStoreConfig(Model):
    """A local SQLite file (WAL): survives a killed process."""

    type: Literal["sqlite"]
    path: str = Field(default="./state/edgewise.db", description="the database file, relative to the pipeline file")
    synchronous: Literal["normal", "full"] = Field(default="normal", description="normal: survives a killed process; "
                                                   "full: also a power loss (an fsync per commit)")


class RedisStoreConfig(Model):
    """A Redis server: state shared by several daemons."""

    type: Literal["redis"]
    url: str = Field(default="redis://127.0.0.1:6379/0", description="redis:// or rediss:// URL")
    prefix: str = Field(default="edgewise:", description="prepended to every key, to share a Redis with others")


StoreConfig = Annotated[MemoryStoreConfig | SqliteStoreConfig | RedisStoreConfig, Field(discriminator="type")]

STORE_CONFIGS: dict[str, type[Model]] = {"memory": MemoryStoreConfig, "sqlite": SqliteStoreConfig,
                                         "redis": RedisStoreConfig}


def open_store(config: MemoryStoreConfig | SqliteStoreConfig | RedisStoreConfig, base_dir: str) -> StateStore:
    """Open the store a config describes (relative paths start at ``base_dir``)."""
    if isinstance(config, SqliteStoreConfig):
        from edgewise.state.sqlite import SqliteStore

        path = config.path if os.path.isabs(config.path) else os.path.join(base_dir, config.path)
        return SqliteStore(path, synchronous=config.synchronous)
    if isinstance(config, RedisStoreConfig):
        from edgewise.state.redis import RedisStore

        return RedisStore(config.url, config.prefix)
    from edgewise.state.memory import MemoryStore

    return MemoryStore()
