"""What the table sinks (``postgres``, ``sqlite``) share: the row of an event and the statements.

A row is ``(id, source, event_time, payload)``: ``id`` is the primary key, so a batch written again after a
failure or a restart does not duplicate anything. ``mode: upsert`` (default) lets the last write win, ``insert``
keeps the first (``ON CONFLICT DO NOTHING``). With ``create: true`` the table is created if missing.
"""

from __future__ import annotations

from typing import Literal

from edgewise.config.models import SinkConfig
from edgewise.declare import Field
from edgewise.events import Batch
from edgewise.jsonio import dumps

TABLE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$"

Row = tuple[str, str, int, str]


class TableSinkConfig(SinkConfig):
    table: str = Field(pattern=TABLE_PATTERN, description="table name (optionally schema.table)")
    mode: Literal["upsert", "insert"] = Field(default="upsert", description="upsert: the last write of an id wins; "
                                              "insert: the first one does")
    create: bool = Field(default=True, description="create the table if it does not exist")


def rows(batch: Batch) -> list[Row]:
    return [(i, batch.source, t, dumps(p).decode()) for i, p, t in
            zip(batch.ids(), batch.payloads, batch.event_times, strict=True)]


def insert_statement(config: TableSinkConfig, placeholder: str, payload_cast: str = "") -> str:
    p = placeholder
    # the table name is checked against TABLE_PATTERN (an identifier) when the config is loaded
    sql = (f"INSERT INTO {config.table} (id, source, event_time_us, payload) "  # noqa: S608
           f"VALUES ({p}, {p}, {p}, {p}{payload_cast}) ON CONFLICT (id) DO ")
    if config.mode == "insert":
        return sql + "NOTHING"
    return sql + ("UPDATE SET source = excluded.source, event_time_us = excluded.event_time_us, "
                  "payload = excluded.payload")
