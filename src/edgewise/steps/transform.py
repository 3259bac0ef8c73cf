"""``transform`` applies ordered operations to fields: ``set``, ``rename``, ``drop``, ``drop_keys``, ``keep``,
``regex_replace``.

Map and fold over arrays are expressions (``transform(xs, x -> ...)``, ``aggregate(xs, 0, (a, x) -> ...)``)
used in ``set``. Each operation sees the result of the previous one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar, cast

from edgewise.config.models import Expr, StepConfig
from edgewise.declare import Field, Model, field_validator, model_validator
from edgewise.engine.context import RunContext
from edgewise.errors import ConfigError
from edgewise.events import Batch, Payload
from edgewise.expr import values as V
from edgewise.expr.compiler import compile_expression
from edgewise.steps.annotate import make_assigner, set_path, split_path
from edgewise.steps.base import Step

_MISSING = object()


class RegexReplace(Model):
    field: str = Field(description="the field (path) to rewrite; a missing or NULL field is left alone")
    pattern: str = Field(description="regular expression")
    replacement: str = Field(default="", description="replacement text; $1 or \\1 refer to groups")


class TransformOp(Model):
    """One operation; exactly one of its keys is given."""

    set: dict[str, Expr] | None = Field(default=None, description="field path -> expression")
    rename: dict[str, str] | None = Field(default=None, description="old field path -> new field path")
    drop: list[str] | None = Field(default=None, description="field paths to remove")
    drop_keys: str | None = Field(default=None, description="a regular expression: every key it matches (re.search) is "
                                  "removed, at every depth, inside arrays too")
    keep: list[str] | None = Field(default=None, description="top-level fields to keep; all others are removed")
    regex_replace: RegexReplace | None = None

    @model_validator(mode="after")
    def _one_key(self) -> TransformOp:
        given = [k for k in OPS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"each transform operation is a map with exactly one of {', '.join(OPS)}; "
                             f"found {given or 'none'}")
        return self

    @field_validator("drop")
    @classmethod
    def _paths_not_patterns(cls, paths: list[str]) -> list[str]:
        # a pattern here would name no field and remove nothing, silently
        for path in paths:
            if any(c in path for c in _PATTERN_CHARS):
                raise ValueError(f"{path!r} looks like a pattern, but drop takes field paths (a.b); to remove every "
                                 "key matching a regular expression, at every depth, use drop_keys: '<regex>'")
        return paths

    @field_validator("drop_keys")
    @classmethod
    def _a_regex(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{pattern!r} is not a valid regular expression: {exc}") from None
        return pattern


OPS = ("set", "rename", "drop", "drop_keys", "keep", "regex_replace")
_PATTERN_CHARS = frozenset("*?[]^|(){}\\")  # not "$": JSON keys such as "$schema" are common


class TransformConfig(StepConfig):
    """Ordered field operations."""

    ops: list[TransformOp] = Field(min_length=1, description="operations applied in order")


def get_path(payload: Payload, path: tuple[str, ...]) -> Any:
    v: Any = payload
    for part in path:
        if not isinstance(v, dict) or part not in v:
            return _MISSING
        v = v[part]
    return v


def drop_path(payload: Payload, path: tuple[str, ...]) -> Payload:
    if len(path) == 1:
        if path[0] not in payload:
            return payload
        out = dict(payload)
        del out[path[0]]
        return out
    child = payload.get(path[0])
    if not isinstance(child, dict):
        return payload
    out = dict(payload)
    out[path[0]] = drop_path(child, path[1:])
    return out


Op = Callable[[Payload], Payload]


def _compile_op(op: TransformOp) -> tuple[Op, str]:
    if op.set is not None:
        assignments = [(split_path(k), compile_expression(v)) for k, v in op.set.items()]
        return make_assigner(assignments), "set " + ", ".join(f"{k} = {e.sql}" for k, e in
                                                                ((".".join(p), e) for p, e in assignments))
    if op.rename is not None:
        pairs = [(split_path(a), split_path(b)) for a, b in op.rename.items()]

        def rename(p: Payload) -> Payload:
            out = p
            for src, dst in pairs:
                value = get_path(out, src)
                if value is not _MISSING:
                    out = set_path(drop_path(out, src), dst, value)
            return out

        return rename, "rename " + ", ".join(f"{a} -> {b}" for a, b in op.rename.items())
    if op.drop is not None:
        paths = [split_path(x) for x in op.drop]
        flat = {p[0] for p in paths if len(p) == 1}
        nested = [p for p in paths if len(p) > 1]

        def drop(p: Payload) -> Payload:
            out = {k: v for k, v in p.items() if k not in flat}
            for path in nested:
                out = drop_path(out, path)
            return out

        return drop, "drop " + ", ".join(op.drop)
    if op.drop_keys is not None:
        matches = re.compile(op.drop_keys).search

        def without(value: Any) -> Any:
            if isinstance(value, dict):
                return {k: without(v) for k, v in value.items() if not matches(k)}
            if isinstance(value, list):
                return [without(v) for v in value]
            return value

        def drop_keys(p: Payload) -> Payload:
            return cast(Payload, without(p))

        return drop_keys, f"drop keys matching /{op.drop_keys}/"
    if op.keep is not None:
        names = list(dict.fromkeys(op.keep))

        def keep(p: Payload) -> Payload:
            return {k: p[k] for k in names if k in p}

        keep.batch = _batch_keep(names, keep)  # type: ignore[attr-defined]  # TransformStep runs it per batch
        return keep, "keep " + ", ".join(names)
    rr = op.regex_replace
    assert rr is not None
    try:
        rx = re.compile(rr.pattern)
    except re.error as exc:
        raise ConfigError(f"regex_replace.pattern {rr.pattern!r} is not a valid regular expression: {exc}") from None
    from edgewise.expr.functions.strings import _java_replacement

    repl = _java_replacement(rr.replacement) if "$" in rr.replacement else rr.replacement
    path = split_path(rr.field)

    def regex_replace(p: Payload) -> Payload:
        value = get_path(p, path)
        if value is _MISSING or value is None:
            return p
        return set_path(p, path, rx.sub(repl, V.to_string(value) or ""))

    return regex_replace, f"regex_replace {rr.field}: /{rr.pattern}/ -> {rr.replacement!r}"


class TransformStep(Step):
    kind: ClassVar[str] = "transform"
    Config = TransformConfig

    def __init__(self, config: TransformConfig) -> None:
        super().__init__(config)
        compiled = [_compile_op(op) for op in config.ops]
        self._ops = [fn for fn, _ in compiled]
        self._batch_ops: list[Callable[[list[Payload]], list[Payload]] | None] = [
            getattr(fn, "batch", None) for fn in self._ops]
        self._descriptions = [text for _, text in compiled]

    def process(self, batch: Batch, ctx: RunContext) -> Batch:
        payloads = batch.payloads
        for op, whole in zip(self._ops, self._batch_ops, strict=True):
            payloads = whole(payloads) if whole is not None else [op(p) for p in payloads]
        return batch.replace(payloads)

    def describe(self) -> list[str]:
        return [f"{self.head()}:"] + [f"  {d}" for d in self._descriptions]


def _batch_keep(names: list[str], keep: Callable[[Payload], Payload]) -> Callable[[list[Payload]], list[Payload]]:
    """``keep`` over a whole batch as one comprehension with the names written in (``{'a': p['a'], ...}``, as
    ``dataclasses`` and ``namedtuple`` generate code): a dict display costs about 40% of a loop over the names.
    A batch where some event lacks a kept field goes event by event (the field is then left out)."""
    display = ", ".join(f"{name!r}: p[{name!r}]" for name in names)  # repr: any name is a safe literal
    namespace: dict[str, Any] = {}
    exec(f"def every(payloads):\n    return [{{{display}}} for p in payloads]", namespace)  # noqa: S102
    every = namespace["every"]

    def keep_batch(payloads: list[Payload]) -> list[Payload]:
        try:
            return cast(list[Payload], every(payloads))
        except KeyError:
            return [keep(p) for p in payloads]

    return keep_batch
