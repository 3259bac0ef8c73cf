"""What type each event field has on Spark: the contract between the event frame and the expression compiler.

Events travel as VARIANTs (the parsed input, and one per top-level field a step set: ``frame.py``), so a field
keeps exactly the JSON value it came with. An expression, though, needs a typed value (``speed > 3`` cannot compare
a VARIANT), so every field reference is read with ``variant_get`` at one type, decided in this order:

1. the source's declared ``schema`` (a DDL string such as ``"speed DOUBLE, line STRING"``);
2. a field an earlier step set: the type Spark gave its expression;
3. the type the input data has, inferred once with ``schema_of_variant_agg`` over a bounded sample of the input
   available when the job first starts (``job.SAMPLE_ROWS`` records per source) and pinned in the checkpoint
   directory, so a restarted job compiles to the same query (integral numbers read as BIGINT, fractions as
   DOUBLE, text as STRING, arrays as ARRAY of their element type); reads at a sampled type check that the value
   fits it where a misfit would not fail by itself (``sql._checked_read``);
4. otherwise (a field never seen, or seen with several types) the use decides: arithmetic and numeric functions
   read DOUBLE, conditions BOOLEAN, array functions ``ARRAY<VARIANT>``, comparisons the other side's type, and
   everything else keeps the VARIANT (written back unchanged; string functions read it as STRING); operators
   over such a field then follow each event's value kind, as the local engine does (``sql._follow_value_kinds``).
   ``coalesce``, ``if`` and ``CASE`` pass their own wanted type on to their values, such a field's text cast
   beside number literals to their type first, as both engines give the call one type; wanted at none, they are
   VARIANTs, their other values cast to one (``sql._Compiler._coalescing``, ``sql._Compiler._beside_numbers``,
   ``mixed_types.variant_branches``; where such a call mixes text with numbers: ``mixed_types``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

ABSENT = "CAST(NULL AS VARIANT)"
"""A field that is not in the event (a JSON null is a VARIANT null, which is not SQL's NULL)."""


@dataclass
class FieldTypes:
    """What the compiler knows of the event at a point of the pipeline: each field's type, and where each
    top-level field's value is held (the event's layout, ``frame.py``).

    Known field types by path: a Spark SQL type name (``bigint``, ``array<string>``) at each leaf; objects nest as
    dicts."""

    tree: dict[str, Any] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)
    """Top-level fields a step has set or dropped: the SQL (usually a column of their own) of each one's VARIANT,
    NULL where the field is absent. They override the base."""
    kept: list[str] | None = None
    """After a ``keep``: the only fields of the base that are still in the event (None: all of them)."""
    typed: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Held fields whose value a column also holds typed: (column, Spark type), set where the step that set the
    field did (NULL elsewhere). A read at that type takes the column, and the VARIANT at that type only where the
    column is NULL (``sql.field_read``)."""
    base_map: bool = False
    """The base is the event map column (``event``), not the source's parsed VARIANT (``_src``)."""
    columns_made: int = 0
    """How many columns ``new_column`` has named (their names are unique along the pipeline)."""
    sampled: set[tuple[str, ...]] = field(default_factory=set)
    """Paths whose type was inferred from a sample of the input (neither declared nor set by a step): a read at
    that type checks that each value still fits it (``sql.field_read``), since later input may not."""

    def new_column(self) -> str:
        self.columns_made += 1
        return f"_e{self.columns_made}"

    def hold(self, name: str, sql: str, typed: tuple[str, str] | None = None) -> None:
        """Top-level field ``name`` is now the VARIANT ``sql`` (NULL: absent), and ``typed`` where given."""
        self.held[name] = sql
        if typed is None:
            self.typed.pop(name, None)
        else:
            self.typed[name] = typed

    def typed_read(self, name: str, spark_type: str) -> str | None:
        held = self.typed.get(name)
        return held[0] if held is not None and held[1] == spark_type else None

    def holder(self, name: str) -> str | None:
        """SQL of top-level field ``name``'s VARIANT (NULL: absent) where a step left it; None: it is the base's."""
        if name in self.held:
            return self.held[name]
        if self.kept is not None and name not in self.kept:
            return ABSENT
        return None

    def fresh_source(self) -> None:
        """The event was rebuilt and ``_src`` holds it whole again."""
        self._whole_in_base(base_map=False)

    def whole_in_map(self) -> None:
        """The ``event`` map column holds the whole event (it was built from this layout)."""
        self._whole_in_base(base_map=True)

    def _whole_in_base(self, *, base_map: bool) -> None:
        self.held = {}
        self.typed = {}
        self.kept = None
        self.base_map = base_map

    def type_of(self, path: list[str]) -> str | None:
        node: Any = self.tree
        for part in path:
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node if isinstance(node, str) else None

    def set(self, path: list[str], spark_type: str | None) -> None:
        """``path`` now has ``spark_type`` (None: unknown), which the pipeline, not the input, decided."""
        prefix = tuple(path)
        self.sampled = {p for p in self.sampled if p[:len(prefix)] != prefix}
        node = self.tree
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        if spark_type is None:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = spark_type

    def drop(self, path: list[str]) -> None:
        self.set(path, None)

    def keep(self, names: list[str]) -> None:
        self.tree = {k: v for k, v in self.tree.items() if k in names}

    def copy(self) -> FieldTypes:
        import copy

        return FieldTypes(copy.deepcopy(self.tree), dict(self.held), None if self.kept is None else list(self.kept),
                          dict(self.typed), self.base_map, self.columns_made, set(self.sampled))

    def leaves(self) -> list[tuple[str, ...]]:
        """The path of every field with a type."""
        out: list[tuple[str, ...]] = []

        def walk(node: dict[str, Any], prefix: tuple[str, ...]) -> None:
            for name, child in node.items():
                if isinstance(child, dict):
                    walk(child, (*prefix, name))
                else:
                    out.append((*prefix, name))

        walk(self.tree, ())
        return out


# ---------------------------------------------------------------- schema_of_variant text


_TOKEN = re.compile(r"\s*(`(?:[^`]|``)*`|[A-Za-z_][A-Za-z0-9_]*|\d+|[<>:,()])")


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            if text[pos:].strip():
                raise ValueError(f"cannot read the type {text!r} at {pos}")
            break
        out.append(m.group(1))
        pos = m.end()
    return out


def parse_variant_schema(text: str) -> Any:
    """``OBJECT<a: BIGINT, b: ARRAY<STRING>>`` (``schema_of_variant``'s form) → ``{"a": "bigint", "b": ...}``.

    Types that JSON cannot give exactly map to what the local engine reads: DECIMAL with a scale is DOUBLE (a
    JSON fraction is a double there), an integral DECIMAL of up to 18 digits is BIGINT. VARIANT (mixed types) and
    VOID (only nulls) give ``None``: the use decides.
    """
    tokens = _tokens(text)
    pos = 0

    def take() -> str:
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        return tok

    def parse() -> Any:
        name = take().upper()
        if name == "OBJECT":
            take()  # <
            fields: dict[str, Any] = {}
            if tokens[pos] == ">":
                take()
                return fields
            while True:
                key = take()
                if key.startswith("`"):
                    key = key[1:-1].replace("``", "`")
                take()  # :
                fields[key] = parse()
                if take() == ">":
                    return fields
        if name == "ARRAY":
            take()  # <
            inner = parse()
            take()  # >
            if isinstance(inner, dict):  # an array of objects of one shape reads as ARRAY<STRUCT<...>>
                inner = struct_type(inner)
            if isinstance(inner, str):
                return f"array<{inner}>"
            return "array<variant>"
        if name == "DECIMAL":
            take()
            precision = int(take())
            take()
            scale = int(take())
            take()
            if scale == 0:
                return "bigint" if precision <= 18 else f"decimal({precision},0)"
            return "double"
        return {"BIGINT": "bigint", "INT": "bigint", "SMALLINT": "bigint", "TINYINT": "bigint", "DOUBLE": "double",
                "FLOAT": "double", "STRING": "string", "BOOLEAN": "boolean", "DATE": "date",
                "TIMESTAMP": "timestamp", "BINARY": "binary"}.get(name)

    result = parse()
    return result


def struct_type(fields: dict[str, Any]) -> str | None:
    """``{"a": "bigint"}`` → ``struct<`a`: bigint>``; None when a field's type is unknown."""
    parts = []
    for name, value in fields.items():
        t = struct_type(value) if isinstance(value, dict) else value
        if t is None or not fields:
            return None
        parts.append(f"`{name.replace('`', '``')}`: {t}")
    return f"struct<{', '.join(parts)}>" if parts else None


def types_from_variant_schema(text: str | None) -> FieldTypes:
    if not text:
        return FieldTypes()
    tree = parse_variant_schema(text)
    return FieldTypes(tree if isinstance(tree, dict) else {})


def types_from_ddl(ddl: str) -> FieldTypes:
    """A declared schema (``"speed DOUBLE, pos STRUCT<lat: DOUBLE>"``): top-level fields at their DDL types."""
    from edgewise.schema import declared_columns

    types = FieldTypes()
    for name, declared_type in declared_columns(ddl):
        types.set([name], declared_type)
    return types
