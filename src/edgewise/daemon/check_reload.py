"""``edgewise serve FILE --check-reload NEW``: what reloading the daemon with NEW would change, shown before it is
done, by running the running file and NEW over the daemon's recent input (``edgewise diff``, docs/diff.md).

The daemon keeps the input its workers finished last (``--keep-recent``, the last N queue entries) in its queue
database; this reads it (also while the daemon runs: SQLite's WAL lets a reader in beside the writer), replays it
through both files on the local engine with a fake clock and every sink collecting, and prints the report.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import ClassVar

from edgewise.config import BuildContext, load
from edgewise.config.models import SourceConfig
from edgewise.daemon.queue import Entry, QueueReader, queue_path
from edgewise.diff import DiffReport, diff_plans
from edgewise.errors import ConfigError
from edgewise.events import Batch
from edgewise.sources.base import Source, SourceContext


class RecentInput(Source):
    """The daemon's recent input as a source: each queue entry's events with their ids."""

    kind: ClassVar[str] = "recent"
    Config = SourceConfig

    def __init__(self, entries: list[Entry]) -> None:
        super().__init__(SourceConfig(id="recent", type="recent"), BuildContext("."))
        self.entries = entries

    def read(self, ctx: SourceContext) -> Iterator[Batch]:
        from edgewise.daemon.worker import entry_batch

        for entry in self.entries:
            yield entry_batch(entry)


def recent_entries(data_dir: str) -> list[Entry]:
    path = queue_path(data_dir)
    if not os.path.exists(path):
        raise ConfigError(f"{data_dir} holds no daemon queue (queue.db): give the daemon's --data-dir")
    reader = QueueReader(path)
    try:
        return reader.recent()
    finally:
        reader.close()


def check_reload(running_file: str, new_file: str, data_dir: str) -> tuple[DiffReport, int]:
    """The diff of the running file and ``new_file`` over the daemon's recent input, and how many events it held."""
    entries = recent_entries(data_dir)
    if not entries:
        raise ConfigError(f"the daemon in {data_dir} has no recent input to replay (it keeps the last --keep-recent "
                          "queue entries it finished; 0 keeps none): send it events first")
    old, new = load(running_file), load(new_file)
    report = diff_plans(old, new, [RecentInput(entries)], [RecentInput(entries)])
    return report, sum(e.count for e in entries)

