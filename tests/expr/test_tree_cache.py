"""The parsed-expression cache (``expr/tree.py``, ``expr/tree_cache.py``): a ``Node`` tree says what sqlglot's
tree says, survives being stored, and a run whose expressions were parsed before does not import sqlglot.

The oracle for the nodes is sqlglot's own tree, read directly: kinds against ``isinstance``, names, SQL text, the
walk order and the load-time static types, node by node. The compiled evaluators of a stored and a fresh tree
are held to each other over generated events.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from edgewise.errors import ConfigError, EvalError
from edgewise.expr import compiler, tree_cache
from edgewise.expr.dialect import EdgewiseSpark
from edgewise.expr.intervals import beside_interval
from edgewise.expr.parsing import parse
from edgewise.expr.tree import Node, from_sqlglot, from_stored, isa, to_stored
from edgewise.expr.typecheck import static_type
from tests.conftest import ROOT
from tests.expr.test_properties import events, expressions
from tests.fuzz.generate import conditions, numeric_expressions, string_expressions

SYNTAX = [
    "a.b.c > 3 AND NOT (c RLIKE '^x')", "`odd name` = 'x'", "xs[0] + m['k']", "CASE k WHEN 'a' THEN 1 ELSE 2 END",
    "CASE WHEN x > 1 THEN 'big' WHEN x IS NULL THEN NULL END", "x IN (1, 2, NULL)", "s NOT IN ('a', 'b')",
    "x BETWEEN 1 AND 5", "s LIKE 'a\\_%' ESCAPE '\\\\'", "s ILIKE 'A%'", "s LIKE '!%' ESCAPE '!'",
    "CAST(x AS DECIMAL(10, 2))", "TRY_CAST(s AS INT)", "CAST(s AS ARRAY<STRING>)", "-128Y", "9L + 5S", "-x",
    "ts + INTERVAL 2 DAYS", "ts - INTERVAL '30' MINUTE", "ts + (INTERVAL 1 DAY + INTERVAL 2 HOURS)",
    "EXTRACT(YEAR FROM ts)", "TRIM(BOTH 'x' FROM s)", "TRIM(LEADING FROM s)", "POSITION('a' IN s)",
    "SUBSTRING(s, 2, 3)", "SUBSTR(s FROM 2)", "transform(xs, x -> x + 1)", "aggregate(xs, 0, (acc, v) -> acc + v)",
    "s || 'x' || 1", "a <=> b", "x IS TRUE", "x IS NOT FALSE", "x IS NULL", "x div 2", "x % 3", "1.5e3 + .5",
    "2147483648 * 10", "9223372036854775808", "array(1, 2)[0]", "if(x > 0, 'p', 'n')", "NULL", "TRUE", "'text'",
    "coalesce(a, b, 0) / nullif(c, 0)", "x >= 1 OR y <= 2 AND z <> 3", "cast(t AS BIGINT)",
    "timestamp_seconds(cast(t AS BIGINT))", "named_struct('a', 1).a", "date_format(ts, 'yyyy-MM-dd')",
]
"""Every form the compiler has a handler for, and the typed literals, intervals and names around them."""

CLASS_NAMES = sorted({"Literal", "Boolean", "Null", "Column", "Identifier", "Dot", "Bracket", "Paren", "And",
                      "Or", "Not", "EQ", "NEQ", "GT", "GTE", "LT", "LTE", "NullSafeEQ", "Is", "Add", "Sub",
                      "Interval", "Mul", "Div", "IntDiv", "Mod", "Neg", "DPipe", "In", "Between", "Like", "ILike",
                      "Escape", "RegexpLike", "Case", "If", "Cast", "TryCast", "Anonymous", "Transform", "Array",
                      "Substring", "Trim", "StrPosition", "Extract", "Lambda", "Func", "Binary", "Var",
                      "DataType", "Exists", "Condition", "Predicate"})


def _same(node: Node, original: Any) -> None:
    """``node`` answers as sqlglot's ``original`` does, and so does every node under it, in the same order."""
    for name in CLASS_NAMES:
        assert isa(node, name) == isinstance(original, getattr(exp, name)), (name, original.sql())
    assert node.kind == type(original).__name__
    assert node.name == original.name
    assert node.sql() == original.sql(dialect=EdgewiseSpark)
    assert node.is_string == original.is_string
    assert static_type(node) == static_type(original)
    if isa(node, "Add", "Sub"):
        assert beside_interval(node) == beside_interval(original)
    if isa(node, "Column"):
        assert [p.name for p in node.parts] == [p.name for p in original.parts]
    if isa(node, "Func") and not isa(node, "Anonymous"):
        assert node.sql_name() == original.sql_name()
    ours, theirs = list(node.walk()), list(original.walk())
    assert [n.kind for n in ours] == [type(n).__name__ for n in theirs]
    for child, original_child in zip(node.children(), original.iter_expressions(), strict=True):
        _same(child, original_child)


def _stored_again(node: Node) -> Node:
    """``node`` through the cache file's form: JSON bytes and back."""
    kinds: dict[str, list[str]] = {}
    content = orjson.loads(orjson.dumps({"tree": to_stored(node, kinds), "kinds": kinds}))
    return from_stored(content["tree"], {k: frozenset(v) for k, v in content["kinds"].items()})


def _check(text: str, samples: list[dict[str, Any]]) -> None:
    try:
        original = parse(text)
    except ConfigError:
        return
    fresh = from_sqlglot(original)
    _same(fresh, original)
    stored = _stored_again(fresh)
    kinds: dict[str, list[str]] = {}
    assert to_stored(stored, kinds) == to_stored(fresh, {})
    _same(stored, original)
    for event in samples:
        assert _outcome(fresh, event) == _outcome(stored, event), (text, event)


def _outcome(tree: Node, event: dict[str, Any]) -> Any:
    try:
        evaluate = compiler._compile(tree, compiler._Context())
    except ConfigError as exc:
        return ("config", exc.message)
    try:
        return ("value", repr(evaluate(event)))
    except EvalError as exc:
        return ("error", exc.error_class)


SAMPLE = {"a": {"b": {"c": 4}}, "x": 3, "s": "abc", "k": "a", "xs": [1, 2], "m": {"k": 1}, "ts": "2024-01-31 10:00:00",
          "t": 1700000000, "odd name": "x", "b": None, "c": 0, "y": {"z": 1.5}}


@pytest.mark.parametrize("text", SYNTAX)
def test_every_form_reads_as_sqlglot_reads_it_and_survives_the_file(text: str) -> None:
    _check(text, [SAMPLE, {}, {"x": "12", "s": None, "xs": None}])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(expressions(), numeric_expressions(), string_expressions(), conditions()),
       samples=st.lists(events, min_size=1, max_size=3))
def test_generated_expressions_read_as_sqlglot_reads_them_and_survive_the_file(
        text: str, samples: list[dict[str, Any]]) -> None:
    _check(text, samples)


def _cache_file() -> Path | None:
    found = tree_cache.cache_file()
    return None if found is None else Path(found)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    directory = tmp_path / "cache"
    monkeypatch.setenv("EDGEWISE_CACHE_DIR", str(directory))
    monkeypatch.delenv(tree_cache.SWITCH, raising=False)
    tree_cache.forget()
    yield directory
    tree_cache.forget()


def test_a_parsed_text_is_kept_and_read_back_without_parsing(cache: Path) -> None:
    tree_cache.parse_node("x + 1 > 2")
    tree_cache.save()
    path = _cache_file()
    assert path is not None and path.parent.parent == cache
    assert "x + 1 > 2" in orjson.loads(path.read_bytes())["trees"]
    tree_cache.forget()
    node = tree_cache._stored("x + 1 > 2")
    assert node is not None and node.sql() == "x + 1 > 2" and isa(node, "GT")


def test_two_processes_saving_keep_both_texts(cache: Path) -> None:
    """A save merges with what the file holds now, not with what it held when this process read it."""
    tree_cache.parse_node("a = 1")  # this process reads the (empty) file and parses a text
    mine = dict(tree_cache._unsaved)
    tree_cache._unsaved.clear()
    tree_cache.parse_node("b = 2")  # meanwhile another process parses another and saves it
    tree_cache.save()
    tree_cache._unsaved.update(mine)
    tree_cache.save()
    path = _cache_file()
    assert path is not None
    assert set(orjson.loads(path.read_bytes())["trees"]) == {"a = 1", "b = 2"}


@pytest.mark.parametrize("damage", [b"\x00garbage", b"[1, 2]", b'{"trees": {"x = 1": {"k": "EQ"}}, "kinds": {}}',
                                    b'{"trees": {"x = 1": 7}, "kinds": {}}'])
def test_a_damaged_file_is_an_empty_cache(cache: Path, damage: bytes) -> None:
    path = _cache_file()
    assert path is not None
    path.parent.mkdir(parents=True)
    path.write_bytes(damage)
    assert compiler._compile_cached.__wrapped__("x = 1").evaluate({"x": 1}) is True
    tree_cache.save()
    assert orjson.loads(path.read_bytes())["trees"]["x = 1"]["k"] == "EQ"


def test_no_place_for_a_cache_is_no_cache(cache: Path) -> None:
    cache.parent.mkdir(exist_ok=True)
    cache.write_text("a file where the cache directory would be")
    assert compiler._compile_cached.__wrapped__("x = 2").evaluate({"x": 2}) is True
    tree_cache.save()  # does not raise
    assert cache.read_text().startswith("a file")


def test_switched_off_it_neither_reads_nor_writes(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tree_cache.SWITCH, "off")
    tree_cache.parse_node("x = 3")
    tree_cache.save()
    assert not cache.exists()


def test_another_format_makes_another_file(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _cache_file()
    monkeypatch.setattr(tree_cache, "FORMAT", tree_cache.FORMAT + 1)
    assert _cache_file() != first


PIPELINE = """version: 1
pipelines:
  - id: p
    steps:
      - filter: {id: f, where: "speed * 2 > 10 AND line IN ('55', '56')"}
      - transform: {id: t, ops: [{set: {fast: "speed > 12", day: "substring(ts, 1, 10)"}}]}
"""


def _run(directory: Path, env: dict[str, str]) -> tuple[str, bool]:
    """Output of ``edgewise run``, and whether the run imported sqlglot or PyYAML (``config/document_cache.py``)."""
    probe = ("import sys, runpy; sys.argv = ['edgewise', 'run', 'p.yaml', 'in.ndjson', '-q']\n"
             "try:\n    runpy.run_module('edgewise', run_name='__main__')\nexcept SystemExit: pass\n"
             "sys.stderr.write('SQLGLOT=' + str('sqlglot' in sys.modules or 'yaml' in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=directory, env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert "SQLGLOT=" in done.stderr, done.stderr
    return done.stdout, done.stderr.endswith("True")


def test_a_second_run_imports_neither_parser_and_gives_the_same_output(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(PIPELINE)
    (tmp_path / "in.ndjson").write_text('{"speed": 7, "line": "55", "ts": "2024-05-01 10:00:00"}\n'
                                        '{"speed": 3, "line": "55", "ts": "2024-05-01 10:00:01"}\n'
                                        '{"speed": "13", "line": "56"}\n')
    env = {**os.environ, "EDGEWISE_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT / "src")}
    env.pop(tree_cache.SWITCH, None)
    first, parsed_first = _run(tmp_path, env)
    second, parsed_second = _run(tmp_path, env)
    uncached, parsed_uncached = _run(tmp_path, {**env, tree_cache.SWITCH: "off"})
    assert (parsed_first, parsed_second, parsed_uncached) == (True, False, True)
    assert first == second == uncached
    rows = [orjson.loads(line) for line in first.splitlines()]
    assert [(e["fast"], e["day"]) for e in rows] == [(False, "2024-05-01"), (True, None)]
