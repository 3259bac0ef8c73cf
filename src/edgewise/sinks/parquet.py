"""``parquet``: an analytics table of Parquet files, written by the Spark engine.

Each micro-batch is written to ``<path>/batch=<id>/`` (replacing what a replayed micro-batch wrote there before,
so the table holds each result once), with one column per top-level field, inferred from the batch's records.
Read the table with ``spark.read.parquet(path)``. The local engine and the daemon do not write Parquet: use the
``file`` sink there (the Spark job can turn that spool into tables).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from edgewise.config import BuildContext
from edgewise.config.models import SinkConfig
from edgewise.declare import Field
from edgewise.errors import ConfigError
from edgewise.events import Batch
from edgewise.sinks.base import Sink


class ParquetSinkConfig(SinkConfig):
    type: Literal["parquet"] = "parquet"
    path: str = Field(description="the table's directory, relative to the pipeline file (Spark engine only)")


class ParquetSink(Sink):
    kind: ClassVar[str] = "parquet"
    Config = ParquetSinkConfig

    def __init__(self, config: ParquetSinkConfig, ctx: BuildContext) -> None:
        raise ConfigError(f"sink {config.id}: the parquet sink is written by the Spark engine (edgewise spark); "
                          "on the local engine and the daemon use a `file` sink")

    def write(self, batch: Batch) -> None:  # pragma: no cover  # never built
        raise NotImplementedError
