"""Array and struct functions, including the higher-order ones that take lambdas."""

from __future__ import annotations

from typing import Any

from edgewise.errors import EvalError
from edgewise.expr import values as V
from edgewise.expr.functions.base import Evaluator, FunctionTable, Lambda

table = FunctionTable("array")


def _arr(v: Any, fn: str) -> list[Any]:
    if not isinstance(v, list):
        raise V.mismatch(fn, v)
    return v


def _int(v: Any) -> int:
    n = V.to_long(v, "INT", -(2**31), 2**31 - 1)
    assert n is not None
    return n


def _index_error(i: int, n: int) -> EvalError:
    return EvalError("INVALID_ARRAY_INDEX_IN_ELEMENT_AT",
                     f"the index {i} is out of bounds: the array has {n} elements; "
                     "use try_element_at to get NULL instead")


@table.fn("array", args=(0, None), nulls=True)
def array(*items: Any) -> list[Any]:
    """An array of the arguments."""
    return list(items)


@table.fn("size", "cardinality", "array_size")
def size(v: Any) -> int:
    """Number of elements of an array (or fields of an object)."""
    if isinstance(v, list | dict):
        return len(v)
    raise V.mismatch("size", v)


def _element_at(v: Any, idx: Any, safe: bool) -> Any:
    if isinstance(v, dict):
        return v.get(V.to_string(idx))
    arr = _arr(v, "element_at")
    i = _int(idx)
    if i == 0:
        if safe:
            return None
        raise EvalError("INVALID_INDEX_OF_ZERO", "element_at() index 0 is invalid: indexes start at 1")
    j = i - 1 if i > 0 else len(arr) + i
    if 0 <= j < len(arr):
        return arr[j]
    if safe:
        return None
    raise _index_error(i, len(arr))


@table.fn("element_at", args=2)
def element_at(v: Any, idx: Any) -> Any:
    """Element at 1-based ``index`` (negative: from the end); out of range raises."""
    return _element_at(v, idx, False)


@table.fn("try_element_at", args=2)
def try_element_at(v: Any, idx: Any) -> Any:
    """Like ``element_at`` but NULL when the index is out of range."""
    return _element_at(v, idx, True)


@table.fn("get", args=2)
def get(v: Any, idx: Any) -> Any:
    """Element at 0-based ``index``, NULL when out of range."""
    arr = _arr(v, "get")
    i = _int(idx)
    return arr[i] if 0 <= i < len(arr) else None


@table.fn("array_contains", args=2, nulls=True)
def array_contains(v: Any, item: Any) -> Any:
    """Whether the array holds the value (NULL if not found and the array has NULLs)."""
    if v is None or item is None:
        return None
    saw_null = False
    for x in _arr(v, "array_contains"):
        if x is None:
            saw_null = True
        elif V.compare(x, item) == 0:
            return True
    return None if saw_null else False


@table.fn("array_position", args=2)
def array_position(v: Any, item: Any) -> int:
    """1-based position of the first occurrence of the value, 0 if none."""
    for i, x in enumerate(_arr(v, "array_position")):
        if x is not None and V.compare(x, item) == 0:
            return i + 1
    return 0


@table.fn("slice", args=3)
def slice_(v: Any, start: Any, length: Any) -> list[Any]:
    """``length`` elements from 1-based ``start`` (negative: from the end)."""
    arr = _arr(v, "slice")
    s, n = _int(start), _int(length)
    if s == 0:
        raise EvalError("INVALID_PARAMETER_VALUE.START", "slice() start must not be 0: indexes start at 1")
    if n < 0:
        raise EvalError("INVALID_PARAMETER_VALUE.LENGTH", f"slice() length must be at least 0, found {n}")
    i = s - 1 if s > 0 else len(arr) + s
    if i < 0:
        return []
    return arr[i : i + n]


@table.fn("array_join", args=(2, 3))
def array_join(v: Any, sep: Any, null_text: Any = None) -> str:
    """The elements as strings joined by ``sep``; NULLs skipped or replaced by ``null_text``."""
    parts = []
    for x in _arr(v, "array_join"):
        if x is None:
            if null_text is not None:
                parts.append(V.to_string(null_text) or "")
        else:
            parts.append(V.to_string(x) or "")
    return (V.to_string(sep) or "").join(parts)


def _same(x: Any, y: Any) -> bool:
    """Set-function equality: NULL matches NULL, other values compare as ``=`` does."""
    if x is None or y is None:
        return x is None and y is None
    return V.compare(x, y) == 0


def _distinct(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    for x in items:
        if not any(_same(x, y)
                   for y in out):
            out.append(x)
    return out


@table.fn("array_distinct")
def array_distinct(v: Any) -> list[Any]:
    """The array without repeated values (first occurrences kept)."""
    return _distinct(_arr(v, "array_distinct"))


@table.fn("array_union", args=2)
def array_union(a: Any, b: Any) -> list[Any]:
    """Distinct elements of both arrays."""
    return _distinct(_arr(a, "array_union") + _arr(b, "array_union"))


@table.fn("array_intersect", args=2)
def array_intersect(a: Any, b: Any) -> list[Any]:
    """Distinct elements found in both arrays."""
    right = _arr(b, "array_intersect")
    return [x for x in _distinct(_arr(a, "array_intersect"))
            if any(_same(x, y)
                   for y in right)]


@table.fn("array_except", args=2)
def array_except(a: Any, b: Any) -> list[Any]:
    """Distinct elements of the first array that are not in the second."""
    right = _arr(b, "array_except")
    return [x for x in _distinct(_arr(a, "array_except"))
            if not any(_same(x, y)
                       for y in right)]


@table.fn("array_remove", args=2)
def array_remove(v: Any, item: Any) -> list[Any]:
    """The array without the elements equal to the value."""
    return [x for x in _arr(v, "array_remove") if x is None or V.compare(x, item) != 0]


@table.fn("array_compact")
def array_compact(v: Any) -> list[Any]:
    """The array without NULLs."""
    return [x for x in _arr(v, "array_compact") if x is not None]


@table.fn("array_append", args=2, nulls=True)
def array_append(v: Any, item: Any) -> Any:
    """The array with the value added at the end."""
    return None if v is None else [*_arr(v, "array_append"), item]


@table.fn("array_prepend", args=2, nulls=True)
def array_prepend(v: Any, item: Any) -> Any:
    """The array with the value added at the start."""
    return None if v is None else [item, *_arr(v, "array_prepend")]


def _extreme(v: Any, fn: str, sign: int) -> Any:
    best = None
    for x in _arr(v, fn):
        if x is None:
            continue
        if best is None or (V.compare(x, best) or 0) * sign > 0:
            best = x
    return best


@table.fn("array_max")
def array_max(v: Any) -> Any:
    """The largest non-NULL element."""
    return _extreme(v, "array_max", 1)


@table.fn("array_min")
def array_min(v: Any) -> Any:
    """The smallest non-NULL element."""
    return _extreme(v, "array_min", -1)


@table.fn("flatten")
def flatten(v: Any) -> Any:
    """An array of arrays made into one array (NULL if any inner array is NULL)."""
    out: list[Any] = []
    for x in _arr(v, "flatten"):
        if x is None:
            return None
        out.extend(_arr(x, "flatten"))
    return out


def _sorted(items: list[Any], ascending: bool, nulls_first: bool) -> list[Any]:
    import functools

    values = [x for x in items if x is not None]
    nulls = [x for x in items if x is None]
    values.sort(key=functools.cmp_to_key(lambda a, b: V.compare(a, b) or 0), reverse=not ascending)
    return nulls + values if nulls_first else values + nulls


@table.fn("sort_array", args=(1, 2))
def sort_array(v: Any, asc: Any = True) -> list[Any]:
    """Sorted array; ascending puts NULLs first, descending puts them last."""
    ascending = V.to_boolean(asc) is not False
    return _sorted(_arr(v, "sort_array"), ascending, ascending)


@table.fn("array_sort")
def array_sort(v: Any) -> list[Any]:
    """Sorted ascending, NULLs last."""
    return _sorted(_arr(v, "array_sort"), True, False)


@table.fn("sequence", args=(2, 3))
def sequence(start: Any, stop: Any, step: Any = None) -> list[int]:
    """Integers from ``start`` to ``stop`` inclusive, by ``step`` (default 1 or -1)."""
    a, b = V.to_long(start), V.to_long(stop)
    assert a is not None and b is not None
    s = V.to_long(step) if step is not None else (1 if b >= a else -1)
    assert s is not None
    if s == 0 or (b > a and s < 0) or (b < a and s > 0):
        raise EvalError("INVALID_PARAMETER_VALUE.SEQUENCE_STEP",
                        f"sequence() step {s} does not lead from {a} to {b}")
    count = (b - a) // s + 1
    if count > 1_000_000:
        raise EvalError("COLLECTION_SIZE_LIMIT_EXCEEDED", f"sequence() would make {count} elements")
    return list(range(a, b + (1 if s > 0 else -1), s))


@table.fn("arrays_zip", args=(1, None), nulls=True)
def arrays_zip(*arrays: Any) -> Any:
    """Structs of the n-th elements of each array (fields named 0, 1, ...); shorter arrays pad with NULL."""
    if any(a is None for a in arrays):
        return None
    lists = [_arr(a, "arrays_zip") for a in arrays]
    n = max((len(a) for a in lists), default=0)
    return [{str(j): (a[i] if i < len(a) else None) for j, a in enumerate(lists)} for i in range(n)]


@table.fn("named_struct", args=(2, None), nulls=True)
def named_struct(*args: Any) -> dict[str, Any]:
    """An object from name, value pairs: ``named_struct('a', 1, 'b', x)``."""
    if len(args) % 2:
        raise EvalError("WRONG_NUM_ARGS", "named_struct() takes name, value pairs")
    out: dict[str, Any] = {}
    for name, value in zip(args[::2], args[1::2], strict=True):
        if not isinstance(name, str):
            raise EvalError("DATATYPE_MISMATCH", "named_struct() names must be strings")
        out[name] = value
    return out


# ---------------------------------------------------------------- higher-order


@table.special("transform", args=2, lambda_args=(1,))
def transform(args: list[Any]) -> Evaluator:
    """Applies a lambda to each element: ``transform(xs, x -> x * 2)`` (or ``(x, i) -> ...`` with the index)."""
    arr, fn = args[0], args[1]
    assert isinstance(fn, Lambda)
    with_index = len(fn.params) > 1

    def run(p: Any) -> Any:
        v = arr(p)
        if v is None:
            return None
        items = _arr(v, "transform")
        if with_index:
            return [fn.call(p, x, i) for i, x in enumerate(items)]
        return [fn.call(p, x) for x in items]

    return run


@table.special("filter", args=2, lambda_args=(1,))
def filter_(args: list[Any]) -> Evaluator:
    """The elements for which a lambda is TRUE: ``filter(xs, x -> x > 0)``."""
    arr, fn = args[0], args[1]
    assert isinstance(fn, Lambda)
    with_index = len(fn.params) > 1

    def run(p: Any) -> Any:
        v = arr(p)
        if v is None:
            return None
        items = _arr(v, "filter")
        if with_index:
            return [x for i, x in enumerate(items) if fn.call(p, x, i) is True]
        return [x for x in items if fn.call(p, x) is True]

    return run


@table.special("aggregate", "reduce", args=(3, 4), lambda_args=(2, 3))
def aggregate(args: list[Any]) -> Evaluator:
    """Folds an array: ``aggregate(xs, 0, (acc, x) -> acc + x[, acc -> acc * 10])``."""
    arr, start, merge = args[0], args[1], args[2]
    finish = args[3] if len(args) > 3 else None
    assert isinstance(merge, Lambda)

    def run(p: Any) -> Any:
        v = arr(p)
        if v is None:
            return None
        acc = start(p)
        for x in _arr(v, "aggregate"):
            acc = merge.call(p, acc, x)
        return finish.call(p, acc) if isinstance(finish, Lambda) else acc

    return run


def _quantifier(args: list[Any], name: str, decisive: bool) -> Evaluator:
    """``exists`` (decisive TRUE) and ``forall`` (decisive FALSE), with Spark's NULL rule: when no element is
    decisive but some gave NULL, the answer is NULL."""
    arr, fn = args[0], args[1]
    assert isinstance(fn, Lambda)

    def run(p: Any) -> Any:
        v = arr(p)
        if v is None:
            return None
        saw_null = False
        for x in _arr(v, name):
            r = fn.call(p, x)
            if r is decisive:
                return decisive
            if r is None:
                saw_null = True
        return None if saw_null else not decisive

    return run


@table.special("exists", args=2, lambda_args=(1,))
def exists(args: list[Any]) -> Evaluator:
    """Whether a lambda is TRUE for some element (NULL if none is TRUE and some are NULL)."""
    return _quantifier(args, "exists", True)


@table.special("forall", args=2, lambda_args=(1,))
def forall(args: list[Any]) -> Evaluator:
    """Whether a lambda is TRUE for every element (NULL if none is FALSE and some are NULL)."""
    return _quantifier(args, "forall", False)
