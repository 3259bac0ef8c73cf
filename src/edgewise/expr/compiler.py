"""Compile Spark SQL expression text into a Python closure, once, at load time.

``compile_expression("a.b > 3 AND c RLIKE '^x'")`` parses with sqlglot (never ``eval``; ``parsing.py``, or the tree
an earlier run parsed: ``tree_cache.py``), resolves every function
in the edgewise function table, checks arity, and returns an ``Expression`` whose ``evaluate(payload)`` gives the
value with Spark 4 ANSI semantics. Problems with the text raise ``ConfigError``; problems with an event's data
raise ``EvalError`` at evaluation time.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

from edgewise.errors import ConfigError, EvalError
from edgewise.expr import values as V
from edgewise.expr.functions import FUNCTIONS
from edgewise.expr.functions.base import Evaluator, Lambda, Scope
from edgewise.expr.functions.casts import cast_function
from edgewise.expr.functions.conditional import as_common_type, if_, number_beside, of_one_type
from edgewise.expr.intervals import add_interval, interval_operand
from edgewise.expr.tree import Node, enum_name, isa
from edgewise.expr.tree_cache import parse_node

NOT_ALLOWED = {
    "current_timestamp": "it reads the wall clock; use the event time or a field of the event",
    "current_date": "it reads the wall clock; use the event time or a field of the event",
    "now": "it reads the wall clock; use the event time or a field of the event",
    "rand": "it is not deterministic, so the local engine and Spark could not agree",
    "random": "it is not deterministic, so the local engine and Spark could not agree",
    "uuid": "it is not deterministic; every event already has a stable `id`",
}


@dataclass(frozen=True)
class Expression:
    """A compiled expression: the text the user wrote, its canonical Spark SQL, and the evaluator."""

    text: str
    sql: str
    evaluate: Evaluator
    fields: frozenset[str]

    def __call__(self, payload: Any) -> Any:
        return self.evaluate(payload)


class _Context:
    def __init__(self, lambda_vars: frozenset[str] = frozenset()) -> None:
        self.lambda_vars = lambda_vars
        self.fields: set[str] = set()

    def nested(self, params: tuple[str, ...]) -> _Context:
        ctx = _Context(self.lambda_vars | frozenset(params))
        ctx.fields = self.fields
        return ctx


def compile_expression(text: str) -> Expression:
    """Compile expression text (cached: the same text compiles once)."""
    return _compile_cached(text)


@lru_cache(maxsize=4096)
def _compile_cached(text: str) -> Expression:
    tree = parse_node(text)
    ctx = _Context()
    fn = _compile(tree, ctx)
    return Expression(text=text, sql=tree.sql(), evaluate=fn, fields=frozenset(ctx.fields))


def truth(value: Any) -> bool:
    """Whether a condition's value keeps an event: only TRUE does (NULL and FALSE do not)."""
    return value is True


# ---------------------------------------------------------------- nodes


def _compile(node: Node, ctx: _Context) -> Evaluator:
    handler = _HANDLERS.get(node.kind)
    if handler is None:
        raise ConfigError(f"{node.sql()!r} is not supported in edgewise expressions "
                          f"({node.kind}); see docs/expressions.md for what is")
    return handler(node, ctx)


def _const(value: Any) -> Evaluator:
    def constant(p: Any) -> Any:
        return value

    constant.constant = value  # type: ignore[attr-defined]  # lets callers specialise on literals
    return constant


def _is_const(fn: Evaluator) -> bool:
    return hasattr(fn, "constant")


def _literal(node: Node, ctx: _Context) -> Evaluator:
    if node.is_string:
        return _const(node.this)
    text = node.this
    if re.fullmatch(r"\d+", text):
        n = int(text)
        return _const(n if n <= V.LONG_MAX else Decimal(n))
    if re.fullmatch(r"\d+[lL]", text):
        return _const(int(text[:-1]))
    if re.fullmatch(r"(\d+\.?\d*|\.\d+)[eE][+-]?\d+|[\d.]+[dD]", text):
        return _const(float(text.rstrip("dD")))
    if re.fullmatch(r"\d+\.?\d*|\.\d+", text):
        return _const(Decimal(text))
    raise ConfigError(f"unsupported number literal {text!r}")


def _path_getter(root: Evaluator | None, parts: list[str], ctx: _Context) -> Evaluator:
    """Field access: ``a.b.c`` reads nested objects; a missing field (or a non-object on the way) is NULL."""
    if root is None:
        head = parts[0]
        if head in ctx.lambda_vars:
            def var(p: Any, head: str = head) -> Any:
                return p.variables.get(head)

            return _path_getter(var, parts[1:], ctx) if len(parts) > 1 else var
        ctx.fields.add(head)
        in_lambda = bool(ctx.lambda_vars)
        if len(parts) == 1:
            if in_lambda:
                return lambda p: p.payload.get(head)

            def top_field(p: Any) -> Any:
                return p.get(head)

            top_field.field_name = head  # type: ignore[attr-defined]  # lets comparisons inline the lookup
            return top_field
        rest = parts[1:]

        def nested(p: Any) -> Any:
            v = (p.payload if in_lambda else p).get(head)
            for part in rest:
                if v.__class__ is not dict:
                    return None
                v = v.get(part)
            return v

        return nested
    if not parts:
        return root

    def field(p: Any) -> Any:
        v = root(p)
        for part in parts:
            if v.__class__ is not dict:
                return None
            v = v.get(part)
        return v

    return field


def _column(node: Node, ctx: _Context) -> Evaluator:
    parts = [p.name for p in node.parts]
    return _path_getter(None, parts, ctx)


def _identifier(node: Node, ctx: _Context) -> Evaluator:
    return _path_getter(None, [node.name], ctx)


def _dot(node: Node, ctx: _Context) -> Evaluator:
    root = _compile(node.this, ctx)
    name = node.expression.name
    return _path_getter(root, [name], ctx)


def _bracket(node: Node, ctx: _Context) -> Evaluator:
    target = _compile(node.this, ctx)
    if len(node.expressions) != 1:
        raise ConfigError(f"{node.sql()!r}: [] takes exactly one index or key")
    index = _compile(node.expressions[0], ctx)

    def subscript(p: Any) -> Any:
        container = target(p)
        key = index(p)
        if container is None or key is None:
            return None
        if isinstance(container, list):
            if not V.is_number(key) and not isinstance(key, str):
                raise V.mismatch("array index", key)
            i = V.to_long(key, "INT")
            assert i is not None
            if 0 <= i < len(container):
                return container[i]
            raise EvalError("INVALID_ARRAY_INDEX",
                            f"the index {i} is out of bounds: the array has {len(container)} elements; "
                            "use try_element_at or get() to get NULL instead")
        if isinstance(container, dict):
            return container.get(V.to_string(key))
        raise V.mismatch("[]", container)

    return subscript


# ---------------------------------------------------------------- logic


def _and(node: Node, ctx: _Context) -> Evaluator:
    left, right = _compile(node.this, ctx), _compile(node.expression, ctx)

    def and_(p: Any) -> Any:
        a = left(p)
        if a is False:
            return False
        b = right(p)
        if b is False:
            return False
        if (a is None or b is None) and (a is None or a is True) and (b is None or b is True):
            return None
        if not isinstance(a, bool | None) or not isinstance(b, bool | None):
            raise V.mismatch("AND", a, b)
        return True if a is True and b is True else None

    return and_


def _or(node: Node, ctx: _Context) -> Evaluator:
    left, right = _compile(node.this, ctx), _compile(node.expression, ctx)

    def or_(p: Any) -> Any:
        a = left(p)
        if a is True:
            return True
        b = right(p)
        if b is True:
            return True
        if not isinstance(a, bool | None) or not isinstance(b, bool | None):
            raise V.mismatch("OR", a, b)
        return None if a is None or b is None else False

    return or_


def _not(node: Node, ctx: _Context) -> Evaluator:
    inner = _compile(node.this, ctx)

    def not_(p: Any) -> Any:
        v = inner(p)
        if v is None:
            return None
        if not isinstance(v, bool):
            raise V.mismatch("NOT", v)
        return not v

    return not_


def _comparison(test: Callable[[int], bool], name: str) -> Callable[[Node, _Context], Evaluator]:
    def build(node: Node, ctx: _Context) -> Evaluator:
        left, right = _compile(node.this, ctx), _compile(node.expression, ctx)
        if _is_const(right) and isinstance(right.constant, str) and name in ("=", "<>"):  # type: ignore[attr-defined]
            # the hot case `field = 'text'`: no implicit cast needed when the field is a string too
            const = right.constant  # type: ignore[attr-defined]
            negate = name == "<>"
            field_name = getattr(left, "field_name", None)
            if field_name is not None:

                def field_eq_text(p: Any) -> Any:
                    v = p.get(field_name)
                    if v.__class__ is str:
                        return (v == const) != negate
                    c = V.compare(v, const)
                    return None if c is None else test(c)

                def mask(payloads: list[Any]) -> list[bool]:
                    values = [p.get(field_name) for p in payloads]
                    if set(map(type, values)) == {str}:  # one C-level pass instead of a call per event
                        return [(v == const) != negate for v in values]
                    return [field_eq_text(p) is True for p in payloads]

                field_eq_text.mask = mask  # type: ignore[attr-defined]  # filters use it on whole batches
                # a fused head (engine/fused.py) writes the test for text values into its loop
                field_eq_text.text_equality = (field_name, const, negate)  # type: ignore[attr-defined]
                return field_eq_text

            def eq_text(p: Any) -> Any:
                v = left(p)
                if v.__class__ is str:
                    return (v == const) != negate
                c = V.compare(v, const)
                return None if c is None else test(c)

            return eq_text

        def compare(p: Any) -> Any:
            c = V.compare(left(p), right(p))
            return None if c is None else test(c)

        return compare

    return build


def _null_safe_eq(node: Node, ctx: _Context) -> Evaluator:
    left, right = _compile(node.this, ctx), _compile(node.expression, ctx)

    def nseq(p: Any) -> bool:
        a, b = left(p), right(p)
        if a is None or b is None:
            return a is None and b is None
        return V.compare(a, b) == 0

    return nseq


def _is(node: Node, ctx: _Context) -> Evaluator:
    inner = _compile(node.this, ctx)
    target = node.expression
    if isa(target, "Null"):
        return lambda p: inner(p) is None
    if isa(target, "Boolean"):
        want = target.this
        return lambda p: inner(p) is want
    raise ConfigError(f"{node.sql()!r}: IS takes NULL, TRUE or FALSE")


def _null_constant(fn: Evaluator) -> bool:
    return _is_const(fn) and fn.constant is None  # type: ignore[attr-defined]


def _binary(op: Callable[[Any, Any], Any]) -> Callable[[Node, _Context], Evaluator]:
    def build(node: Node, ctx: _Context) -> Evaluator:
        left, right = _compile(node.this, ctx), _compile(node.expression, ctx)
        if _null_constant(left) or _null_constant(right):
            # Spark's optimiser makes arithmetic with a NULL constant NULL before it runs (NullPropagation), so
            # the other operand is never evaluated: `'x' + -NULL` is NULL there, not a failed cast of 'x'
            return _const(None)
        return lambda p: op(left(p), right(p))

    return build


def _division(node: Node, ctx: _Context) -> Evaluator:
    divide = _binary(V.div)(node, ctx)
    if not _is_const(divide):
        divide.fraction = True  # type: ignore[attr-defined]  # a DOUBLE by its text alone (``fraction_beside``)
    return divide


def _plus_minus(op: Callable[[Any, Any], Any], sign: int) -> Callable[[Node, _Context], Evaluator]:
    """``+`` (sign 1) or ``-`` (sign -1): ``op``, or with an INTERVAL operand the interval arithmetic
    (``intervals.py``)."""
    plain = _binary(op)

    def build(node: Node, ctx: _Context) -> Evaluator:
        left, right = interval_operand(node.this), interval_operand(node.expression)
        if left is None and right is None:
            return plain(node, ctx)
        written = node.sql()
        if left is not None and right is not None:
            raise ConfigError(f"{written!r}: an INTERVAL is only for arithmetic with a timestamp or a date "
                              "(ts + INTERVAL 2 DAYS), not a value of its own")
        if left is not None and sign < 0:
            raise ConfigError(f"{written!r}: an INTERVAL minus a timestamp is not defined; write ts - INTERVAL ...")
        operand = node.expression if left is not None else node.this
        interval = left if left is not None else right
        assert interval is not None
        if isa(operand, "Literal") and not operand.is_string:
            raise ConfigError(f"{written!r}: an INTERVAL is added to a timestamp, a date or text, not a number")
        value = _compile(operand, ctx)
        shift = interval if sign > 0 else -interval
        return lambda p: add_interval(value(p), shift)

    return build


def _interval(node: Node, ctx: _Context) -> Evaluator:
    raise ConfigError(f"{node.sql()!r}: an INTERVAL is only for arithmetic with a timestamp or "
                      "a date (ts + INTERVAL 2 DAYS, ts - INTERVAL '30' MINUTE), not a value of its own")


def _neg(node: Node, ctx: _Context) -> Evaluator:
    inner = _compile(node.this, ctx)
    if _null_constant(inner):
        return inner
    if _is_const(inner) and V.is_number(inner.constant):  # type: ignore[attr-defined]
        value = -inner.constant  # type: ignore[attr-defined]
        if isinstance(value, Decimal) and value == V.LONG_MIN:
            value = V.LONG_MIN  # -9223372036854775808 is a BIGINT literal, as in Spark
        return _const(value)
    return lambda p: V.neg(inner(p))


def _paren(node: Node, ctx: _Context) -> Evaluator:
    return _compile(node.this, ctx)


def _dpipe(node: Node, ctx: _Context) -> Evaluator:
    return _call_function("concat", [node.this, node.expression], ctx, node)


def _in(node: Node, ctx: _Context) -> Evaluator:
    if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
        raise ConfigError(f"{node.sql()!r}: IN takes a list of values")
    value = _compile(node.this, ctx)
    options = [_compile(e, ctx) for e in node.expressions]
    if options and all(_is_const(o) for o in options):
        consts = [o.constant for o in options]  # type: ignore[attr-defined]
        has_null = any(c is None for c in consts)
        if all(isinstance(c, str) for c in consts):
            text_set = frozenset(consts)

            def in_text(p: Any) -> Any:
                v = value(p)
                if v.__class__ is str:
                    return True if v in text_set else (None if has_null else False)
                return _in_generic(v, consts)

            return in_text
        return lambda p: _in_generic(value(p), consts)
    return lambda p: _in_generic(value(p), [o(p) for o in options])


def _in_generic(v: Any, options: list[Any]) -> Any:
    if v is None:
        return None
    saw_null = False
    for o in options:
        if o is None:
            saw_null = True
        elif V.compare(v, o) == 0:
            return True
    return None if saw_null else False


def _between(node: Node, ctx: _Context) -> Evaluator:
    value = _compile(node.this, ctx)
    low, high = _compile(node.args["low"], ctx), _compile(node.args["high"], ctx)

    def between(p: Any) -> Any:
        v = value(p)
        lo = V.compare(v, low(p))
        hi = V.compare(v, high(p))
        a = None if lo is None else lo >= 0
        b = None if hi is None else hi <= 0
        if a is False or b is False:
            return False
        return None if a is None or b is None else True

    return between


def like_to_regex(pattern: str, escape: str = "\\") -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == escape and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt not in ("%", "_", escape):
                raise EvalError("INVALID_FORMAT", f"the escape character is not allowed to precede {nxt!r} "
                                f"in the LIKE pattern {pattern!r}")
            out.append(re.escape(nxt))
            i += 2
            continue
        if c == escape:
            raise EvalError("INVALID_FORMAT", f"the LIKE pattern {pattern!r} ends with the escape character")
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)


_like_cache = lru_cache(maxsize=512)(like_to_regex)


def _like_node(node: Node, ctx: _Context, escape: str = "\\", ignore_case: bool = False) -> Evaluator:
    value, pattern = _compile(node.this, ctx), _compile(node.expression, ctx)

    def like(p: Any) -> Any:
        v, pat = value(p), pattern(p)
        if v is None or pat is None:
            return None
        s, ps = V.to_string(v), V.to_string(pat)
        assert s is not None and ps is not None
        if ignore_case:
            s, ps = s.lower(), ps.lower()
        return _like_cache(ps, escape).fullmatch(s) is not None

    return like


def _like(node: Node, ctx: _Context) -> Evaluator:
    return _like_node(node, ctx)


def _ilike(node: Node, ctx: _Context) -> Evaluator:
    return _like_node(node, ctx, ignore_case=True)


def _escape(node: Node, ctx: _Context) -> Evaluator:
    inner = node.this
    esc = node.expression
    if not isa(esc, "Literal") or not esc.is_string or len(esc.this) != 1:
        raise ConfigError("ESCAPE takes a single-character string")
    if not isa(inner, "Like", "ILike"):
        raise ConfigError("ESCAPE goes with LIKE")
    return _like_node(inner, ctx, escape=esc.this, ignore_case=isa(inner, "ILike"))


def _rlike(node: Node, ctx: _Context) -> Evaluator:
    return _call_function("rlike", [node.this, node.expression], ctx, node)


def _case(node: Node, ctx: _Context) -> Evaluator:
    subject = _compile(node.this, ctx) if node.this else None
    branches = [(_compile(i.this, ctx), _compile(i.args["true"], ctx)) for i in node.args.get("ifs") or []]
    default = _compile(node.args["default"], ctx) if node.args.get("default") else _const(None)

    def case(p: Any) -> Any:
        if subject is None:
            for cond, then in branches:
                if cond(p) is True:
                    return then(p)
        else:
            s = subject(p)
            for cond, then in branches:
                if V.equals(s, cond(p)) is True:
                    return then(p)
        return default(p)

    values = [then for _, then in branches] + [default]
    number = number_beside(values)
    if number is None:
        return of_one_type(case, values)
    # Spark gives the CASE one type: text a branch gives beside number literals is cast to it, as in coalesce
    return of_one_type(lambda p: as_common_type(case(p), number, "CASE"), values)


def _if(node: Node, ctx: _Context) -> Evaluator:
    cond = _compile(node.this, ctx)
    then = _compile(node.args["true"], ctx)
    other = _compile(node.args["false"], ctx) if node.args.get("false") else _const(None)
    return if_([cond, then, other])


def _cast(node: Node, ctx: _Context) -> Evaluator:
    inner = _compile(node.this, ctx)
    to = node.to
    safe = bool(node.args.get("safe"))
    convert = cast_function(enum_name(to.this).upper(), [e.sql() for e in to.expressions], to.sql())

    if safe:
        def try_cast(p: Any) -> Any:
            v = inner(p)
            try:
                return convert(v)
            except EvalError:
                return None

        return try_cast
    if _is_const(inner):
        try:  # a literal cast folds at compile time, unless it fails: then it fails each event, as in Spark
            return _const(convert(inner.constant))  # type: ignore[attr-defined]
        except EvalError:
            pass
    return lambda p: convert(inner(p))


def _lambda_node(node: Node, ctx: _Context) -> Lambda:
    params = tuple(e.name for e in node.expressions)
    body = _compile(node.this, ctx.nested(params))
    return Lambda(params, body)


def _anonymous(node: Node, ctx: _Context) -> Evaluator:
    return _call_function(str(node.this).lower(), list(node.expressions), ctx, node)


def _array(node: Node, ctx: _Context) -> Evaluator:
    return _call_function("array", list(node.expressions), ctx, node)


def _transform(node: Node, ctx: _Context) -> Evaluator:
    return _call_function("transform", [node.this, node.expression], ctx, node)


def _substring(node: Node, ctx: _Context) -> Evaluator:
    args = [node.this, node.args.get("start"), node.args.get("length")]
    return _call_function("substring", [a for a in args if a is not None], ctx, node)


def _trim(node: Node, ctx: _Context) -> Evaluator:
    position = (node.args.get("position") or "BOTH").upper()
    name = {"BOTH": "trim", "LEADING": "ltrim", "TRAILING": "rtrim"}[position]
    chars = node.expression
    return _call_function(name, [node.this] + ([chars] if chars is not None else []), ctx, node)


def _str_position(node: Node, ctx: _Context) -> Evaluator:
    args = [node.args["substr"], node.this]
    if node.args.get("position") is not None:
        args.append(node.args["position"])
    return _call_function("locate", args, ctx, node)


def _extract(node: Node, ctx: _Context) -> Evaluator:
    unit = node.this.name.lower()
    names = {"year": "year", "month": "month", "day": "day", "hour": "hour", "minute": "minute",
             "second": "second", "dayofweek": "dayofweek", "dow": "dayofweek", "doy": "dayofyear",
             "quarter": "quarter", "week": "weekofyear"}
    if unit not in names:
        raise ConfigError(f"EXTRACT does not support {unit.upper()}")
    return _call_function(names[unit], [node.expression], ctx, node)


def _call_function(name: str, args: list[Node], ctx: _Context, node: Node) -> Evaluator:
    if name in NOT_ALLOWED:
        raise ConfigError(f"the function {name}() is not allowed in edgewise expressions: {NOT_ALLOWED[name]}")
    spec = FUNCTIONS.get(name)
    if spec is None:
        close = _suggest(name)
        hint = f"; did you mean {close}()?" if close else "; see docs/expressions.md for the function list"
        raise ConfigError(f"unknown function {name}(){hint}")
    n = len(args)
    if n < spec.min_args or (spec.max_args is not None and n > spec.max_args):
        raise ConfigError(f"{name}() takes {spec.arity_text()} argument{'s' if spec.max_args != 1 else ''}, "
                          f"found {n} in {node.sql()!r}")
    compiled: list[Any] = []
    for i, arg in enumerate(args):
        if isa(arg, "Lambda"):
            if i not in spec.lambda_args:
                raise ConfigError(f"{name}() does not take a lambda as argument {i + 1}")
            compiled.append(_lambda_node(arg, ctx))
        elif i in spec.lambda_args:
            raise ConfigError(f"{name}() needs a lambda such as `x -> x + 1` as argument {i + 1}")
        else:
            compiled.append(_compile(arg, ctx))
    if spec.special is not None:
        return spec.special(compiled)
    impl = spec.impl
    assert impl is not None
    # each call fails its event with DATATYPE_MISMATCH where the function's code meets a type it cannot take,
    # instead of stopping the run with Python's TypeError (a field's type is known only when an event comes; found
    # by the fuzzer: make_timestamp of an array). The try is inside each closure, not a wrapper: no extra call
    if spec.nulls:
        def call_with_nulls(p: Any) -> Any:
            vals = [a(p) for a in compiled]
            try:
                return impl(*vals)
            except (TypeError, AttributeError):
                raise _cannot_take(name, vals) from None

        return call_with_nulls
    if n == 0:
        return lambda p: impl()
    if n == 1:
        a0 = compiled[0]

        def call1(p: Any) -> Any:
            v = a0(p)
            if v is None:
                return None
            try:
                return impl(v)
            except (TypeError, AttributeError):
                raise _cannot_take(name, [v]) from None

        return call1
    if n == 2:
        a0, a1 = compiled

        def call2(p: Any) -> Any:
            v0 = a0(p)
            if v0 is None:
                return None
            v1 = a1(p)
            if v1 is None:
                return None
            try:
                return impl(v0, v1)
            except (TypeError, AttributeError):
                raise _cannot_take(name, [v0, v1]) from None

        return call2

    def calln(p: Any) -> Any:
        vals = [a(p) for a in compiled]
        for v in vals:
            if v is None:
                return None
        try:
            return impl(*vals)
        except (TypeError, AttributeError):
            raise _cannot_take(name, vals) from None

    return calln


def _cannot_take(name: str, args: list[Any]) -> EvalError:
    """The error of a function given values of types it cannot take (as Spark's analyser refuses such a call)."""
    types = ", ".join("lambda" if isinstance(a, Lambda) else V.type_name(a) for a in args)
    return EvalError("DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE", f"{name}() cannot take ({types})")


def _suggest(name: str) -> str | None:
    import difflib

    close = difflib.get_close_matches(name, list(FUNCTIONS), n=1, cutoff=0.75)
    return close[0] if close else None


_HANDLERS: dict[str, Callable[[Any, _Context], Evaluator]] = {
    "Literal": _literal,
    "Boolean": lambda n, c: _const(bool(n.this)),
    "Null": lambda n, c: _const(None),
    "Column": _column,
    "Identifier": _identifier,
    "Dot": _dot,
    "Bracket": _bracket,
    "Paren": _paren,
    "And": _and,
    "Or": _or,
    "Not": _not,
    "EQ": _comparison(lambda c: c == 0, "="),
    "NEQ": _comparison(lambda c: c != 0, "<>"),
    "GT": _comparison(lambda c: c > 0, ">"),
    "GTE": _comparison(lambda c: c >= 0, ">="),
    "LT": _comparison(lambda c: c < 0, "<"),
    "LTE": _comparison(lambda c: c <= 0, "<="),
    "NullSafeEQ": _null_safe_eq,
    "Is": _is,
    "Add": _plus_minus(V.add, 1),
    "Sub": _plus_minus(V.sub, -1),
    "Interval": _interval,
    "Mul": _binary(V.mul),
    "Div": _division,
    "IntDiv": _binary(V.int_div),
    "Mod": _binary(V.mod),
    "Neg": _neg,
    "DPipe": _dpipe,
    "In": _in,
    "Between": _between,
    "Like": _like,
    "ILike": _ilike,
    "Escape": _escape,
    "RegexpLike": _rlike,
    "Case": _case,
    "If": _if,
    "Cast": _cast,
    "TryCast": _cast,
    "Anonymous": _anonymous,
    "Transform": _transform,
    "Array": _array,
    "Substring": _substring,
    "Trim": _trim,
    "StrPosition": _str_position,
    "Extract": _extract,
}

__all__ = ["Expression", "Scope", "compile_expression", "truth"]
