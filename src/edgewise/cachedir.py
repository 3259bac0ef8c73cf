"""Where edgewise keeps what it can make again: Spark's class archives, parsed expressions, loaded pipeline files.

Everything under it may be deleted at any time; a run then makes what it needs again. Reading or writing it never
fails a run: a file that cannot be read is a file that is not there, one that cannot be written is not kept.

Paths are text (``os.path``), not ``pathlib``: every run reads these caches, and pathlib's import (with
``urllib.parse`` and ``ipaddress``) was about 5% of the instructions of a one-shot run that found them all.
"""

from __future__ import annotations

import contextlib
import functools
import os

CACHE = "EDGEWISE_CACHE_DIR"


def cache_dir() -> str:
    """``EDGEWISE_CACHE_DIR``, else ``$XDG_CACHE_HOME/edgewise``, else ``~/.cache/edgewise``; ``RuntimeError``
    where there is no home directory."""
    given = os.environ.get(CACHE)
    if given:
        return given
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        home = os.path.expanduser("~")
        if home == "~":  # expanduser gives it back as it is where it finds no home
            raise RuntimeError("no home directory for a cache")
        base = os.path.join(home, ".cache")
    return os.path.join(base, "edgewise")


def cache_path(*parts: str) -> str | None:
    """``cache_dir()`` joined with ``parts``; ``None`` where there is no place for a cache (no home directory)."""
    try:
        return os.path.join(cache_dir(), *parts)
    except (OSError, RuntimeError):  # RuntimeError: no home directory
        return None


def switched_off(variable: str) -> bool:
    """Whether the environment variable says ``off`` (or ``0``, ``false``, ``no``)."""
    return os.environ.get(variable, "").strip().lower() in ("off", "0", "false", "no")


def read_cached(path: str | None) -> bytes | None:
    if path is None:
        return None
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def write_cached(path: str | None, content: bytes) -> bool:
    """Write ``content`` to ``path`` in one rename (a reader sees the old file or the new one, never a part);
    False where it cannot be written."""
    if path is None:
        return False
    import tempfile  # only where a cache is written: a run that finds everything cached does not pay its import

    temporary = None
    try:
        directory, name = os.path.split(path)
        os.makedirs(directory, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
        with os.fdopen(descriptor, "wb") as out:
            out.write(content)
        os.replace(temporary, path)
    except OSError:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        return False
    return True


def keep_newest(directory: str, suffix: str, keep: int) -> None:
    """Delete all but the ``keep`` most recently written files of ``directory`` whose names end in ``suffix``;
    never raises (a file another process deleted first is gone either way)."""
    with contextlib.suppress(OSError):
        entries = [e for e in os.scandir(directory) if e.name.endswith(suffix)]
        if len(entries) <= keep:
            return
        entries.sort(key=lambda e: e.stat().st_mtime_ns)
        for entry in entries[: len(entries) - keep]:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


@functools.cache
def install_key(layout: int, files: tuple[str, ...], packages: tuple[str, ...]) -> str:
    """A key of what made a cached thing: the cache's ``layout``, edgewise's version, and the size and modification
    time of ``files`` and of the ``packages``' first files (found without importing them): an upgrade, a
    reinstall or an edited checkout gives a new key, so nothing another version made is read. Worked out once
    per process (a run asks for it each time it reads or writes a cache)."""
    import hashlib
    from importlib.util import find_spec

    from edgewise import __version__

    found = list(files)
    for package in packages:
        spec = find_spec(package)
        if spec is not None and spec.origin:
            found.append(spec.origin)
    parts = [str(layout), __version__]
    for file in found:
        try:
            status = os.stat(file)
        except OSError:
            parts.append(f"{file}:absent")
        else:
            parts.append(f"{file}:{status.st_size}:{status.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]
