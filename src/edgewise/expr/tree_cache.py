"""Parsed expressions kept between runs, so a run whose expressions were parsed before never imports sqlglot.

``parse_node(text)`` gives the ``Node`` tree of an expression text: from this process's memory, else from the
cache file, else parsed (``parsing.py``) and remembered; ``save()`` (called when a pipeline file is loaded) adds
what this process parsed to the file. The file lives under ``cache_dir()/expressions``, one per install: its name
holds a key of the tree's format, edgewise's version and the files of sqlglot and of edgewise that decide what a
text parses to, so an upgrade (or an edited checkout) starts a new file rather than reading trees another parser
made.

The cache only saves time. A file that cannot be read (damaged, another format, a directory that is not there) is
an empty cache; a file that cannot be written (a read-only home) is no cache. ``EDGEWISE_LOAD_CACHE=off`` turns
it off.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from edgewise.cachedir import cache_path, install_key, read_cached, switched_off, write_cached
from edgewise.expr.tree import FORMAT, Node, from_stored, to_stored

SWITCH = "EDGEWISE_LOAD_CACHE"
"""``off`` (or ``0``, ``false``, ``no``): expressions are parsed every run, and nothing is written (the switch of
the pipeline-file cache too: ``config/document_cache.py``)."""
MAX_TREES = 20_000
"""A file that would hold more starts again with this process's trees: the cache of a long-lived install that
has seen many generated texts stays small."""

_parsed: dict[str, Node] = {}
"""Every text this process has a tree for."""
_unsaved: dict[str, Node] = {}
"""Texts parsed by this process and not yet in the file."""
_file: dict[str, Any] | None = None
"""The file's content, read once (``{"trees": {text: stored tree}, "kinds": {kind: class names}}``)."""


def enabled() -> bool:
    return not switched_off(SWITCH)


def parse_node(text: str) -> Node:
    """The tree of ``text``; raises ``ConfigError`` (from the parser) where the text is wrong."""
    node = _parsed.get(text)
    if node is None:
        node = _stored(text) if enabled() else None
        if node is None:
            from edgewise.expr.parsing import parse
            from edgewise.expr.tree import from_sqlglot

            node = from_sqlglot(parse(text))
            _unsaved[text] = node
        _parsed[text] = node
    return node


def _stored(text: str) -> Node | None:
    content = _read()
    stored = content["trees"].get(text)
    if stored is None:
        return None
    try:
        kinds = content.get("kind_sets")
        if kinds is None:  # once per file read
            kinds = content["kind_sets"] = {k: frozenset(v) for k, v in content["kinds"].items()}
        return from_stored(stored, kinds)
    except (KeyError, TypeError, AttributeError):  # a damaged entry: parse the text again
        return None


def _read() -> dict[str, Any]:
    global _file
    if _file is None:
        _file = _load(cache_file())
    return _file


def _load(path: str | None) -> dict[str, Any]:
    empty: dict[str, Any] = {"trees": {}, "kinds": {}}
    data = read_cached(path)
    if data is None:
        return empty
    try:
        content = orjson.loads(data)
    except orjson.JSONDecodeError:
        return empty
    if not (isinstance(content, dict) and isinstance(content.get("trees"), dict)
            and isinstance(content.get("kinds"), dict)):
        return empty
    return content


def save() -> None:
    """Add the trees this process parsed to the file (merged with what other processes added since it was read),
    replacing it in one rename. Never raises: a cache that cannot be written is no cache."""
    if not _unsaved or not enabled():
        return
    path = cache_file()
    if path is None:
        return
    content = _load(path)
    trees: dict[str, Any] = content["trees"] if len(content["trees"]) + len(_unsaved) <= MAX_TREES else {}
    kinds: dict[str, list[str]] = content["kinds"] if trees else {}
    for text, node in _unsaved.items():
        trees[text] = to_stored(node, kinds)
    if write_cached(path, orjson.dumps({"trees": trees, "kinds": kinds})):
        _unsaved.clear()
        global _file
        _file = {"trees": trees, "kinds": kinds}


def cache_file() -> str | None:
    """This install's file of trees; ``None`` where there is no place for a cache (no home directory)."""
    return cache_path("expressions", f"trees-{_install_key()}.json")


def _install_key() -> str:
    """What decides the tree a text parses to: the format, and the files of edgewise's parser and of sqlglot."""
    here = os.path.dirname(__file__)
    return install_key(FORMAT, tuple(os.path.join(here, name) for name in ("parsing.py", "dialect.py", "tree.py")),
                       ("sqlglot",))


def forget() -> None:
    """Drop what this process remembers (tests: the next ``parse_node`` reads the file again)."""
    global _file
    _parsed.clear()
    _unsaved.clear()
    _file = None
