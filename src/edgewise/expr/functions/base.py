"""The contract of a built-in function: name, arity, implementation, documentation.

Ordinary functions get their evaluated arguments; a NULL argument makes the result NULL without calling the
implementation (Spark's null-intolerant functions), unless ``nulls=True``. Special forms (``coalesce``,
higher-order functions with lambdas) get compiled argument closures instead and build the evaluator themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Evaluator = Callable[[Any], Any]
"""A compiled expression: takes the event payload (or a lambda ``Scope``) and returns a value."""


@dataclass(frozen=True)
class Lambda:
    """A compiled lambda argument (``x -> x * 2``): call it with the scope it runs in and its argument values."""

    params: tuple[str, ...]
    body: Evaluator

    def call(self, scope: Any, *values: Any) -> Any:
        if isinstance(scope, Scope):
            variables = dict(scope.variables)
            payload = scope.payload
        else:
            variables = {}
            payload = scope
        for name, value in zip(self.params, values, strict=False):
            variables[name] = value
        return self.body(Scope(payload, variables))


class Scope:
    """What a lambda body evaluates against: the event payload plus the lambda's variables."""

    __slots__ = ("payload", "variables")

    def __init__(self, payload: Any, variables: dict[str, Any]) -> None:
        self.payload = payload
        self.variables = variables


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    min_args: int
    max_args: int | None
    category: str
    doc: str
    impl: Callable[..., Any] | None = None
    special: Callable[[list[Any]], Evaluator] | None = None
    nulls: bool = False
    lambda_args: tuple[int, ...] = ()
    examples: tuple[str, ...] = field(default_factory=tuple)

    def arity_text(self) -> str:
        if self.max_args is None:
            return f"at least {self.min_args}"
        if self.min_args == self.max_args:
            return str(self.min_args)
        return f"{self.min_args} to {self.max_args}"


class FunctionTable:
    """Collects the functions of one category module; ``functions/__init__.py`` joins the tables."""

    def __init__(self, category: str) -> None:
        self.category = category
        self.specs: list[FunctionSpec] = []

    def fn(self, *names: str, args: int | tuple[int, int | None] = 1, nulls: bool = False,
           doc: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        lo, hi = (args, args) if isinstance(args, int) else args

        def register(impl: Callable[..., Any]) -> Callable[..., Any]:
            for name in names:
                self.specs.append(FunctionSpec(name, lo, hi, self.category, doc or (impl.__doc__ or "").strip(),
                                               impl=impl, nulls=nulls))
            return impl

        return register

    def special(self, *names: str, args: int | tuple[int, int | None] = 1, lambda_args: tuple[int, ...] = (),
                doc: str = "") -> Callable[[Callable[[list[Any]], Evaluator]], Callable[[list[Any]], Evaluator]]:
        lo, hi = (args, args) if isinstance(args, int) else args

        def register(build: Callable[[list[Any]], Evaluator]) -> Callable[[list[Any]], Evaluator]:
            for name in names:
                self.specs.append(FunctionSpec(name, lo, hi, self.category, doc or (build.__doc__ or "").strip(),
                                               special=build, lambda_args=lambda_args))
            return build

        return register
