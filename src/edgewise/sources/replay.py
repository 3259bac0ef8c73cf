"""``replay``: a recording of timestamped messages, emitted at its recorded pace times ``speed``.

The recording is read in receive order across all its files (``sources/recording.py``) and paced by
``sources/pacing.py``: ``speed: 10`` is ten times faster than recorded, ``speed: max`` as fast as possible.
``max_gap`` shortens long silences (recordings from different days), ``loop`` starts again at the end (ids of a
later pass name it: ``<source>:<file>@2:<line>``), ``dedupe_lines`` leaves out messages that overlapping recordings
hold twice. Ids are ``<source>:<file>:<line>``, as the ``file`` source gives them, so a replay and a ``file`` read
of the same recording give the same events. A progress bar shows on a terminal (``progress``).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count
from typing import Annotated, ClassVar, Literal

from edgewise.config import BuildContext
from edgewise.declare import Field, model_validator
from edgewise.durations import Duration
from edgewise.events import Batch
from edgewise.progress import ProgressMode, ReplayProgress
from edgewise.sources.base import Source, SourceContext
from edgewise.sources.file import LineFormatOptions, decoder_for
from edgewise.sources.lines import batch_events
from edgewise.sources.pacing import Pacer
from edgewise.sources.paths import FileSet
from edgewise.sources.recording import Recording, RecordingFormat, Run, TimeUnit

MIN_WAIT_S = 0.002
"""Shorter waits are not slept: messages due that close together go out in one batch. The pacer's schedule is
absolute (due times count from the replay's start), so what is not slept now is not lost from the pace."""

Speed = Annotated[float, Field(gt=0, allow_inf_nan=False)] | Literal["max"]


class ReplaySourceConfig(LineFormatOptions):
    type: Literal["replay"] = "replay"
    path: str = Field(description="the recording: a file, a directory or a glob, relative to the pipeline file")
    format: RecordingFormat = Field(default="hfp", description="hfp: '<receive time> <topic> <JSON>' lines (HSL "
                                    "recordings); ndjson, csv, clf or regex with a `time_field`")
    time_field: str | None = Field(default=None, description="the field holding each record's receive time (ISO-8601, "
                                   "a log time or a number of `time_unit` since the epoch); hfp: received_at")
    time_unit: TimeUnit = Field(default="s", description="the unit of numeric receive times")
    speed: Speed = Field(default=1.0, description="times the recorded pace (10 = ten times faster), or max")
    max_gap: Duration | None = Field(default=None, description="shorten silences longer than this to this, e.g. 5s")
    loop: bool = Field(default=False, description="start again at the end (for demos)")
    dedupe_lines: bool = Field(default=False, description="leave out a line identical to one already replayed at the "
                               "same receive time (overlapping recordings)")
    order: Literal["files", "time"] = Field(default="files", description="files: each file in its own order, the "
                                            "files merged by receive time (streams as it reads); time: the whole "
                                            "recording read first and sorted by receive time (for recordings not "
                                            "written in time order, e.g. grouped per vehicle; holds the recording in "
                                            "memory)")
    progress: ProgressMode = Field(default="auto", description="a progress bar on stderr: auto (on a terminal), on, "
                                   "off")

    @model_validator(mode="after")
    def _time_known(self) -> ReplaySourceConfig:
        if self.format != "hfp" and not self.time_field:
            raise ValueError(f"format: {self.format} needs `time_field:`, the field holding each record's receive "
                             "time")
        return self

    def pace(self) -> float | None:
        """The speed as ``Pacer`` takes it (None: as fast as possible)."""
        return None if self.speed == "max" else float(self.speed)


class ReplaySource(Source):
    kind: ClassVar[str] = "replay"
    Config = ReplaySourceConfig
    config: ReplaySourceConfig

    def __init__(self, config: ReplaySourceConfig, ctx: BuildContext) -> None:
        super().__init__(config, ctx)
        self.paths = FileSet(ctx.path(config.path), source_id=self.id, as_written=config.path)
        self.decoder = decoder_for(config.format, config.regex) if config.format != "csv" else None
        self.duplicates = 0
        """Lines ``dedupe_lines`` left out of the last reading."""

    def recording(self, ctx: SourceContext) -> Recording:
        c = self.config
        return Recording(self.paths.named(), fmt=c.format, decoder=self.decoder,
                         time_field=c.time_field or "received_at", time_unit=c.time_unit, delimiter=c.delimiter,
                         columns=c.columns, null_values=c.null_values, dedupe_lines=c.dedupe_lines,
                         in_time_order=c.order == "time",
                         malformed=ctx.malformed)

    def groups(self, ctx: SourceContext, recording: Recording | None = None) -> Iterator[tuple[int, Run]]:
        """The recording, paced: ``(pass, run)`` groups, each sent when its first message is due (messages due
        within ``MIN_WAIT_S`` of it go along, up to a batch: ``ctx.batch_size`` messages, fewer where lines are
        long, as the ``file`` source makes them: ``lines.batch_events``). ``pass`` counts from 1 (``loop``)."""
        recording = recording or self.recording(ctx)
        pacer = Pacer(ctx.clock, self.config.pace(), self.config.max_gap)
        passes = count(1) if self.config.loop else iter((1,))
        paced = self.config.pace() is not None
        size = 0  # messages per batch: set from the first run's lines, by the rule of the file source
        with ReplayProgress(f"replay {self.id}", recording.total_bytes(), self.config.progress) as progress:
            for n in passes:
                if n > 1:
                    pacer.restart()
                    progress.next_pass()
                group = Run.empty()
                for run in recording.runs(ctx.batch_size):
                    size = size or batch_events(ctx.batch_size, [raw.rstrip(b"\r\n") for raw in run.raws])
                    start = 0
                    if paced:  # cut the run where a message is not due yet: what is before it goes now
                        for i, at in enumerate(run.at):
                            wait = pacer.wait_s(recording.us(at))
                            if wait < MIN_WAIT_S:
                                continue
                            group.extend(run.slice(start, i))
                            start = i
                            yield from _decoded(n, recording, _batches(group, size))
                            group = Run.empty()
                            ctx.clock.sleep(wait)
                    if start == 0 and len(group) == 0 and len(run) >= size:
                        group = run  # as it is: no copy
                    else:
                        group.extend(run.slice(start, len(run)) if start else run)
                    if len(group) >= size:
                        *full, group = _batches(group, size)
                        yield from _decoded(n, recording, full)
                    if progress.enabled:
                        progress.update(recording.bytes_read, recording.us(run.at[-1]))
                yield from _decoded(n, recording, [group])
                self.duplicates = recording.duplicates

    def read(self, ctx: SourceContext) -> Iterator[Batch]:
        recording = self.recording(ctx)
        names = [name for _, name in recording.files]
        prefixes: list[str] = []
        prefixes_of = 0
        for n, run in self.groups(ctx, recording):
            if prefixes_of != n:  # ids of a later pass name it: <source>:<file>@<pass>:<line>
                prefixes = [f"{self.id}:{name}{'' if n == 1 else f'@{n}'}:" for name in names]
                prefixes_of = n
            now = ctx.clock.now_us()
            if run.file is not None:  # one file's lines: ids made when asked for
                yield Batch(run.payloads, source=self.id, ingest_time_us=now, event_times=[now] * len(run),
                            id_prefix=prefixes[run.file], offsets=run.lines)
            else:  # lines of several files: each its file's prefix, the ids made when asked for too
                yield Batch(run.payloads, source=self.id, ingest_time_us=now, event_times=[now] * len(run),
                            id_prefixes=list(map(prefixes.__getitem__, run.files)), offsets=run.lines)


def _batches(run: Run, size: int) -> list[Run]:
    """``run`` in pieces of ``size`` messages, the last one possibly shorter (or empty)."""
    return [run.slice(start, start + size) for start in range(0, len(run), size)] + (
        [Run.empty()] if len(run) % size == 0 else [])


def _decoded(n: int, recording: Recording, batches: list[Run]) -> Iterator[tuple[int, Run]]:
    """``(pass, batch)`` for each batch that holds a message once decoded."""
    for batch in batches:
        if len(batch):
            batch = recording.decoded(batch)
            if len(batch):
                yield n, batch
