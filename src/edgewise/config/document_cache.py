"""Pipeline files as loaded before: a run of a file whose exact text was loaded before reads its values and the
line of each from the cache, without importing the YAML parser (a tenth of a one-shot run's start-up, more for a
long file: PyYAML's pure-Python reader takes ~4 ms for a 60-line file).

One small JSON file per text under ``cache_dir()/documents``, named by a key of the text and of the loader
(``cachedir.install_key``). A document is kept only when JSON gives its values back exactly (not a YAML date, a
set, binary or NaN). The directory keeps the ``KEEP`` most recently written files: an edited file's old texts go.

The switch is the load cache's: ``EDGEWISE_LOAD_CACHE=off`` (``expr/tree_cache.py``).
"""

from __future__ import annotations

import hashlib
import os

import orjson

from edgewise.cachedir import cache_path, install_key, keep_newest, read_cached, switched_off, write_cached
from edgewise.config.yamlpos import Document
from edgewise.expr.tree_cache import SWITCH

LAYOUT = 1
"""Part of every file's key: a new layout of what is kept makes new files."""
KEEP = 256


def cached(text: str, file: str) -> Document | None:
    """The document ``text`` loaded to before (with ``file`` as its name now), or None."""
    if switched_off(SWITCH):
        return None
    data = read_cached(_path(text))
    if data is None:
        return None
    try:
        kept = orjson.loads(data)
        if kept["text"] != text:  # the text is kept too: a file renamed over another cannot give the other's
            return None
        positions = {tuple(path): (line, column) for path, line, column in kept["positions"]}
        return Document(file, kept["data"], positions)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):  # a damaged file: load the text again
        return None


def keep(text: str, document: Document) -> None:
    """Keep what ``text`` loaded to, if JSON gives its values back exactly; never raises."""
    if switched_off(SWITCH):
        return
    positions = [[list(path), line, column] for path, (line, column) in document.positions.items()]
    try:
        content = orjson.dumps({"text": text, "data": document.data, "positions": positions})
        if orjson.loads(content)["data"] != document.data:  # a date comes back as text, NaN as null: not kept
            return
    except (TypeError, orjson.JSONEncodeError):  # a set, binary, an integer beyond 64 bits: not kept
        return
    path = _path(text)
    if write_cached(path, content) and path is not None:
        keep_newest(os.path.dirname(path), ".json", KEEP)


def _path(text: str) -> str | None:
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return cache_path("documents", f"{_loader_key()}-{digest}.json")


def _loader_key() -> str:
    """What decides the document a text loads to: the loader (``yamlpos.py``, this module) and PyYAML."""
    here = os.path.dirname(__file__)
    return install_key(LAYOUT, (os.path.join(here, "yamlpos.py"), os.path.join(here, "document_cache.py")), ("yaml",))
