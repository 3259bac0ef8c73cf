"""The differential pipeline fuzzer in the test suite: whole generated pipelines over messy generated events,
checked by the local oracles (``oracles.py``: a crashed run against an uninterrupted one, a batch computation;
``reference.py``: the reference interpreter),
with a fixed seed and a small budget; the Spark oracle is in ``tests/spark/test_pipeline_fuzz.py``. ``make fuzz``
runs the same properties as a long soak (``soak.py``); every failure it ever found is kept in ``cases/`` and
replayed here.

``EDGEWISE_FUZZ_EXAMPLES`` scales the budget (default: CI's)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.generate import Case, batch_cases, cases, partitioned_cases
from tests.fuzz.oracles import (
    batch_computation,
    batch_oracle_applies,
    crashed_vs_uninterrupted,
    partitioned_vs_one,
    split_vs_whole,
)
from tests.fuzz.reference import reference_applies, reference_cases, reference_vs_engines

CASES = Path(__file__).parent / "cases"
SCALE = float(os.environ.get("EDGEWISE_FUZZ_EXAMPLES", "1"))


def budget(n: int) -> Any:
    return settings(max_examples=max(1, int(n * SCALE)), derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def known_defects() -> dict[str, str]:
    """Kept cases of defects not fixed yet (``known:`` says why): the Spark replay expects them to fail, strictly."""
    out = {}
    for path in sorted(CASES.glob("*.yaml")):
        known = yaml.safe_load(path.read_text(encoding="utf-8")).get("known")
        if known:
            out[path.name] = str(known)
    return out


def split_at(name: str) -> int | None:
    """Where the split oracle cut a kept case's pipeline (``split_at``: a step's index, or auto: None)."""
    at = yaml.safe_load((CASES / name).read_text(encoding="utf-8")).get("split_at", "auto")
    return None if at == "auto" else int(at)


def kept_cases() -> list[tuple[str, Case, str]]:
    """(file name, case, oracle) of every failure the fuzzer found, kept as a fixture."""
    out = []
    for path in sorted(CASES.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        case = Case(doc["pipeline"]["pipelines"][0]["steps"], doc["events"],
                    [s["id"] for s in doc["pipeline"].get("sinks", [])], doc.get("envelopes", []),
                    doc.get("files", 1), doc.get("cuts", []), doc.get("micro_batches", False),
                    doc.get("equal_times", False), schema=doc["pipeline"]["sources"][0].get("schema", ""),
                    tables=doc.get("tables", {}), continuous=doc.get("continuous", False))
        out.append((path.name, case, doc.get("oracle", "all")))
    return out


@budget(80)
@given(case=cases(), crashes=st.lists(st.integers(0, 14), min_size=1, max_size=3),
       batch_size=st.sampled_from([1, 2, 5, 1024]), flaky=st.sampled_from([0, 2, 3]))
def test_a_crashed_run_equals_an_uninterrupted_one(case: Case, crashes: list[int], batch_size: int,
                                                   flaky: int) -> None:
    """Crashes, and sinks that fail every ``flaky``-th write (0: never), change nothing a run delivers."""
    assert not crashed_vs_uninterrupted(case, crashes, batch_size, flaky), case.pipeline_text()


@budget(80)
@given(case=st.one_of(partitioned_cases(), cases()), workers=st.sampled_from([2, 3]),
       entry_size=st.sampled_from([1, 2, 5, 1024]))
def test_partitioned_workers_give_what_one_worker_gives(case: Case, workers: int, entry_size: int) -> None:
    """``serve --workers N`` with stateful steps: each worker takes its partitions' keys and watches the others'
    event times; together they give the records, ids, late events, dead letters and failures one worker gives."""
    problems = partitioned_vs_one(case, workers, entry_size)
    assert not problems, f"{problems}\n{case.pipeline_text()}\n{case.events}"


@budget(100)
@given(case=cases(), data=st.data())
def test_an_edge_then_its_hub_equal_the_whole_pipeline(case: Case, data: st.DataObject) -> None:
    """Issue 38: split at a random step (or ``placement: auto``), the edge's part into a spool link, then the hub's
    part from it, give what the whole pipeline gives (``oracles.split_vs_whole``)."""
    at = data.draw(st.one_of(st.none(), st.integers(0, len(case.steps) - 1)), label="split before step")
    problems = split_vs_whole(case, at)
    assert not problems, f"{problems}\n{case.pipeline_text()}\n{case.events}"


@budget(200)
@given(case=batch_cases())
def test_windows_and_aggregates_equal_a_batch_computation(case: Case) -> None:
    problems = batch_computation(case)
    assert not problems, f"{problems}\n{case.pipeline_text()}\n{case.events}"


@pytest.mark.parametrize(("name", "case", "oracle"), kept_cases(), ids=[c[0] for c in kept_cases()])
def test_kept_failures_stay_fixed_locally(name: str, case: Case, oracle: str) -> None:
    """The local oracles on every kept case (``tests/spark/test_pipeline_fuzz.py`` replays them on Spark)."""
    assert not crashed_vs_uninterrupted(case, [1, 3], 2), name
    if oracle in ("split", "spark-split"):
        assert not split_vs_whole(case, split_at(name)), name
    if batch_oracle_applies(case):
        assert not batch_computation(case), name
    if reference_applies(case):
        assert not reference_vs_engines(case), name


@budget(150)
@given(case=reference_cases())
def test_the_local_engine_equals_the_reference_interpreter(case: Case) -> None:
    problems = reference_vs_engines(case)
    assert not problems, f"{problems}\n{case.pipeline_text()}\n{case.events}"


def test_every_function_can_be_drawn_and_the_soak_names_the_rare_ones() -> None:
    """The crash oracle's calls (``generate.function_calls``) reach every built-in function: called with fields
    (types unknown until an event comes), each loads. The soak's coverage line names the functions drawn fewer
    than the floor."""
    from edgewise.expr.compiler import compile_expression
    from edgewise.expr.functions import FUNCTIONS
    from tests.fuzz.generate import EDGE_ARGUMENTS, call_text
    from tests.fuzz.soak import FUNCTION_FLOOR, function_coverage

    assert "x" in EDGE_ARGUMENTS
    for name, spec in FUNCTIONS.items():
        compile_expression(call_text(name, spec.min_args, lambda i: "x"))
    drawn = Counter({name: FUNCTION_FLOOR for name in FUNCTIONS})
    drawn["upper"] = FUNCTION_FLOOR - 1
    line = function_coverage(drawn)
    assert line.startswith(f"function coverage: {len(FUNCTIONS) - 1} of {len(FUNCTIONS)} functions")
    assert line.endswith("; below the floor: upper")


def test_an_entwine_steps_receipts_and_timeline_equal_the_docs() -> None:
    """docs/entwine.md by hand where it can be: the filter leaves t=1, 3 and 4, which take positions 0, 1 and 2 in
    arrival order, each receipt naming the owner's key; the hashes are the reference's (``timeline_model``, the
    docs' format), and the timeline the engine wrote is read back entry by entry, signatures checked."""
    from tests.fuzz.reference import reference_outputs
    from tests.fuzz.timeline_model import OWNER_KEY, owner_pem, owner_public

    steps = [{"filter": {"id": "f", "where": "x <= 3.5"}},
             {"entwine": {"id": "e", "timeline": "timeline1", "key": OWNER_KEY, "fields": ["k", "x"], "into": "r"}}]
    events = [{"t": 1, "k": "a", "x": 1.5}, {"t": 2, "k": "b"}, {"t": 3, "k": "ä", "x": 1e-7}, {"t": 4, "x": -2}]
    case = Case(steps, events, envelopes=[2], files=2, tables={OWNER_KEY: owner_pem()})
    outputs = reference_outputs(case)
    assert [(r["t"], r["r"]["position"], r["r"]["timeline"]) for r in outputs[""]] == [
        (1, 0, owner_public()), (3, 1, owner_public()), (4, 2, owner_public())]
    assert [e["event"] for e in outputs["timeline:timeline1"]] == [
        "spool:part-1.ndjson:1", "up:2", "spool:part-2.ndjson:2"]
    assert not reference_vs_engines(case)
