"""Real data: the Octokit example webhook payloads (push, status, check_run, check_suite, deployment,
deployment_status) joined by commit SHA. The expected completions and timeouts come from a direct walk over the
same deliveries; tag deletions (all-zero SHA) must not open a completion."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from edgewise.config import load
from edgewise.testing import pause, run
from tests.conftest import ROOT

DATA = ROOT / "data" / "github-webhooks-octokit"
EVENTS = ("push", "status", "check_run", "check_suite", "deployment", "deployment_status")
ZERO = "0" * 40


def deliveries() -> list[dict[str, Any]]:
    out = []
    for event in EVENTS:
        for path in sorted((DATA / event).glob("*.json")):
            out.append({"event": event, "body": json.loads(path.read_text())})
    return out


def commit_of(delivery: dict[str, Any]) -> str | None:
    """Written independently of the pipeline's expression: where each event type names its commit."""
    body, event = delivery["body"], delivery["event"]
    sha = {
        "push": (body.get("head_commit") or {}).get("id") or body.get("after"),
        "status": body.get("sha"),
        "check_run": body.get("check_run", {}).get("head_sha"),
        "check_suite": body.get("check_suite", {}).get("head_sha"),
        "deployment": body.get("deployment", {}).get("sha"),
        "deployment_status": body.get("deployment", {}).get("sha"),
    }[event]
    return None if sha in (None, ZERO) else sha


def expected_outcomes(items: list[dict[str, Any]], parts: dict[str, set[str]]) -> Counter[tuple[str, str, str]]:
    """(sha, status, parts seen) of every completion, walking the deliveries in order: all parts seen ->
    completed (and the SHA starts afresh), anything still open at the end -> timed_out."""
    open_parts: dict[str, set[str]] = {}
    outcomes: Counter[tuple[str, str, str]] = Counter()
    for d in items:
        sha = commit_of(d)
        matched = {name for name, events in parts.items() if d["event"] in events}
        if sha is None or not matched:
            continue
        seen = open_parts.setdefault(sha, set()) | matched
        if seen == set(parts):
            outcomes[(sha, "completed", ",".join(sorted(seen)))] += 1
            del open_parts[sha]
        else:
            open_parts[sha] = seen
    for sha, seen in open_parts.items():
        outcomes[(sha, "timed_out", ",".join(sorted(seen)))] += 1
    return outcomes


CHECKS = {"status", "check_run", "check_suite"}


def test_completions_and_timeouts_are_the_ones_the_data_implies() -> None:
    items = deliveries()
    assert sum(1 for d in items if d["event"] == "push" and d["body"].get("after") == ZERO) >= 3
    plan = load(str(ROOT / "examples" / "github" / "pipeline.yaml"))
    result = run(plan, [*items, pause("2h")])  # no delivery for two hours: the open completions time out
    cases = {
        "push-to-ci": ("ci", {"pushed": {"push"}, "checked": CHECKS}),
        "ci-to-deploy": ("shipping", {"checked": CHECKS, "deployed": {"deployment", "deployment_status"}}),
    }
    for pipeline, (field, parts) in cases.items():
        got = Counter((r[field]["key"], r[field]["status"], ",".join(sorted(r[field]["seen"])))
                      for r in result.outputs[pipeline])
        expected = expected_outcomes(items, parts)
        assert got == expected, pipeline
        assert all(sha != ZERO for sha, _, _ in got)
    # the data implies: commit 6113728 pushed then checked; f95f852 checked then deployed
    assert ("6113728f27ae82c7b1a177c8d03f9e96e0adf246", "completed", "checked,pushed") in expected_outcomes(
        items, cases["push-to-ci"][1])
    assert ("f95f852bd8fca8fcc58a9a2d6c842781e32a215e", "completed", "checked,deployed") in expected_outcomes(
        items, cases["ci-to-deploy"][1])
    timed_out = [r for r in result.outputs["push-to-ci"] if r["ci"]["status"] == "timed_out"]
    assert timed_out and all(set(r) == {"ci"} for r in timed_out)  # a record of its own, fired by the pause


def test_tag_deletions_pass_through_without_a_completion() -> None:
    plan = load(str(ROOT / "examples" / "github" / "pipeline.yaml"))
    deletions = [d for d in deliveries() if d["event"] == "push" and d["body"].get("after") == ZERO]
    result = run(plan, deletions)
    assert result.outputs == {"push-to-ci": [], "ci-to-deploy": []}  # nothing opened, so nothing settles
    assert result.counters.get("ci-reported.failed", 0) == 0
