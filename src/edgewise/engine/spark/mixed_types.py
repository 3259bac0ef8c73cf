"""Text beside numbers on Spark: where ``coalesce``, ``if``, CASE, ``array(...)`` and IN lists mix them.

Spark gives such a call one type and casts the text to it outside any try form, so one text value that does not
cast failed the whole query, and text that does cast came out as a number where the local engine keeps it as it is.
The local engine casts text beside number literals as Spark does (``expr/functions/conditional.py``); for the rest,
the compiler (``sql.py``) uses these rules so each event's value meets what uses it as it does locally:

* a call over a field no type is known for, or mixing text with typed numbers, is a VARIANT where it is the value a
  step sets (``variant_branches``, ``variant_elements``; ``is_variant_call``); inside an expression, such a field
  read at a number type counts as text beside numbers (``untyped_number``);
* what uses such a call inside an expression is moved into its values (``lift_mixed``);
* an aggregate's argument casts the text to the number it reads (``read_as_number``);
* a call that is a value of another with number literals takes their type (``retarget_mixed``);
* ``nullif``, ``nvl2``, ``equal_null`` and IN lists of mixed kinds are written as Spark defines them
  (``as_spark_writes_it``), so their comparisons are guarded;
* where none applies, the guard makes Spark's cast itself (``text_as``): the event fails, not the query.

docs/spark.md, "Implicit casts of mixed types", says what agrees and what still differs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from functools import lru_cache

from sqlglot import exp

from edgewise.engine.spark.sqlnodes import (
    COALESCING,
    READ_AT,
    UNTYPED,
    error_if,
    first_error,
    is_text,
    literal_type,
    number_literal,
    parsed,
    sql_of,
    standalone_if,
    value_places,
)
from edgewise.expr.compiler import compile_expression
from edgewise.expr.typecheck import NUMERIC, STRING, static_type
from edgewise.expr.values import is_number

SCALAR_WANTS = frozenset(("double", "bigint", "string"))
"""The wanted types a number can be cast to: where ``coalesce``, an IF or a CASE over an untyped field is wanted
at one of them, the field's text is cast beside number literals first (``_Compiler._beside_numbers``)."""


def as_spark_writes_it(node: exp.Expression) -> exp.Expression | None:
    """``nvl2``, ``nullif`` and ``equal_null`` as Spark itself writes them (``nvl2(a, b, c)`` is ``if(a IS NOT
    NULL, b, c)``, ``nullif(a, b)`` is ``if(a = b, NULL, a)``, ``equal_null(a, b)`` is ``a <=> b``), and an IN
    list that is not literals of one kind as SQL defines it (``x IN (a, b)`` is ``x = a OR x = b``), so their
    values are typed and their comparisons guarded as an IF's and a comparison's: as functions, ``nullif(x, 0)``
    over the text ``'oops'`` failed the query, not the event, ``x IN ('a', 1)`` gave the list one type and failed
    the query on ``'oops'``, and ``equal_null(k, 'b')`` over a field no type is known for compared a VARIANT,
    which Spark's analyser refused (found by the fuzzer's soak). None for anything else."""
    if isinstance(node, exp.In) and node.expressions and not node.args.get("query"):
        kinds = {literal_type(v) for v in node.expressions}
        if (len(kinds) == 1 and None not in kinds) or not _short(node.this):
            return None  # literals of one kind (Spark's one type is theirs), or a subject too long to repeat
        # a list mixing kinds: each comparison on its own, as SQL defines IN and as the local engine evaluates it
        subject, (first, *rest) = node.this, node.expressions
        either: exp.Expression = exp.EQ(this=subject.copy(), expression=first.copy())
        for value in rest:
            either = exp.Or(this=either, expression=exp.EQ(this=subject.copy(), expression=value.copy()))
        return exp.Paren(this=either)
    name = str(node.this).lower() if isinstance(node, exp.Anonymous) else None
    if name == "equal_null" and len(node.expressions) == 2:
        a, b = node.expressions
        return exp.NullSafeEQ(this=a.copy(), expression=b.copy())
    if name == "nullif" and len(node.expressions) == 2 and _short(node.expressions[0]):
        a, b = node.expressions
        return exp.If(this=exp.EQ(this=a.copy(), expression=b.copy()), true=exp.Null(), false=a.copy())
    if name == "nvl2" and len(node.expressions) == 3:
        a, b, c = node.expressions
        return exp.If(this=exp.Not(this=exp.Is(this=a.copy(), expression=exp.Null())), true=b.copy(),
                      false=c.copy())
    return None


REPEATED_AT_MOST = 60
"""How long (as written) an operand that a rewrite repeats may be: ``nullif(a, b)`` repeats ``a``, an IN list its
subject, a lifted use its other operands. Nested, each repetition doubles the SQL, which once ran Spark's driver out
of heap (tests/expr/test_guard_size.py); a longer operand keeps Spark's own form, whose cast the guard makes."""


def _short(operand: exp.Expression) -> bool:
    return len(operand.sql(dialect="spark")) <= REPEATED_AT_MOST


def is_variant_call(node: exp.Expression, want: str | None) -> bool:
    """Whether a ``coalesce``, IF or CASE whose values mix text with typed numbers is made a VARIANT: where it is the
    whole expression, the value a step sets (each event's value then comes out as it is, as locally); inside
    another expression, what uses it is lifted into its values instead (``lift_mixed``), as a function or an
    operator over a VARIANT is not what it is over text or a number. The whole body of ``transform``'s lambda is
    such a value too (an element of the array it makes)."""
    parent = node.parent
    in_transform = isinstance(parent, exp.Lambda) and isinstance(parent.parent, exp.Transform)
    return want is None and (parent is None or in_transform)


VARIANT = "edgewise_variant"
"""Marks a ``coalesce``, IF or CASE made a VARIANT (each event's value as it is): a call it is a value of treats it
as it treats a field no type is known for (``gives_variant``). ``GIVES_TEXT`` where it can give text (it has no
number literals of its own, beside which its text was cast already)."""


GIVES_TEXT = "text"


def gives_variant(value: exp.Expression) -> bool:
    """A value that is a VARIANT of unknown kind: a field no type is known for, or a call made a VARIANT."""
    return value.meta.get(UNTYPED) is not None or bool(value.meta.get(VARIANT))


def variant_branches(node: exp.If | exp.Case) -> None:
    """An IF or CASE wanted at no type (the value a step sets) whose values include a field no type is known for
    (a VARIANT): every other value is cast to a VARIANT, as Spark gives the branches one type and refuses a
    VARIANT beside another; each event's value then comes out as it is, as on the local engine. (Found by the
    pipeline fuzzer's soak: ``if(c, x, 1.5)`` was refused by Spark's analyser.) So too where text meets a number
    that is not a literal (``text_beside_typed_numbers``) in the value a step sets (``is_variant_call``)."""
    present = call_values(node)
    if not any(gives_variant(v) for v in present) and not (
            is_variant_call(node, None) and text_beside_typed_numbers(present)):
        return
    map_values(node, lambda value: value if gives_variant(value) else variant_value(value))
    node.meta[VARIANT] = True if text_target(present) else GIVES_TEXT


def retarget_mixed(values: list[exp.Expression], target: str,
                   untyped: Callable[[exp.Expression, str], exp.Expression]) -> None:
    """Values of a call with number literals (``target``: their type) that are calls mixing text with typed numbers
    themselves (``coalesce(coalesce(s, y), 0)``): the local engine hands the outer call the inner one's text as it
    is and casts it beside the literals, so on Spark the inner call's text is cast to the literals' type too, not
    to its own numbers' type first (found by the pipeline fuzzer's soak: a query failed on ``'3.5'``). A field no
    type is known for among the inner call's values has its text cast so by ``untyped`` (``nvl(if(c, y, x), -1)``
    over ``'0.0'`` fails as locally: found by the soak)."""
    for value in values:
        if not value.meta.pop(MIXED, False):
            continue
        inner = call_values(value)
        retarget_mixed(inner, target, untyped)
        for v in inner:
            if _value_class(v) == STRING:
                v.replace(parsed(f"CAST({sql_of(v)} AS {target})"))
            elif untyped_number(v):
                v.replace(untyped(v, target))


NUMBER_WANTS = frozenset(("double", "bigint"))


def read_as_number(value: exp.Expression, want: str) -> exp.Expression:
    """A value of a call mixing text with typed numbers that is the whole expression, wanted at a number type (an
    aggregate's argument: ``sum(if(c, x, y))``): text is cast to that type as the reader of the value casts it on
    both engines (``sum`` over ``'2.5'`` adds 2.5), not to the numbers' type first as Spark's one type for the call
    would (BIGINT: '2.5' failed the event on Spark only). The guard reports text that does not cast."""
    if _value_class(value) == STRING:
        return parsed(f"CAST({sql_of(value)} AS {want.upper()})")
    return value


_COUNTING = frozenset(("size", "cardinality"))


def variant_elements(node: exp.Anonymous) -> None:
    """``array(...)`` whose elements mix text with numbers, or a field no type is known for (a VARIANT) with typed
    values: Spark gives an array one element type and casts the other elements to it outside any try form
    (``array(x, 1)`` failed the whole query on ``'-539.25'``), or refuses a VARIANT beside another type; the local
    engine keeps each element as it is. Where the array is the value a step sets or what ``size`` counts, the
    elements become VARIANTs, so each comes out as it is on Spark too; where a function reads its elements, they
    keep Spark's one type (a function of an ``array<variant>`` would be refused) and the guard casts the text
    (``sql._guard``), so a text that does not cast fails its event, not the query."""
    parent = node.parent
    if parent is not None and not (isinstance(parent, exp.Anonymous) and str(parent.this).lower() in _COUNTING):
        return
    elements = [e for e in node.expressions if not isinstance(e, exp.Null)]
    untyped = [_is_variant(e) for e in elements]
    classes = {_value_class(e) for e, u in zip(elements, untyped, strict=True) if not u}
    if not ({STRING, NUMERIC} <= classes or MIXED in classes or (any(untyped) and not all(untyped))):
        return
    node.set("expressions", [e if _is_variant(e) else variant_value(e) for e in node.expressions])


def _is_variant(value: exp.Expression) -> bool:
    """Compiled as a VARIANT: a call made one, or a field no type is known for read without a type."""
    return bool(value.meta.get(VARIANT)) or (value.meta.get(UNTYPED) is not None and value.meta.get(READ_AT) is None)


def variant_value(value: exp.Expression) -> exp.Expression:
    """A value of a VARIANT call, as a VARIANT: cast to one, or where it is itself a call mixing text with numbers
    (``MIXED``: ``nullif(if(c, x, y), 0)``), that call made a VARIANT in turn, so Spark gives it no one type."""
    if not value.meta.pop(MIXED, False):
        # the value's own nodes, not its SQL parsed again: their marks stay, and a field no type is known for in
        # it is still read by each value's kind (``array(s, x * -2)`` over '-210.85' failed locally only: found by
        # the pipeline fuzzer's soak)
        as_variant = parsed("try_cast(__value__ AS VARIANT)")
        as_variant.set("this", value)
        return as_variant
    map_values(value, variant_value)
    return value


def variant_accumulator(node: exp.Anonymous) -> None:
    """An ``aggregate``/``reduce`` that is the whole expression, whose merge gives text beside a typed number with
    the accumulator itself as one of its values (``aggregate(xs, y, (acc, e) -> if(c, x, acc))``, a STRING ``x``, a
    BIGINT ``y``): Spark gives the accumulator the start's one type and casts the text to it inside the lambda, where
    no guard sees it, so ``'oops'`` failed the whole query; the local engine keeps each value as it is. The start
    and the merge's other values are made VARIANTs, so the accumulator is one and each event's value comes out as
    it is, as for the value a step sets (``is_variant_call``). Only where the merge names the accumulator as its
    values and nowhere else, and a finish lambda, if any, gives it back as it is: a VARIANT has no arithmetic.
    (Issue 39: it had been listed as a difference; it was a defect.)"""
    args = node.expressions
    if node.parent is not None or len(args) not in (3, 4) or not all(isinstance(a, exp.Lambda) for a in args[2:]):
        return
    merge = args[2]
    acc = merge.expressions[0].name
    if len(args) == 4 and not _names_only(args[3].this, args[3].expressions[0].name):
        return
    body = merge.this
    if not _is_call(body):
        return
    values = call_values(body)
    own = [v for v in values if _is_variable(v, acc)]
    others = [v for v in values if not _is_variable(v, acc)]
    mentions = sum(1 for name in body.find_all(exp.Identifier) if name.name == acc)
    # the start counts as a typed number even where it is a literal: locally it is the accumulator's value, not a
    # literal beside the text in one call, so nothing casts the text to it
    classes = {_value_class(v) for v in (args[1], *others)}
    mixes = {STRING, NUMERIC} <= classes or MIXED in classes or any(gives_variant(v) for v in (args[1], *others))
    if not own or mentions != len(own) or not mixes:
        return
    node.set("expressions", [args[0], variant_value(args[1]), *args[2:]])
    map_values(body, lambda value: exp.to_identifier(acc) if _is_variable(value, acc)
               else value if gives_variant(value) else variant_value(value))
    node.meta[VARIANT] = True


def _is_variable(value: exp.Expression, variable: str) -> bool:
    """``value`` is the lambda variable, or the variable cast to a VARIANT (``variant_branches`` casts the values
    beside a field no type is known for)."""
    if isinstance(value, exp.TryCast) and value.to.is_type(exp.DataType.Type.VARIANT):
        value = value.this
    return _names_only(value, variable)


def _names_only(node: exp.Expression, variable: str) -> bool:
    """``node`` is the lambda variable ``variable`` and nothing else (sqlglot reads one as a column or a bare
    identifier)."""
    return (isinstance(node, exp.Identifier) or (isinstance(node, exp.Column) and not node.table)) and \
        node.name == variable


def settle_mixed(node: exp.Expression, want: str | None) -> None:
    """A ``coalesce``, IF or CASE whose values mix text with typed numbers, not made a VARIANT (``is_variant_call``):
    the whole expression wanted at a number type reads its text as that number (``read_as_number``); anywhere
    else it is marked ``MIXED``, for what uses it to be lifted into its values (``lift_mixed``)."""
    if is_variant_call(node, want) or not text_beside_typed_numbers(call_values(node)):
        return
    if node.parent is None and want in NUMBER_WANTS:
        map_values(node, lambda value: read_as_number(value, want))
    else:
        node.meta[MIXED] = True


def text_beside_typed_numbers(values: list[exp.Expression]) -> bool:
    """Values of one call (``coalesce``, IF, CASE) mixing text with a number that is not a literal (a field read at
    a number type, arithmetic over such): Spark would cast the text to the number's type, but the local engine,
    without static types, keeps each value as it is; wanted at no type, the call is a VARIANT instead, so each
    event's value comes out as it is on both. (Beside number literals both engines cast: ``text_target``.)"""
    classes = {_value_class(v) for v in values}
    return text_target(values) is None and (
        {STRING, NUMERIC} <= classes or MIXED in classes or any(untyped_number(v) for v in values))


def untyped_number(value: exp.Expression) -> bool:
    """A field no type is known for, read at a number type because of what uses the call it is a value of
    (``if(c, y, x) != 8``). Its text, locally, reaches that use as text and meets the use's own rules (``'0.0' !=
    8`` casts to BIGINT and fails); read at DOUBLE it would be 0.0 on Spark. So the call counts as mixing text with
    numbers: the use is lifted into its values, where the field is an operand of its own, read by each value's
    kind (``sql._follow_value_kinds``). Found by the pipeline fuzzer's soak."""
    return value.meta.get(UNTYPED) is not None and value.meta.get(READ_AT) in NUMBER_WANTS


def _value_class(node: exp.Expression) -> str | None:
    """STRING or NUMERIC where a compiled value's form tells (a field read at a type, a cast, arithmetic, a
    function of known result: ``typecheck.static_type``), ``MIXED`` for a call mixing both, else None."""
    if node.meta.get(MIXED):
        return MIXED  # a call that mixes them itself
    read_at = node.meta.get(READ_AT)
    if read_at is not None:
        return STRING if read_at == "string" else NUMERIC if _number_kind(node, True) else None
    if is_text(node):
        return STRING
    if _number_kind(node, True) is not None:
        return NUMERIC
    values = call_values(node) if _is_call(node) else None
    if values is not None:  # a call of one class, NULLs aside
        classes = {_value_class(v) for v in values if not isinstance(v, exp.Null)}
        return classes.pop() if len(classes) == 1 else None
    return static_type(node)


def _is_call(node: exp.Expression) -> bool:
    """``node`` is a ``coalesce``/``nvl``/``ifnull``, an IF or a CASE: a call whose value is one of its values."""
    return (isinstance(node, exp.Case) or standalone_if(node)
            or (isinstance(node, exp.Anonymous) and str(node.this).lower() in COALESCING))


def call_values(node: exp.Expression) -> list[exp.Expression]:
    """The values of a ``coalesce``/``nvl``/``ifnull`` (its arguments), an IF or a CASE (each THEN and the ELSE
    that is there): what it can give."""
    if isinstance(node, exp.If | exp.Case):
        return [v for h, k in value_places(node) if isinstance(v := h.args.get(k), exp.Expression)]
    return list(node.expressions)


def map_values(node: exp.Expression, change: Callable[[exp.Expression], exp.Expression]) -> None:
    """Each value of a ``coalesce``, IF or CASE (``call_values``) replaced by ``change`` of it, in place."""
    if isinstance(node, exp.If | exp.Case):
        for holder, key in value_places(node):
            value = holder.args.get(key)
            if isinstance(value, exp.Expression):
                holder.set(key, change(value))
    else:
        node.set("expressions", [change(a) for a in node.expressions])


MIXED = "edgewise_mixed"
"""Marks a ``coalesce``, IF or CASE wanted at a type whose values mix text with typed numbers (not literals):
what uses it is lifted into its values (``lift_mixed``)."""


_NOT_LIFTED = (exp.If, exp.Case, exp.And, exp.Or, exp.Not, exp.Lambda, exp.AggFunc)


def lift_mixed(node: exp.Expression) -> exp.Expression:
    """``f(…, if(c, a, b), …)`` as ``if(c, f(…, a, …), f(…, b, …))`` where the IF (a CASE, a ``coalesce``) mixes
    text with numbers that are not literals (``MIXED``). Spark would give the call the numbers' type and cast the
    text to it before ``f`` sees it; the local engine hands ``f`` each event's value as it is, and ``f``'s own rules
    for text then apply (``round('2.5')`` is 2.5; ``if(c, x, y) = 'oops'`` compares text with text). With ``f`` in
    each branch, Spark applies ``f``'s rules to each value's own type too, and the guard counts only the errors of
    the branch an event takes. Connectives, conditionals, aggregates and lambdas are not lifted through: they
    decide what is evaluated."""
    if isinstance(node, _NOT_LIFTED) or (isinstance(node, exp.Anonymous) and str(node.this).lower() in COALESCING):
        return node
    if any(isinstance(a, exp.Lambda) for a in node.iter_expressions()):
        return node
    for key, child in node.args.items():
        for index, c in enumerate(child if isinstance(child, list) else [child]):
            if isinstance(c, exp.Expression) and c.meta.get(MIXED) and _repeats_little(node, c):
                return _lifted(node, key, index if isinstance(child, list) else None, c)
    return node


LIFTED_REPEATS_AT_MOST = 600
"""How much compiled SQL a lift may repeat once per value of the lifted call (``REPEATED_AT_MOST``): ``node``'s
other operands, and a ``coalesce``'s values but its last (each is tested, then used; the last is only used)."""


def _repeats_little(node: exp.Expression, mixed: exp.Expression) -> bool:
    repeated = _weight(node) - _weight(mixed)
    if not isinstance(mixed, exp.If | exp.Case):
        # counting the last value too refused ``coalesce(s, nvl(if(length(s) > 2, s, x), -1)) <= 19``, whose long
        # last value the lift writes once, and Spark's one type read '3.5' as 3.5 (found by issue 39's soak)
        repeated += sum(_weight(value) for value in mixed.expressions[:-1])
    return repeated <= LIFTED_REPEATS_AT_MOST


def _weight(node: exp.Expression) -> int:
    """The length of ``node``'s SQL, each field read counted as a few characters: a read is long as written (a
    checked read of a sampled type is a CASE with its error message) but Spark evaluates a repeated one once."""
    reads = [n for n in node.walk() if isinstance(n, exp.Expression) and READ_AT in n.meta]
    return len(sql_of(node)) - sum(len(sql_of(read)) - 8 for read in reads)


def _lifted(node: exp.Expression, key: str, index: int | None, mixed: exp.Expression) -> exp.Expression:
    """``node`` with its child ``mixed`` (at ``key``, ``index``) lifted out: the conditional, each of its values
    replaced by a copy of ``node`` holding that value."""

    def holding(value: exp.Expression) -> exp.Expression:
        copy = node.copy()
        if index is None:
            copy.set(key, value)
        else:
            values = list(copy.args[key])
            values[index] = value
            copy.set(key, values)
        return lift_mixed(copy)  # another mixed argument of the same node

    if isinstance(mixed, exp.If | exp.Case):
        lifted = mixed.copy()
        lifted.meta.pop(MIXED, None)
        for holder, place in value_places(lifted):
            value = holder.args.get(place)
            holder.set(place, holding(value if isinstance(value, exp.Expression) else exp.Null()))
        return lifted
    args = list(mixed.expressions)  # coalesce: the first value that is not NULL
    ifs = [exp.If(this=exp.Not(this=exp.Is(this=a.copy(), expression=exp.Null())), true=holding(a.copy()))
           for a in args[:-1]]
    return exp.Case(ifs=ifs, default=holding(args[-1].copy()))


def text_target(args: list[exp.Expression], *, typed: bool = False) -> str | None:
    """The type text among ``coalesce``'s arguments (an IF's, a CASE's values) is cast to: Spark's one type for
    the call beside numbers, DOUBLE where one is a fraction, else BIGINT; None without numbers. Numbers are the
    literals, and with ``typed`` also values read or cast at a number type: the guard casts text beside those
    too, as Spark would outside any try form (``coalesce(x, y)`` with a STRING ``x`` and a BIGINT ``y`` failed
    the query on ``'oops'``), but the local engine, without static types, keeps such text as it is."""
    kinds = {k for k in (_number_kind(a, typed) for a in args) if k is not None}
    return _widest(kinds) if kinds else None


def _widest(kinds: Collection[str | None]) -> str:
    """Spark's one type for numbers of these kinds (BIGINT, DOUBLE): DOUBLE where one is."""
    return "DOUBLE" if "DOUBLE" in kinds else "BIGINT"


def one_type(values: list[exp.Expression]) -> str | None:
    """The type the guard casts text among a call's values to: the number literals' where there are any (as the
    local engine casts), else the typed numbers' (as Spark would, outside any try form), else DOUBLE beside a
    number whose exact type the form does not tell (``length(s)``): so Spark's own cast, which would fail the
    query, never runs on text (found by the fuzzer's soak: ``coalesce(s, length(s))`` over 'ÄÖ')."""
    found = text_target(values) or text_target(values, typed=True)
    if found is None and any(_value_class(v) == NUMERIC for v in values):
        return "DOUBLE"
    return found


_INTEGRAL_TYPES = frozenset(("bigint", "int", "smallint", "tinyint"))


def _number_kind(node: exp.Expression, typed: bool) -> str | None:
    """BIGINT or DOUBLE where ``node`` is a number literal (or, ``typed``, a value read or cast at a number
    type), else None."""
    literal = number_literal(node)
    if literal is not None:
        return "DOUBLE" if set(literal) & set(".eE") else "BIGINT"
    constant = _constant_number(node)
    if constant is not None:
        return constant
    if not typed:
        return None
    if isinstance(node, exp.Paren | exp.Neg):
        return _number_kind(node.this, typed)
    if isinstance(node, exp.Div):
        return "DOUBLE"
    if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Mod | exp.IntDiv):
        kinds = {_number_kind(node.this, typed), _number_kind(node.expression, typed)}
        return None if None in kinds else "BIGINT" if isinstance(node, exp.IntDiv) else _widest(kinds)
    if _is_call(node):  # Spark's one type for a call of numbers, NULLs and text (cast to it) aside
        kinds = {_number_kind(v, typed) for v in call_values(node)
                 if not isinstance(v, exp.Null) and _value_class(v) not in (STRING, MIXED)}
        return None if not kinds or None in kinds else _widest(kinds)
    spark_type = node.meta.get(READ_AT)
    if isinstance(node, exp.Anonymous) and str(node.this).lower() in ("variant_get", "try_variant_get"):
        kind = node.expressions[2] if len(node.expressions) == 3 else None
        spark_type = str(kind.this).lower() if isinstance(kind, exp.Literal) else None
    elif isinstance(node, exp.Cast):
        spark_type = node.to.sql(dialect="spark").lower()
    if spark_type is None:
        return None
    if spark_type in _INTEGRAL_TYPES:
        return "BIGINT"
    return "DOUBLE" if spark_type in ("double", "float") or spark_type.startswith("decimal") else None


def _constant_number(node: exp.Expression) -> str | None:
    """BIGINT or DOUBLE where ``node`` reads no field and the local engine folds it to a number (``cast(8 AS
    DOUBLE)``, ``try_divide(1, 4)``, ``negative(-2)``): the local engine casts text beside such a constant as beside
    a literal, so the rules here count it as one (found by the pipeline fuzzer's soak: ``nvl(coalesce(s, cast(8 AS
    DOUBLE)), -1)`` over '3.5' failed the event on Spark only)."""
    if isinstance(node, exp.Literal | exp.Null) or node.find(exp.Column) is not None:
        return None
    return _folded_number(sql_of(node))


@lru_cache(maxsize=1024)
def _folded_number(sql: str) -> str | None:
    """``_constant_number`` of a field-free expression's SQL: the rules ask of one value several times while they
    compile a call, and each asking would parse and compile it again."""
    try:
        value = getattr(compile_expression(sql).evaluate, "constant", None)
    except Exception:  # noqa: BLE001  # Spark SQL the local engine does not read: not a constant it knows
        return None
    if not is_number(value):
        return None
    return "BIGINT" if isinstance(value, int) else "DOUBLE"


def text_as(target: str | None, guarded: exp.Expression, error: str | None) -> tuple[exp.Expression, str | None]:
    """A guarded value of a call Spark gives one type (``coalesce``, ``if``, CASE) beside numbers of type
    ``target`` (``one_type``): where it is text by its form, cast to that type, which Spark does outside any try
    form; the guarded form casts with try_cast and reports the failure as the value's CAST_INVALID_INPUT."""
    if target is None or not is_text(guarded):
        return guarded, error
    text = sql_of(guarded)
    cast_error = error_if(f"({text}) IS NOT NULL AND try_cast({text} AS {target}) IS NULL", "CAST_INVALID_INPUT")
    return parsed(f"try_cast({text} AS {target})"), first_error([error or "", cast_error])
