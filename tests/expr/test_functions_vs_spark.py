"""Every documented function against values computed by real Spark 4 SQL (tests/data/spark_expected.json,
made by tools/spark_expected.py). The local engine must give the same value, or raise the same error class."""

from __future__ import annotations

import json
import re

import pytest

from edgewise.errors import EvalError
from edgewise.expr.compiler import compile_expression
from edgewise.expr.functions import FUNCTIONS
from tests.conftest import ROOT
from tests.expr.spark_compare import encode, same

DATA = json.loads((ROOT / "tests" / "data" / "spark_expected.json").read_text(encoding="utf-8"))
CASES = DATA["cases"]


def test_expectations_come_from_spark_4() -> None:
    assert DATA["spark"].startswith("4.")
    listed = [line.strip() for line in (ROOT / "tests" / "data" / "function_cases.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert [c["expr"] for c in CASES] == listed, "spark_expected.json is stale: run `make spark-expected`"


@pytest.mark.parametrize("case", CASES, ids=[c["expr"] for c in CASES])
def test_local_engine_agrees_with_spark(case: dict[str, object]) -> None:
    expr = compile_expression(str(case["expr"]))
    if "error" in case:
        with pytest.raises(EvalError) as info:
            expr({})
        # Spark sometimes adds a sub-class (INVALID_PARAMETER_VALUE.PATTERN); the main class must agree
        assert info.value.error_class.split(".")[0] == str(case["error"]).split(".")[0]
    else:
        assert same(case["value"], encode(expr({}))), f"spark: {case['value']}, local: {encode(expr({}))}"


def test_every_function_is_checked_against_spark() -> None:
    called = set()
    for case in CASES:
        called.update(m.lower() for m in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", str(case["expr"])))
    missing = sorted(set(FUNCTIONS) - called)
    assert not missing, f"functions without a Spark-checked case: {missing}"


@pytest.mark.parametrize("fn", ["upper", "lower", "length", "md5", "abs", "size", "hour", "sha2"])
def test_null_in_null_out(fn: str) -> None:
    spec = FUNCTIONS[fn]
    args = ", ".join(["NULL"] * spec.min_args)
    assert compile_expression(f"{fn}({args})")({}) is None
