"""``postgres``: events as rows keyed by event id (psycopg 3; ``pip install 'edgewise[postgres]'``).

Each batch is one transaction of ``INSERT … ON CONFLICT (id)``; the payload is ``jsonb``. Connection errors are
retried (with a new connection), constraint and SQL errors are not.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, ClassVar, Literal

from edgewise.config import BuildContext
from edgewise.declare import Field
from edgewise.errors import PluginError, SinkError
from edgewise.events import Batch
from edgewise.sinks.base import RetryableSinkError, Sink, SinkContext
from edgewise.sinks.table import TableSinkConfig, insert_statement, rows


class PostgresSinkConfig(TableSinkConfig):
    type: Literal["postgres"] = "postgres"
    dsn: str = Field(default="postgresql://127.0.0.1:5432/postgres", description="libpq connection string or URL")


class PostgresSink(Sink):
    kind: ClassVar[str] = "postgres"
    Config = PostgresSinkConfig
    config: PostgresSinkConfig

    def __init__(self, config: PostgresSinkConfig, ctx: BuildContext) -> None:
        super().__init__(config, ctx)
        try:
            self.psycopg: Any = importlib.import_module("psycopg")
        except ImportError:
            raise PluginError("the postgres sink needs psycopg: pip install 'edgewise[postgres]'") from None
        self._conn: Any = None
        self._sql = insert_statement(config, "%s", "::jsonb")

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            try:
                self._conn = self.psycopg.connect(self.config.dsn, connect_timeout=5)
            except self.psycopg.OperationalError as exc:
                raise RetryableSinkError(f"postgres: cannot connect: {exc}") from None
            if self.config.create:
                with self._conn.transaction():
                    self._conn.execute(f"CREATE TABLE IF NOT EXISTS {self.config.table} (id text PRIMARY KEY, "
                                       "source text NOT NULL, event_time_us bigint NOT NULL, payload jsonb NOT NULL)")
        return self._conn

    def open(self, ctx: SinkContext) -> None:
        with contextlib.suppress(RetryableSinkError):  # a database that is down must not stop the start: the
            self._connection()                           # first write tries again, with retries

    def write(self, batch: Batch) -> None:
        conn = self._connection()
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(self._sql, rows(batch))
        except self.psycopg.OperationalError as exc:
            conn.close()
            raise RetryableSinkError(f"postgres: {exc}") from None
        except self.psycopg.Error as exc:
            raise SinkError(f"postgres rejected the batch: {exc}") from None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
