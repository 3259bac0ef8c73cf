"""Which files a ``path`` (a file, a directory or a glob) names, and each file's name in event ids.

A file's name is its path relative to the fixed part of ``path`` (the directory, or the glob's directories before
the first wildcard), with ``/`` between directories: ``recordings/*/hfp.dump`` names its files
``2020-05-29/hfp.dump`` and so on, so same-named files in different directories never share ids. A single file is
named by its base name. Shared by the ``file`` and ``replay`` sources (and the Spark engine's file source).
"""

from __future__ import annotations

import glob
import os

from edgewise.errors import InputMissing


class FileSet:
    def __init__(self, pattern: str, *, source_id: str, as_written: str) -> None:
        self.pattern = pattern
        """``path`` resolved against the pipeline file's directory."""
        self.source_id = source_id
        self.as_written = as_written

    def files(self) -> list[str]:
        """The files, in name order (a directory's hidden files left out). None found is an error."""
        if os.path.isdir(self.pattern):
            return sorted(os.path.join(self.pattern, f) for f in os.listdir(self.pattern)
                          if os.path.isfile(os.path.join(self.pattern, f)) and not f.startswith("."))
        if os.path.exists(self.pattern):
            return [self.pattern]
        found = sorted(p for p in glob.glob(self.pattern) if os.path.isfile(p))
        if not found:
            raise InputMissing(f"source {self.source_id}: no file matches {self.as_written!r}")
        return found

    def root(self) -> str:
        """The fixed part of ``path``: the directory names are relative to."""
        if os.path.isdir(self.pattern):
            return self.pattern
        if os.path.exists(self.pattern) or not glob.has_magic(self.pattern):
            return os.path.dirname(self.pattern)
        parts = self.pattern.split(os.sep)
        fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
        return os.sep.join(parts[:fixed]) or os.curdir

    def named(self) -> list[tuple[str, str]]:
        """``(path, name)`` of each file, in name order."""
        root = self.root()
        return [(path, os.path.relpath(path, root).replace(os.sep, "/")) for path in self.files()]
