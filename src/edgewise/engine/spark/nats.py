"""The ``nats`` source on Spark: a Python streaming DataSource over a JetStream stream, by sequence number.

An offset is a stream sequence number. Each micro-batch reads the messages after the last committed sequence up to
the stream's last sequence when the batch was planned (so a restarted job re-reads exactly the range it had not
committed, and a replayed batch the same messages). The reader runs in Spark's Python workers, not in the driver,
and reads with an ephemeral, unacknowledged consumer that starts at the range's first sequence: nothing is
consumed from the stream, which stays the source of truth. Event ids are ``<source id>:<stream>:<sequence>``, the
event time the message's JetStream timestamp; bodies are decoded as the daemon's ``nats`` source decodes them
(``json`` or ``hfp``); an undecodable message is reported and skipped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from edgewise.engine.spark import frame as F
from edgewise.engine.spark.sql import SOURCE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FORMAT_NAME = "edgewise_nats"
SCHEMA = "id STRING, event_time TIMESTAMP, payload STRING, error STRING"
CHUNK = 10_000
"""Sequences per input partition."""


def _stream_bounds(url: str, stream: str) -> tuple[int, int]:
    """(first, last) sequence of the stream."""
    import nats

    async def info() -> tuple[int, int]:
        nc = await nats.connect(servers=[url], connect_timeout=5, max_reconnect_attempts=1)
        try:
            state = (await nc.jetstream().stream_info(stream)).state
            return int(state.first_seq), int(state.last_seq)
        finally:
            await nc.close()

    return asyncio.run(info())


def read_range(url: str, stream: str, subject: str, source_id: str, fmt: str, first: int,
               last: int) -> Iterator[tuple[Any, ...]]:
    """The messages with sequences first..last (inclusive) on ``subject``, as rows of ``SCHEMA``."""
    import datetime as dt

    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    from edgewise.daemon.bodies import MESSAGE_FORMATS
    from edgewise.jsonio import dumps

    decode = MESSAGE_FORMATS[fmt]

    async def fetch() -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = []
        nc = await nats.connect(servers=[url], connect_timeout=5, max_reconnect_attempts=3)
        try:
            js = nc.jetstream()
            config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=first,
                                    ack_policy=AckPolicy.NONE, filter_subject=subject, inactive_threshold=60)
            sub = await js.pull_subscribe(subject, stream=stream, config=config)
            try:
                while True:
                    try:
                        msgs = await sub.fetch(min(1000, last - first + 1), timeout=2)
                    except nats.errors.TimeoutError:
                        break  # nothing more on this subject up to `last`
                    done = False
                    for msg in msgs:
                        meta = msg.metadata
                        seq = int(meta.sequence.stream)
                        if seq > last:
                            done = True
                            break
                        event_id = f"{source_id}:{stream}:{seq}"
                        when = meta.timestamp.replace(tzinfo=meta.timestamp.tzinfo or dt.UTC)
                        try:
                            payload = dumps(decode(msg.subject, msg.data)).decode()
                            rows.append((event_id, when, payload, None))
                        except Exception as exc:  # noqa: BLE001  # any decoding problem: reported, skipped
                            rows.append((event_id, when, msg.data.decode("utf-8", "replace"), str(exc)))
                        if seq >= last or meta.num_pending == 0:
                            done = True
                            break
                    if done:
                        break
            finally:
                await sub.unsubscribe()
        finally:
            await nc.close()
        return rows

    yield from asyncio.run(fetch())


def _data_source() -> type:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadLimit

    class SequenceRange(InputPartition):
        def __init__(self, first: int, last: int) -> None:
            super().__init__((first, last))
            self.first = first
            self.last = last

    class NatsStreamReader(DataSourceStreamReader):
        def __init__(self, options: Mapping[str, str]) -> None:
            self.options = options

        def _bounds(self) -> tuple[int, int]:
            return _stream_bounds(self.options["url"], self.options["stream"])

        def initialOffset(self) -> dict[str, int]:  # PySpark's names
            first, _ = self._bounds()
            return {"seq": max(first - 1, 0)}

        def latestOffset(self, start: dict[Any, Any], limit: ReadLimit) -> dict[Any, Any]:
            _, last = self._bounds()
            return {"seq": last}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[SequenceRange]:
            first, last = int(start["seq"]) + 1, int(end["seq"])
            return [SequenceRange(a, min(a + CHUNK - 1, last)) for a in range(first, last + 1, CHUNK)]

        def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
            assert isinstance(partition, SequenceRange)
            o = self.options
            yield from read_range(o["url"], o["stream"], o["subject"], o["source_id"], o["format"],
                                  partition.first, partition.last)

        def commit(self, end: dict[str, int]) -> None:
            """Nothing to do: the stream keeps its messages (its retention decides), the checkpoint the offset."""

    class NatsDataSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return FORMAT_NAME

        def schema(self) -> str:
            return SCHEMA

        def streamReader(self, schema: Any) -> NatsStreamReader:
            return NatsStreamReader(self.options)

    return NatsDataSource


def nats_frame(spark: SparkSession, source: Any) -> DataFrame:
    """The stream as an event frame."""
    from pyspark.sql import functions as f

    spark.dataSource.register(_data_source())
    raw = (spark.readStream.format(FORMAT_NAME).option("url", source.url).option("stream", source.stream)
           .option("subject", source.subject).option("source_id", source.id).option("format", source.format)
           .load())
    if source.is_link:
        return _link_frame(raw, source.id)
    is_object = "try_cast(try_parse_json(payload) AS MAP<STRING, VARIANT>) IS NOT NULL"
    return raw.select(
        "id", "event_time", f.lit(source.id).alias("source"),
        f.expr("CASE WHEN error IS NULL THEN try_parse_json(payload) END").alias(SOURCE),
        f.expr(f"CASE WHEN error IS NULL AND {is_object} THEN '' ELSE {F.quote(F.MALFORMED)} END").alias("_to"),
        f.expr(f"CASE WHEN error IS NULL AND {is_object} THEN NULL ELSE payload END").alias("_record"),
    )


def _link_frame(raw: DataFrame, source_id: str) -> DataFrame:
    """A NATS link's messages (``placement.py``): each an envelope the edge published, whose id, event time, source
    and event are taken as a spool link's are; a heartbeat is routed past the steps (its event time moves the
    watermark)."""
    from pyspark.sql import functions as f

    from edgewise.engine.spark.sources import envelope_columns, envelope_sql, payload_sql, route_sql

    parsed = raw.select("*", f.expr("CASE WHEN error IS NULL THEN try_parse_json(payload) END").alias("_v"))
    parsed = parsed.withColumn("_env", f.expr(envelope_sql("_v", "payload")))
    event = payload_sql("_v", "_env")
    is_object = f"try_cast({event} AS MAP<STRING, VARIANT>) IS NOT NULL"
    return parsed.select(
        *envelope_columns("id", "event_time", source_id),
        f.expr(event).alias(SOURCE),
        f.expr(route_sql(is_object, heartbeats=True)).alias("_to"),
        f.expr(f"CASE WHEN {is_object} THEN NULL ELSE payload END").alias("_record"),
    )
