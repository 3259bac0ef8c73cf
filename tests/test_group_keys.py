"""Keys of the stateful steps compare as SQL's GROUP BY compares values (``steps/group_keys.py``), checked on the
local engine against an oracle of exact values (``fractions``) over generated keys; the Spark side is in
``tests/spark/test_messy_input.py::test_keys_match_by_value_*``."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from edgewise.steps.group_keys import group_key, match_text, plain

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([-0.0, 0.0, 2.0, 2.5, 1e2]),
                    st.sampled_from([Decimal("2.00"), Decimal("2.5"), Decimal("-0")]),
                    st.sampled_from(["2", "a", "true"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=2), max_leaves=4)


def _oracle(value: Any) -> Any:
    if isinstance(value, list):
        return ("list", tuple(_oracle(v) for v in value))
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    return ("number", Fraction(value))


@settings(max_examples=300, derandomize=True, database=None)
@given(VALUES, VALUES)
def test_keys_are_equal_exactly_when_sql_groups_them_together(a: Any, b: Any) -> None:
    same = _oracle(a) == _oracle(b)
    assert (match_text(a) == match_text(b)) == same
    assert (group_key((a,)) == group_key((b,))) == same
    if same:
        assert hash(group_key((a,))) == hash(group_key((b,)))
    assert plain(group_key((a,))) == (a,)


def _run(step: str, events: list[dict[str, Any]]) -> tuple[Any, list[dict[str, Any]]]:
    """One step (a YAML flow mapping) over ``events`` on the local engine: (the plan, what it printed)."""
    from edgewise.clock import FakeClock
    from edgewise.config import load_text_plan
    from edgewise.engine.local import LocalEngine
    from edgewise.testing import ListSink, ListSource

    text = f"""
version: 1
event_time: timestamp_seconds(t)
sources: [{{id: test, type: stdin}}]
pipelines:
  - id: p
    steps:
      - {step}
"""
    plan = load_text_plan(text, file="pipeline.yaml", base_dir=".")
    sink = ListSink()
    LocalEngine(plan, clock=FakeClock(0), sinks={"<stdout>": sink}).run([ListSource(events)])
    return plan, sink.records


def test_a_window_keeps_a_boolean_and_a_list_key_apart_from_numbers() -> None:
    """``True == 1`` in Python, and a list was not hashable (a window or an aggregate keyed on one crashed)."""
    events = [{"t": 1, "x": True}, {"t": 2, "x": 1}, {"t": 3, "x": 1.0}, {"t": 4, "x": [1]}, {"t": 5, "x": [1.0]},
              {"t": 6, "x": "1"}, {"t": 7, "x": True}]
    _, records = _run("window: {id: w, key: [x], tumbling: 10s, aggs: {n: count()}}", events)
    assert sorted((repr(r["x"]), r["n"]) for r in records) == [("'1'", 1), ("1", 2), ("True", 2), ("[1]", 2)]


def test_queried_state_finds_text_and_number_keys() -> None:
    """`/v1/state/<step>/<key>`: a key in a URL is text; a dedupe or complete step finds it whether the events held
    it as text or as the number it reads as (the daemon's GitHub example queries completions by commit sha)."""
    plan, _ = _run("dedupe: {id: d, key: k, within: 1h}",
                   [{"t": 1, "k": "6113728f"}, {"t": 2, "k": 42}, {"t": 3, "k": 2.0}])
    step = plan.pipelines[0].steps[0]
    assert step.lookup("6113728f") == 1_000_000 and step.lookup("42") == 2_000_000 and step.lookup("2") == 3_000_000
    assert step.lookup("nothing") is None
