"""The conformance suite on Spark: every fixture of the local engine, the same command with ``--engine spark``.

Cases that cannot agree are reported ``unsupported`` with a reason; the list must be exactly the one documented
in docs/spark.md, so none is skipped silently and a case that starts agreeing is noticed."""

from __future__ import annotations

import re
from typing import Any

from edgewise.testing.fixtures import run_fixture_files
from tests.conftest import ROOT


def documented_unsupported() -> set[tuple[str, str]]:
    """(fixture file, case name) rows of the table in docs/spark.md."""
    text = (ROOT / "docs" / "spark.md").read_text(encoding="utf-8")
    section = text.split("<!-- conformance-unsupported -->")[1].split("<!-- /conformance-unsupported -->")[0]
    rows = set()
    for line in section.splitlines():
        m = re.match(r"\|\s*`([^`]+)`\s*\|\s*([^|]+?)\s*\|", line)
        if m and m.group(1) != "fixture":
            rows.add((m.group(1), m.group(2)))
    return rows


def test_every_conformance_fixture_agrees_on_spark(spark: Any) -> None:
    report = run_fixture_files([str(ROOT / "conformance")], engine="spark", spark=spark)
    assert len(report.results) >= 28
    failures = [f"{r.file} :: {r.name}\n{r.message}" for r in report.results if not r.ok and not r.unsupported]
    assert not failures, "\n\n".join(failures)
    unsupported = {(r.file.split("conformance/")[-1], r.name) for r in report.results if r.unsupported}
    assert unsupported == documented_unsupported(), (
        "the cases Spark cannot run differ from docs/spark.md:\n"
        f"  not documented: {sorted(unsupported - documented_unsupported())}\n"
        f"  documented but running: {sorted(documented_unsupported() - unsupported)}")
    assert report.passed >= 17
