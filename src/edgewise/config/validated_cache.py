"""The configs a pipeline file's values validated to, kept between runs: a run of values validated before does not
import pydantic.

Validating is most of a one-shot run's start-up: importing pydantic, building the core schema of every config model
it meets, and its first validator loading pydantic's plugin machinery, which imports ``importlib.metadata`` and
scans every installed package's metadata (together about two thirds of the instructions of ``edgewise run`` on a
one-line file; BENCHMARKS.md, "Start-up"). The config classes are not pydantic models (``declare.py``: pydantic
validates through a mirror built on first use), so a run that finds its configs here unpickles plain instances.

What is kept is what validation gave: the top-level config and each source's, sink's, store's and step's config,
pickled, in one file per set of values under ``cache_dir()/configs``. Validation reads only the values (never the files
they name or the environment: sources and steps do that when they are built, every run), so the values and the
code decide the result. The file's name holds a digest of the values (in their order: the order of an
``annotate``'s ``set`` matters) and of every source file of edgewise and the files of pydantic, so an upgrade or an
edited checkout never reads what other code validated. Only configs of edgewise's own plugins are kept (a
third-party plugin can change without edgewise's key changing).

A pickle runs code when it is read, so a file is read only where the cache is this user's alone: the file itself
(not a link), owned by the user and writable by nobody else (docs/security.md). Anything that cannot be read or
written is a cache that is not there; ``EDGEWISE_LOAD_CACHE=off`` turns it off with the other load caches.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
from functools import cache
from typing import Any, NamedTuple

import orjson

from edgewise.cachedir import cache_path, install_key, keep_newest, switched_off, write_cached
from edgewise.expr.tree_cache import SWITCH

LAYOUT = 2
"""Part of every file's key: a new layout of what is kept makes new files."""
KEEP = 256
"""The directory keeps this many most recently written files: an edited file's old values go."""


class Validated(NamedTuple):
    """What a pipeline file's values validated to (``config.load_document``'s first passes)."""

    top: Any
    """The ``PipelineFileConfig``."""
    sources: list[Any]
    sinks: list[Any]
    stores: dict[str, Any]
    steps: list[list[tuple[tuple[str | int, ...], str, Any]]]
    """Per pipeline: each step's path in the file, its type and its config."""


def cached(data: Any) -> Validated | None:
    """What ``data`` (a pipeline file's values) validated to before, or None."""
    path = _path(data)
    if path is None:
        return None
    try:
        # O_NOFOLLOW: a link planted in a shared cache directory could point at another file the user owns
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as fh:
            status = os.fstat(fh.fileno())
            if status.st_uid != os.getuid() or status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return None  # not this user's alone: never unpickled
            found = pickle.load(fh)  # noqa: S301 - this user's own file, keyed by this code (module docstring)
    except Exception:  # noqa: BLE001 - a damaged or foreign file is a cache that is not there
        return None
    return found if isinstance(found, Validated) else None


def keep(data: Any, validated: Validated) -> None:
    """Keep what ``data`` validated to, where every config is of edgewise's own plugins; never raises."""
    configs = [validated.top, *validated.sources, *validated.sinks, *validated.stores.values(),
               *(config for entries in validated.steps for _, _, config in entries)]
    if not all(type(config).__module__.startswith("edgewise.") for config in configs):
        return
    path = _path(data)
    if path is None:
        return
    try:
        content = pickle.dumps(validated, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - a value pickle cannot write: not kept
        return
    if write_cached(path, content):
        keep_newest(os.path.dirname(path), ".pickle", KEEP)


def _path(data: Any) -> str | None:
    if switched_off(SWITCH):
        return None
    try:
        values = orjson.dumps(data)
    except (TypeError, orjson.JSONEncodeError):  # values JSON cannot write (a date, a set): not kept
        return None
    digest = hashlib.sha256(values).hexdigest()[:32]
    return cache_path("configs", f"{_code_key()}-{digest}.pickle")


@cache
def _code_key() -> str:
    """What decides the configs values validate to: every source file of edgewise (its path, size and modification
    time), pydantic and pydantic_core."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sources = hashlib.sha256("\n".join(sorted(_source_stamps(package))).encode()).hexdigest()[:20]
    return f"{install_key(LAYOUT, (), ('pydantic', 'pydantic_core'))}-{sources}"


def _source_stamps(directory: str) -> list[str]:
    # os.scandir, not pathlib: ~0.3 ms for edgewise's ~170 files against ~3 ms, on every run
    stamps = []
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name != "__pycache__":
                    stamps += _source_stamps(entry.path)
            elif entry.name.endswith(".py"):
                status = entry.stat()
                stamps.append(f"{entry.path}:{status.st_size}:{status.st_mtime_ns}")
    return stamps
