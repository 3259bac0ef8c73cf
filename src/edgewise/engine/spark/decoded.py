"""``file`` sources in a format other than NDJSON (hfp, csv, clf, regex, json), on Spark.

Each file is read whole (Spark's text source with ``wholetext``: the file streaming source tracks which files
were read in the checkpoint, so a restarted job reads each once) and decoded on the workers by the local engine's
own code (``sources.file.whole_file_records``, in ``mapInPandas``), so both engines give the same records, the
same ids (``<source id>:<name>:<position>``, the name the file's path below the glob's fixed part:
``sources/paths.py``) and report the same records as malformed. The event time is the file's modification time
unless ``event_time:`` says otherwise, as for a spool's plain lines.

Files are read as UTF-8 text by Spark before they are decoded: a byte that is not UTF-8 becomes U+FFFD (the
local engine's decoders replace it the same way, except in JSON, where the local engine reports the line).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from edgewise.engine.spark import frame as F
from edgewise.engine.spark.sql import SOURCE

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, DataFrameReader
    from pyspark.sql.streaming.readwriter import DataStreamReader

    from edgewise.sources.file import FileSourceConfig

DECODED_SCHEMA = "id STRING, mtime TIMESTAMP, payload STRING, problem STRING"


def decode_files(config: FileSourceConfig, root: str) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The ``mapInPandas`` function: rows ``(path, mtime, value)`` of whole files to one row per record."""
    source_json = config.model_dump_json(by_alias=True)

    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        import orjson
        import pandas as pd

        from edgewise.schema import held_columns, read_as_declared, reads_text
        from edgewise.sources.file import FileSourceConfig, whole_file_records

        cfg = FileSourceConfig.model_validate_json(source_json)
        declared = held_columns(cfg) if reads_text(cfg) else []
        for frame in frames:
            rows: list[tuple[str, Any, str | None, str | None]] = []
            for path, mtime, value in zip(frame["_path"], frame["_mtime"], frame["value"], strict=True):
                local = unquote(urlsplit(path).path) if "://" in path or path.startswith("file:") else path
                name = os.path.relpath(local, root).replace(os.sep, "/") if root else os.path.basename(local)
                problems: list[str] = []
                for position, payload in whole_file_records((value or "").encode("utf-8"), cfg, name,
                                                            problems.append):
                    record, misfit = read_as_declared(payload, declared) if declared else (payload, None)
                    if misfit is not None:
                        problems.append(f"{cfg.id}:{name}:{position}: {misfit}")
                        continue
                    rows.append((f"{cfg.id}:{name}:{position}", mtime, orjson.dumps(record, default=str).decode(),
                                 None))
                rows += [(f"{cfg.id}:{name}", mtime, None, problem) for problem in problems]
            yield pd.DataFrame(rows, columns=["id", "mtime", "payload", "problem"])

    return run


def glob_escaped(name: str) -> str:
    """A file name as a Hadoop glob matching only itself."""
    return re.sub(r"([\\*?\[\]{}])", r"\\\1", name)


def decoded_frame(reader: DataStreamReader | DataFrameReader, config: FileSourceConfig, pattern: str,
                  root: str) -> DataFrame:
    """The files ``pattern`` names (a file, a directory or a glob), decoded, in the event frame's shape."""
    from pyspark.sql import functions as f

    if os.path.isfile(pattern):  # Spark's file stream takes a directory or a glob: the file's directory, filtered
        reader = reader.option("pathGlobFilter", glob_escaped(os.path.basename(pattern)))
        pattern = os.path.dirname(pattern) or "."
    files = reader.format("text").option("wholetext", "true").load(pattern).select(
        f.col("_metadata.file_path").alias("_path"), f.col("_metadata.file_modification_time").alias("_mtime"),
        "value")
    decoded = files.mapInPandas(decode_files(config, root), DECODED_SCHEMA)
    return decoded.select(
        "id", f.col("mtime").alias("event_time"), f.lit(config.id).alias("source"),
        f.expr("CASE WHEN problem IS NULL THEN parse_json(payload) END").alias(SOURCE),
        f.expr(f"CASE WHEN problem IS NULL THEN '' ELSE {F.quote(F.MALFORMED)} END").alias("_to"),
        f.col("problem").alias("_record"))
