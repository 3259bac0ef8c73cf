"""Load YAML (or JSON) and remember where every value came from.

Positions live in a side table keyed by the value's path (a tuple of keys and indexes), never inside the user's
data, so the loaded document is plain dicts and lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from edgewise.errors import ConfigError, Location

if TYPE_CHECKING:
    import yaml

Path = tuple[str | int, ...]


def format_path(path: Path) -> str:
    """``('pipelines', 0, 'steps', 2, 'filter', 'where')`` -> ``pipelines[0].steps[2].filter.where``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


@dataclass
class Document:
    """A loaded file: its data plus the position of every value in it."""

    file: str
    data: Any
    positions: dict[Path, tuple[int, int]] = field(default_factory=dict)

    def locate(self, path: Path) -> Location:
        """The location of ``path``, or of its nearest ancestor that has one (a missing field points at its
        parent)."""
        probe = tuple(path)
        while probe:
            if probe in self.positions:
                line, col = self.positions[probe]
                return Location(self.file, line, col, format_path(path))
            probe = probe[:-1]
        line, col = self.positions.get((), (1, 1))
        return Location(self.file, line, col, format_path(path))

    def error(self, path: Path, message: str) -> ConfigError:
        return ConfigError(message, self.locate(path))

    def sub(self, path: Path) -> Document:
        """The part of this document under ``path``, as a document of its own (same file, same lines)."""
        n = len(path)
        positions = {p[n:]: pos for p, pos in self.positions.items() if p[:n] == path}
        data = self.data
        for part in path:
            data = data[part]
        return Document(self.file, data, positions)


def load_text(text: str, file: str) -> Document:
    """Parse YAML or JSON text. Syntax errors and duplicate keys become a located ``ConfigError``."""
    import yaml  # here, not at the top: a file loaded before comes from the cache (``document_cache.py``)

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise ConfigError("the file is empty; expected a mapping with 'version: 1'", Location(file, 1, 1))
        doc = Document(file, None)
        doc.data = _build(loader, node, (), doc.positions, file)
        return doc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        col = mark.column + 1 if mark else None
        problem = " ".join(x for x in (exc.context, exc.problem) if x)
        opened = exc.context_mark
        if opened is not None and exc.problem_mark is not None and opened.line != exc.problem_mark.line:
            # a bracket left open is found only where parsing stopped: say where it opened as well
            problem += f" (the {exc.context.split()[-1] if exc.context else 'collection'} opened at line " \
                       f"{opened.line + 1}, column {opened.column + 1}, is not closed)"
        raise ConfigError(f"invalid YAML: {problem}", Location(file, line, col)) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", Location(file)) from None
    finally:
        loader.dispose()


def load_file(path: str) -> Document:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise ConfigError(f"file not found: {path}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the file is not UTF-8 text ({exc.reason} at byte {exc.start})", Location(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    from edgewise.config import document_cache

    document = document_cache.cached(text, path)
    if document is None:
        document = load_text(text, path)
        document_cache.keep(text, document)
    return document


def _build(loader: yaml.SafeLoader, node: yaml.Node, path: Path, positions: dict[Path, tuple[int, int]],
           file: str) -> Any:
    import yaml

    positions[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str | int | float | bool) and key is not None:
                raise ConfigError("a mapping key must be a plain value",
                                  Location(file, key_node.start_mark.line + 1, key_node.start_mark.column + 1,
                                           format_path(path)))
            if key in out:
                raise ConfigError(f"duplicate key {key!r} in the same mapping",
                                  Location(file, key_node.start_mark.line + 1, key_node.start_mark.column + 1,
                                           format_path(path)))
            key_str = key if isinstance(key, str) else str(key)
            out[key_str] = _build(loader, value_node, (*path, key_str), positions, file)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(loader, item, (*path, i), positions, file) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)
