"""``file``: events from files: NDJSON, JSON, CSV, Apache/NCSA logs, regex-parsed lines or HFP recordings.

``path`` may be a file, a directory (its files in name order) or a glob. Ids are ``<source id>:<name>:<line>``,
stable across runs, where the name is the file's path relative to the fixed part of ``path`` (``sources/paths.py``):
same-named files in different directories never share ids.
NDJSON spool envelopes (``{"id", "event_time", "source", "payload"}``, what ``envelope: true`` sinks write) give
their event with the envelope's id and event time, as on Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import ClassVar, Literal

from edgewise.config import BuildContext
from edgewise.config.models import SourceConfig
from edgewise.declare import Field, model_validator
from edgewise.errors import ConfigError, SourceError
from edgewise.events import Batch
from edgewise.sources.base import Source, SourceContext
from edgewise.sources.formats import (
    LineDecoder,
    Payload,
    csv_rows,
    decode_clf,
    decode_hfp_recording,
    decode_ndjson,
    decoded_lines,
    json_document,
    regex_decoder,
    text_lines,
)
from edgewise.sources.lines import line_batches, make_batch
from edgewise.sources.paths import FileSet

Format = Literal["ndjson", "json", "csv", "clf", "regex", "hfp"]


class LineFormatOptions(SourceConfig):
    """The options of the line formats, shared by the sources that read files (``file``, ``replay``)."""

    regex: str | None = Field(default=None, description="with format: regex, a pattern with named groups")
    delimiter: str = Field(default=",", min_length=1, max_length=1, description="with format: csv")
    columns: list[str] | None = Field(default=None, description="with format: csv, column names when there is no "
                                      "header")
    null_values: list[str] = Field(default=[], description="with format: csv, cell values read as NULL, e.g. ['NA', "
                                   "'']")

    @model_validator(mode="after")
    def _regex_given(self) -> LineFormatOptions:
        if getattr(self, "format", None) == "regex" and not self.regex:
            raise ValueError("format: regex needs `regex:`, a pattern with named groups")
        return self


class FileSourceConfig(LineFormatOptions):
    type: Literal["file"] = "file"
    path: str = Field(description="a file, a directory or a glob, relative to the pipeline file")
    format: Format = Field(default="ndjson", description="record format")


def decoder_for(fmt: str, regex: str | None) -> LineDecoder | None:
    if fmt == "ndjson":
        return None
    if fmt == "clf":
        return decode_clf
    if fmt == "hfp":
        return decode_hfp_recording
    if fmt == "regex":
        try:
            return regex_decoder(regex or "")
        except Exception as exc:  # noqa: BLE001  # re.error or our own ValueError, both a config problem
            raise ConfigError(f"regex {regex!r}: {exc}") from None
    raise ConfigError(f"format {fmt!r} is not a line format")


class FileSource(Source):
    kind: ClassVar[str] = "file"
    Config = FileSourceConfig
    config: FileSourceConfig

    def __init__(self, config: FileSourceConfig, ctx: BuildContext) -> None:
        super().__init__(config, ctx)
        self.paths = FileSet(ctx.path(config.path), source_id=self.id, as_written=config.path)
        self.decoder = decoder_for(config.format, config.regex) if config.format not in ("json", "csv") else None

    def read(self, ctx: SourceContext) -> Iterator[Batch]:
        for path, name in self.paths.named():
            prefix = f"{self.id}:{name}:"
            with open(path, "rb") as fh:
                if self.config.format in WHOLE_FILE_FORMATS:
                    records = list(whole_file_records(fh.read(), self.config, path, ctx.malformed))
                    for start in range(0, len(records), ctx.batch_size):
                        chunk = records[start : start + ctx.batch_size]
                        yield make_batch([p for _, p in chunk], [n for n, _ in chunk], self.id, prefix, ctx)
                else:
                    yield from line_batches(fh, source_id=self.id, id_prefix=prefix, where=path,
                                            decoder=self.decoder, ctx=ctx)


WHOLE_FILE_FORMATS = ("json", "csv")


def whole_file_records(data: bytes, config: FileSourceConfig, where: str,
                       malformed: Callable[[str], None]) -> Iterator[tuple[int, Payload]]:
    """A whole file's records as ``(position, payload)``, positions as in event ids: a JSON document's array
    index (from 0), a CSV row's line (the header is line 1), a line format's line (from 1; blank lines skipped).
    A record that does not decode is reported as ``<where>:<position>: <problem>`` (a JSON document: the file) and
    left out. The local engine reads JSON and CSV this way; the Spark engine every format but NDJSON spools."""
    fmt = config.format
    if fmt == "json":
        try:
            yield from enumerate(json_document(data))
        except SourceError as exc:
            malformed(f"{where}: {exc}")
        return
    if fmt == "csv":
        first = 1 if config.columns else 2
        rows = csv_rows(text_lines(data), config.delimiter, config.columns, config.null_values)
        yield from enumerate(rows, start=first)
        return
    decode = decoder_for(fmt, config.regex) or decode_ndjson
    for number, _, payload in decoded_lines(data.split(b"\n"), 1, where, decode, malformed):
        yield number, payload
