"""The conformance suite on Spark: every fixture of the local engine, the same command with ``--engine spark``.

Cases that cannot agree are reported ``unsupported`` with a reason; the list must be exactly the one documented
in docs/spark.md, so none is skipped silently and a case that starts agreeing is noticed. One test per fixture
file, so that parallel test workers (pytest-xdist) share the suite's longest Spark work."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from edgewise.testing.fixtures import find_fixture_files, run_fixture_files
from tests.conftest import ROOT

CONFORMANCE = ROOT / "conformance"
FIXTURE_FILES = sorted(Path(p).relative_to(CONFORMANCE).as_posix() for p in find_fixture_files([str(CONFORMANCE)]))


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


def test_the_documented_unsupported_cases_name_existing_fixture_files() -> None:
    """A row for a file that is gone would otherwise never be compared with a run."""
    assert len(FIXTURE_FILES) >= 16
    assert {file for file, _ in documented_unsupported()} <= set(FIXTURE_FILES)


@pytest.mark.parametrize("fixture_file", FIXTURE_FILES)
def test_every_conformance_fixture_agrees_on_spark(spark: Any, fixture_file: str) -> None:
    report = run_fixture_files([str(CONFORMANCE / fixture_file)], engine="spark", spark=spark)
    assert report.results, f"{fixture_file} has no cases"
    failures = [f"{r.file} :: {r.name}\n{r.message}" for r in report.results if not r.ok and not r.unsupported]
    assert not failures, "\n\n".join(failures)
    unsupported = {(fixture_file, r.name) for r in report.results if r.unsupported}
    documented = {row for row in documented_unsupported() if row[0] == fixture_file}
    assert unsupported == documented, (
        "the cases Spark cannot run differ from docs/spark.md:\n"
        f"  not documented: {sorted(unsupported - documented)}\n"
        f"  documented but running: {sorted(documented - unsupported)}")
