"""A source's declared ``schema``: its events' top-level fields and their types, held to each event on both engines.

Spark reads a declared field at its declared type (``variant_get``: docs/spark.md), the local engine reads a value
as it came. For a value of the declared kind the two agree; for another kind they would not: Spark casts the text
``'2.5'`` in a DOUBLE field to 2.5 where the local engine fails the step that compares it with a number, and reads
the number 5 in a STRING field as the text ``'5'``. So an event whose declared field holds a value of another kind
is malformed input on both engines: reported with where it came from, counted and skipped, as a line that is not
JSON is (issue 39: found by the reference interpreter's draw of text under a declared schema). NULL and a missing
field fit every type. The primitive types are checked (integers, numbers, text, booleans); other declared types
(timestamps, dates, arrays, structs, maps) are read as declared on Spark and not checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

INTEGER, NUMBER, TEXT, BOOLEAN = "integer", "number", "text", "boolean"
"""The kinds of value a checked declaration takes: a JSON integer (in BIGINT's range), any JSON number, text, a
boolean."""

_KINDS = {
    **dict.fromkeys(("tinyint", "byte", "smallint", "short", "int", "integer", "bigint", "long"), INTEGER),
    **dict.fromkeys(("float", "real", "double"), NUMBER),
    **dict.fromkeys(("string",), TEXT),
    **dict.fromkeys(("boolean", "bool"), BOOLEAN),
}
_DECIMAL = re.compile(r"(decimal|dec|numeric)(\s*\(.*\))?$")
_TEXT = re.compile(r"(varchar|char)\s*\(.*\)$")
_BIGINT_RANGE = (-(2 ** 63), 2 ** 63)


@dataclass(frozen=True)
class Column:
    """A declared top-level field whose values are checked: its name, its type as declared, its kind of value."""

    name: str
    type: str
    kind: str

    @property
    def misfit_words(self) -> str:
        """How a report of a value that does not fit begins (the value follows, as JSON), on both engines."""
        return f"field {self.name} is declared {self.type.upper()} but holds "


def declared_columns(ddl: str) -> list[tuple[str, str]]:
    """``(name, type)`` of each top-level field of a DDL schema (``"speed DOUBLE, pos STRUCT<lat: DOUBLE>"``), the
    type in lower case; ``ValueError`` for a column that is not ``name TYPE``."""
    depth = 0
    start = 0
    parts: list[str] = []
    for i, ch in enumerate(ddl):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(ddl[start:i])
            start = i + 1
    parts.append(ddl[start:])
    columns = []
    for part in parts:
        part = part.strip()
        if not part:
            continue
        m = re.match(r"(`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*)\s*:?\s+(.+)$", part, re.S)
        if not m:
            raise ValueError(f"cannot read the schema column {part!r}; expected `name TYPE`")
        name = m.group(1)
        if name.startswith("`"):
            name = name[1:-1].replace("``", "`")
        columns.append((name, m.group(2).strip().lower()))
    return columns


def kind_of(declared_type: str) -> str | None:
    """The kind of value a declared type takes, where it is checked (None: a type that is not)."""
    if _DECIMAL.match(declared_type):
        return NUMBER
    if _TEXT.match(declared_type):
        return TEXT
    return _KINDS.get(declared_type)


def checked_columns(ddl: str) -> list[Column]:
    """The declared fields whose values are checked."""
    return [Column(name, t, kind) for name, t in declared_columns(ddl) if (kind := kind_of(t)) is not None]


def held_columns(source: Any) -> list[Column]:
    """The declared fields a source's events are held to: those of its ``schema`` whose values are checked, where
    its events come as JSON (``ndjson``, ``json``, and sources without a format: http, mqtt, nats, generator). A
    format that decodes text (csv, clf, regex, hfp) gives text in its fields, which Spark reads at the declared
    type and the local engine as text: not checked (docs/pipeline-file.md, Sources)."""
    if not source.declared_schema or getattr(source, "format", "ndjson") not in ("ndjson", "json"):
        return []
    return checked_columns(source.declared_schema)


def fits(kind: str, value: Any) -> bool:
    """Whether a JSON value is of ``kind`` (NULL is of every kind)."""
    if value is None:
        return True
    if kind == TEXT:
        return isinstance(value, str)
    if kind == BOOLEAN:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == INTEGER:
        return isinstance(value, int) and _BIGINT_RANGE[0] <= value < _BIGINT_RANGE[1]
    return isinstance(value, int | float)


def misfit(payload: Any, columns: list[Column]) -> str | None:
    """Why the event does not fit its source's declared schema (the first field that does not), or None."""
    if not isinstance(payload, dict):
        return None
    for column in columns:
        value = payload.get(column.name)
        if not fits(column.kind, value):
            return column.misfit_words + _shown(value)
    return None


def _shown(value: Any) -> str:
    from edgewise.jsonio import dumps

    text = dumps(value).decode("utf-8", "replace")
    return text if len(text) <= 60 else text[:57] + "..."
