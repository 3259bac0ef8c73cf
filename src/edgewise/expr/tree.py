"""The parsed form of an expression that the local engine compiles: sqlglot's tree, copied into plain nodes.

sqlglot is the parser (Spark's grammar, a real one), but importing it costs about a third of a one-shot run's
start-up. A ``Node`` keeps what the compiler and the load-time type checks read of sqlglot's tree (the node's
kind, its arguments, its name, its SQL text, the kinds it is an instance of) and nothing of sqlglot, so it can be
stored (``expr/tree_cache.py``) and a later run compiles the same text without importing sqlglot.

A ``Node`` answers the parts of sqlglot's node interface those readers use (``this``, ``expression``,
``expressions``, ``args``, ``name``, ``is_string``, ``parts``, ``sql()``, ``sql_name()``, ``walk()``,
``find_all()``), and ``isa`` replaces ``isinstance`` for both kinds of tree: the Spark engine's SQL writer still
reads sqlglot's own nodes and shares the type checks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from enum import Enum
from typing import Any

FORMAT = 1
"""Part of the stored form's key: a change to what a node keeps makes stored trees unused."""


class Node:
    """One node of a parsed expression; arguments hold nodes, lists of nodes, text, booleans or ``None``."""

    __slots__ = ("args", "function_name", "kind", "kinds", "name", "text")

    def __init__(self, kind: str, args: dict[str, Any], name: str, text: str, function_name: str,
                 kinds: frozenset[str]) -> None:
        self.kind = kind
        self.args = args
        self.name = name
        self.text = text
        self.function_name = function_name
        self.kinds = kinds
        """The names of the sqlglot classes this node's class derives from, its own included."""

    @property
    def this(self) -> Any:
        return self.args.get("this")

    @property
    def expression(self) -> Any:
        return self.args.get("expression")

    @property
    def expressions(self) -> list[Any]:
        return self.args.get("expressions") or []

    @property
    def to(self) -> Any:
        return self.args.get("to")

    @property
    def is_string(self) -> bool:
        return self.kind == "Literal" and bool(self.args.get("is_string"))

    @property
    def parts(self) -> list[Node]:
        """A column's parts in order catalog, db, table, name (as sqlglot's ``Column.parts``)."""
        return [self.args[part] for part in ("catalog", "db", "table", "this") if self.args.get(part)]

    def sql(self, dialect: Any = None) -> str:
        """The node's text in Spark SQL (``dialect`` is accepted for sqlglot's signature: the text was written in
        edgewise's Spark dialect when the node was made)."""
        return self.text

    def sql_name(self) -> str:
        return self.function_name

    def children(self) -> Iterator[Node]:
        for value in self.args.values():
            if isinstance(value, list):
                yield from (v for v in value if isinstance(v, Node))
            elif isinstance(value, Node):
                yield value

    def walk(self) -> Iterator[Node]:
        """This node and every node under it, breadth first (sqlglot's ``walk()`` order)."""
        queue: deque[Node] = deque([self])
        while queue:
            node = queue.popleft()
            yield node
            queue.extend(node.children())

    def find_all(self, *kinds: str) -> Iterator[Node]:
        return (node for node in self.walk() if not node.kinds.isdisjoint(kinds))

    def __repr__(self) -> str:
        return f"Node({self.kind}: {self.text})"


def isa(node: Any, *kinds: str) -> bool:
    """Whether ``node`` (a ``Node`` or a sqlglot node) is an instance of one of the sqlglot classes named."""
    if node is None:
        return False
    names = node.kinds if isinstance(node, Node) else _class_names(type(node))
    return not names.isdisjoint(kinds)


_CLASS_NAMES: dict[type, frozenset[str]] = {}


def _class_names(cls: type) -> frozenset[str]:
    names = _CLASS_NAMES.get(cls)
    if names is None:
        names = _CLASS_NAMES[cls] = frozenset(c.__name__ for c in cls.__mro__)
    return names


def enum_name(value: Any) -> str:
    """A data type's name (``BIGINT``): sqlglot keeps it as an enum member, a ``Node`` as its name."""
    return value if isinstance(value, str) else str(value.name)


def from_sqlglot(tree: Any) -> Node:
    """The ``Node`` copy of a sqlglot tree (the only function here that reads sqlglot's nodes)."""
    from sqlglot import exp

    from edgewise.expr.dialect import EdgewiseSpark

    def copy(value: Any) -> Any:
        if isinstance(value, exp.Expression):
            return node(value)
        if isinstance(value, list):
            return [copy(v) for v in value]
        if isinstance(value, Enum):
            return value.name
        return value

    def node(expression: Any) -> Node:
        cls = type(expression)
        function_name = cls.sql_name() if isinstance(expression, exp.Func) and cls is not exp.Func else ""
        return Node(cls.__name__, {k: copy(v) for k, v in expression.args.items() if v is not None},
                    expression.name, expression.sql(dialect=EdgewiseSpark), function_name, _class_names(cls))

    return node(tree)


# ---------------------------------------------------------------- stored form (plain JSON values)


def to_stored(node: Node, kinds: dict[str, list[str]]) -> dict[str, Any]:
    """A JSON-ready form of ``node``; the class names of each kind go once into ``kinds``."""
    kinds.setdefault(node.kind, sorted(node.kinds))
    stored: dict[str, Any] = {"k": node.kind, "a": {k: _stored_value(v, kinds) for k, v in node.args.items()},
                              "t": node.text}
    if node.name:
        stored["n"] = node.name
    if node.function_name:
        stored["f"] = node.function_name
    return stored


def _stored_value(value: Any, kinds: dict[str, list[str]]) -> Any:
    if isinstance(value, Node):
        return to_stored(value, kinds)
    if isinstance(value, list):
        return [_stored_value(v, kinds) for v in value]
    return value


def from_stored(stored: dict[str, Any], kinds: dict[str, frozenset[str]]) -> Node:
    """The ``Node`` ``to_stored`` wrote; ``kinds`` maps each kind to its class names."""
    kind = stored["k"]
    return Node(kind, {k: _node_value(v, kinds) for k, v in stored["a"].items()}, stored.get("n", ""),
                stored["t"], stored.get("f", ""), kinds[kind])


def _node_value(value: Any, kinds: dict[str, frozenset[str]]) -> Any:
    if isinstance(value, dict):
        return from_stored(value, kinds)
    if isinstance(value, list):
        return [_node_value(v, kinds) for v in value]
    return value
