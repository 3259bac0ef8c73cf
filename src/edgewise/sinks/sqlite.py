"""``sqlite``: events as rows keyed by event id in a local SQLite file (WAL), one transaction per batch."""

from __future__ import annotations

import os
import sqlite3
from typing import ClassVar, Literal

from edgewise.config import BuildContext
from edgewise.declare import Field
from edgewise.errors import SinkError
from edgewise.events import Batch
from edgewise.sinks.base import RetryableSinkError, Sink, SinkContext
from edgewise.sinks.table import TableSinkConfig, insert_statement, rows
from edgewise.state.sqlite import enable_wal


class SqliteSinkConfig(TableSinkConfig):
    type: Literal["sqlite"] = "sqlite"
    path: str = Field(description="the database file, relative to the pipeline file")


class SqliteSink(Sink):
    kind: ClassVar[str] = "sqlite"
    Config = SqliteSinkConfig
    config: SqliteSinkConfig

    def __init__(self, config: SqliteSinkConfig, ctx: BuildContext) -> None:
        super().__init__(config, ctx)
        self.path = ctx.path(config.path)
        self._db: sqlite3.Connection | None = None
        self._sql = insert_statement(config, "?")

    def open(self, ctx: SinkContext) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30, check_same_thread=False)
        enable_wal(self._db)
        if self.config.create:
            self._db.execute(f"CREATE TABLE IF NOT EXISTS {self.config.table} (id TEXT PRIMARY KEY, "
                             "source TEXT NOT NULL, event_time_us INTEGER NOT NULL, payload TEXT NOT NULL)")

    def write(self, batch: Batch) -> None:
        assert self._db is not None
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(self._sql, rows(batch))
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.OperationalError as exc:  # locked, disk full: may pass
            raise RetryableSinkError(f"sqlite {self.path}: {exc}") from None
        except sqlite3.Error as exc:
            raise SinkError(f"sqlite {self.path} rejected the batch: {exc}") from None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
