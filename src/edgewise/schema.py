"""A source's declared ``schema``: its events' top-level fields and their types, held to each event on both engines.

Spark reads a declared field at its declared type (``variant_get``: docs/spark.md), the local engine reads a value
as it came. For a value of the declared kind the two agree; for another kind they would not: Spark casts the text
``'2.5'`` in a DOUBLE field to 2.5 where the local engine fails the step that compares it with a number, and reads
the number 5 in a STRING field as the text ``'5'``. So an event whose declared field holds a value of another kind
is malformed input on both engines: reported with where it came from, counted and skipped, as a line that is not
JSON is (issue 39: found by the reference interpreter's draw of text under a declared schema). NULL and a missing
field fit every type. The primitive types are checked (integers, numbers, text, booleans); other declared types
(timestamps, dates, arrays, structs, maps) are read as declared on Spark and not checked.

A format that decodes text (csv, clf, regex, hfp) gives text in its fields. There a declared field's text is read
at its declared type first, by ``read_as_declared`` on both engines (locally where the batch comes in, on Spark
where the file is decoded): ``'2.5'`` in a DOUBLE field is 2.5, ``'7'`` in a BIGINT field is 7, an empty cell is
NULL, and text that is not of the declared kind (``'abc'`` in a DOUBLE field) makes the record malformed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from edgewise.steps.aggs import NUMBER_TEXT

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


TEXT_FORMATS = ("csv", "clf", "regex", "hfp")
"""The formats that decode text: their fields' text is read at the declared type (``read_as_declared``)."""


def held_columns(source: Any) -> list[Column]:
    """The declared fields a source's events are held to: those of its ``schema`` whose values are checked."""
    return checked_columns(source.declared_schema) if source.declared_schema else []


def reads_text(source: Any) -> bool:
    """Whether the source decodes text (``TEXT_FORMATS``), so that its declared fields are read from text."""
    return getattr(source, "format", "ndjson") in TEXT_FORMATS


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


_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
_TRUE_TEXT = frozenset(("true", "t", "yes", "y", "1"))
_FALSE_TEXT = frozenset(("false", "f", "no", "n", "0"))
_NOT_READ = object()


def _read_text(kind: str, text: str) -> Any:
    """Text read as a value of ``kind`` (as Spark's cast reads it, less its special values: no NaN or Infinity):
    an integer in BIGINT's range, a finite decimal number, a boolean word; blank text is NULL. ``_NOT_READ``
    where the text is not of that kind."""
    stripped = text.strip()
    if not stripped:
        return None
    if kind == INTEGER and _INTEGER_TEXT.fullmatch(stripped):
        number = int(stripped)
        return number if _BIGINT_RANGE[0] <= number < _BIGINT_RANGE[1] else _NOT_READ
    if kind == NUMBER and NUMBER_TEXT.fullmatch(stripped):  # the text min and max read as a number
        real = float(stripped)
        return real if math.isfinite(real) else _NOT_READ
    if kind == BOOLEAN:
        word = stripped.lower()
        return True if word in _TRUE_TEXT else False if word in _FALSE_TEXT else _NOT_READ
    return _NOT_READ


def read_as_declared(payload: Any, columns: list[Column]) -> tuple[Any, str | None]:
    """A decoded text record with each declared field's text read at its declared type: ``(record, None)``, or
    ``(payload, why)`` where a field's value does not fit (text that is not of the declared kind, or a value of
    another kind). The payload itself is left as it is."""
    if not isinstance(payload, dict):
        return payload, None
    record = payload
    for column in columns:
        value = payload.get(column.name)
        if isinstance(value, str) and column.kind != TEXT:
            read = _read_text(column.kind, value)
            if read is _NOT_READ:
                return payload, column.misfit_words + _shown(value)
            if record is payload:
                record = dict(payload)
            record[column.name] = read
        elif not fits(column.kind, value):
            return payload, column.misfit_words + _shown(value)
    return record, None


def _shown(value: Any) -> str:
    from edgewise.jsonio import dumps

    text = dumps(value).decode("utf-8", "replace")
    return text if len(text) <= 60 else text[:57] + "..."
