"""``edgewise import-binge``: every example configuration of the agglo repository converts into a pipeline file
that validates, and agglo's own test pipeline, converted, gives what agglo's ``TestPipelinesBasic`` expects
(tests/data/agglo/SOURCE.md)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import orjson
import pytest

from edgewise.binge import convert
from edgewise.config import load_text_plan
from tests.test_cli import edgewise

AGGLO = Path(__file__).parent / "data" / "agglo"
EXAMPLES = sorted(p.name for p in AGGLO.glob("*.json"))

PIPELINE_TEST_MAPS_ONE = [  # agglo's test.PipelineTestMapsOne(): commits to a code repository, then deployments
    {"author": "kmgreen2", "parent": "null", "hash": "abcd", "body": "first commit"},
    {"author": "kmgreen2", "parent": "abcd", "hash": "deff", "body": "second commit"},
    {"author": "foobar", "parent": "deff", "hash": "beef", "body": "third commit"},
    {"author": "foobar", "parent": "beef", "hash": "f00d", "body": "fourth commit"},
    {"user": "deploybot", "githash": "abcd"},
    {"user": "deploybot", "githash": "beef"},
]


LEFT_OUT = {
    "entwine-binge-a.json": ["AnnotateBinge: annotation created = derived:currentTime"],
    "entwine-binge-b.json": ["AnnotateBinge: annotation created = derived:currentTime",
                             "PopLastEntwineOutput: TransformPopTail of internal:entwine:output"],
    "single-entwine-news.json": ["PopLastEntwineOutput: TransformPopTail of internal:entwine:output"],
}
"""What each configuration holds that edgewise has no form for, read off the files by hand: an annotation of the
current time (edgewise expressions are deterministic) and a pop of binge's own entwine output (edgewise's entwine
writes its receipt under `into`). Nothing else may be left out."""
WHOLE_PROCESSES_LEFT_OUT = {"entwine-binge-b.json": 1, "single-entwine-news.json": 1}
"""The processes that are nothing but such a part (``PopLastEntwineOutput``): no step comes of them."""


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_agglo_configuration_converts_into_a_file_that_validates(name: str, tmp_path: Path) -> None:
    done = edgewise("import-binge", str(AGGLO / name), "--output", str(tmp_path / "p.yaml"))
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr
    text = (tmp_path / "p.yaml").read_text()
    doc = orjson.loads((AGGLO / name).read_bytes())
    steps = sum(len(p["processes"]) for p in doc["pipelines"])
    assert text.count("\n      - ") >= steps - WHOLE_PROCESSES_LEFT_OUT.get(name, 0)
    warned = [line.removeprefix("edgewise: warning: ").split(" left out")[0].removesuffix(" is")
              for line in done.stderr.decode().splitlines() if "left out" in line]
    assert warned == LEFT_OUT.get(name, [])
    if b"not an executable file" not in done.stderr:  # a spawner's program that is not here: said, not hidden
        load_text_plan(text, file=str(tmp_path / "p.yaml"), base_dir=str(tmp_path))


def test_the_converted_agglo_test_pipeline_gives_what_agglos_test_expects(tmp_path: Path) -> None:
    """agglo's TestPipelinesBasic runs PipelineTestMapsOne through test/config/basic_pipeline.json and expects:
    commits annotated version-control = git-dev, deployments deploy = circleci-dev (user deploybot), and its
    spawner (printvals) to have written each deployment's githash, "abcd\\nbeef\\n". The spawner's program is
    agglo's Go binary; here a stand-in with the same contract (the event on stdin, the file and key as arguments)
    that prints an empty JSON object, which edgewise keeps under the step's `into`."""
    printvals = tmp_path / "printvals"
    printvals.write_text(f"#!{sys.executable}\n"
                         "import json, sys\n"
                         "event = json.load(sys.stdin)\n"
                         "with open(sys.argv[1], 'a') as out:\n"
                         "    out.write(str(event[sys.argv[2]]) + '\\n')\n"
                         "print('{}')\n")
    printvals.chmod(printvals.stat().st_mode | stat.S_IXUSR)
    out_file = tmp_path / "testPipelinesBasic"
    converted = convert(orjson.loads((AGGLO / "test-basic-pipeline.json").read_bytes()))
    text = converted.text.replace('"../../bin/printvals", "/tmp/testPipelinesBasic"',
                                  f'"{printvals}", "{out_file}"')
    assert str(printvals) in text
    (tmp_path / "p.yaml").write_text(text)
    (tmp_path / "events.ndjson").write_bytes(b"".join(orjson.dumps(m) + b"\n" for m in PIPELINE_TEST_MAPS_ONE))
    done = edgewise("run", str(tmp_path / "p.yaml"), str(tmp_path / "events.ndjson"))
    assert done.returncode == 0, done.stderr
    records = [orjson.loads(line) for line in done.stdout.splitlines()]
    # edgewise's complete reports the joins still open when the input ends (binge's would time out an hour later)
    timed_out = [r for r in records if set(r) == {"completion-hashjoin"}]
    assert sorted(r["completion-hashjoin"]["key"] for r in timed_out) == ["deff", "f00d"]
    assert {r["completion-hashjoin"]["status"] for r in timed_out} == {"timed_out"}
    out = [r for r in records if r not in timed_out]
    assert len(out) == 6
    for record in out:
        if "author" in record:
            assert record["version-control"] == "git-dev"
        if "deploy" in record:
            assert record["deploy"] == "circleci-dev" and record["user"] == "deploybot"
    assert sum("deploy" in r for r in out) == 2
    assert out_file.read_text() == "abcd\nbeef\n"
    # beyond agglo's test: the author histogram after each commit, and the hash join completing on abcd and beef
    assert [r["aggregate-author"]["histogram"] for r in out[:4]] == [
        {"kmgreen2": 1}, {"kmgreen2": 2}, {"kmgreen2": 2, "foobar": 1}, {"kmgreen2": 2, "foobar": 2}]
    assert [r["completion-hashjoin"]["status"] for r in out[4:]] == ["completed", "completed"]
    # the tee wrote the commits' copies, renamed as the binge transformer specs say
    copies = [orjson.loads(line) for f in sorted((tmp_path / "out" / "memKVStore").glob("*.ndjson"))
              for line in f.read_bytes().splitlines()]
    assert sorted((c["gitAuthor"], c["gitHash"]) for c in copies) == [
        ("foobar", "beef"), ("foobar", "f00d"), ("kmgreen2", "abcd"), ("kmgreen2", "deff")]


def test_conditions_become_sql_that_means_the_same() -> None:
    doc = {"pipelines": [{"name": "p", "processes": [{"name": "f"}]}], "processDefinitions": [
        {"continuation": {"name": "f", "condition": {"expression": {"logical": {
            "lhs": {"expression": {"comparator": {"lhs": {"variable": {"name": "a.b"}}, "rhs": {"numeric": 2.5},
                                                  "op": "GreaterThanOrEqual"}}},
            "rhs": {"expression": {"comparator": {"lhs": {"variable": {"name": "name"}},
                                                  "rhs": {"literal": "^x.*'"}, "op": "RegexMatch"}}},
            "op": "LogicalOr"}}}}}]}
    text = convert(doc).text
    assert "(a.b >= 2.5) OR (name RLIKE '^x.*\\\\'')" in text
    plan = load_text_plan(text)
    from edgewise.clock import FakeClock
    from edgewise.engine.local import LocalEngine
    from edgewise.testing import ListSink, ListSource

    sink = ListSink()
    LocalEngine(plan, clock=FakeClock(0), sinks={"<stdout>": sink}).run([ListSource(
        [{"a": {"b": 3}}, {"a": {"b": 1}, "name": "xy'"}, {"a": {"b": 1}, "name": "y"}], source_id="binge")])
    assert len(sink.records) == 2


def test_not_a_binge_file_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"hello": 1}')
    done = edgewise("import-binge", str(tmp_path / "x.json"))
    assert done.returncode == 2 and b"no `pipelines` list" in done.stderr and b"Traceback" not in done.stderr
    (tmp_path / "y.json").write_text("{")
    done = edgewise("import-binge", str(tmp_path / "y.json"))
    assert done.returncode == 2 and b"is not JSON" in done.stderr
    assert not os.path.exists(tmp_path / "out")


def _completion_then(condition_key: str, value: str) -> dict:
    return {"pipelines": [{"name": "p", "processes": [{"name": "cicd"}, {"name": "notify"}]}],
            "processDefinitions": [
                {"completer": {"name": "cicd", "completion": {"joinKeys": ["commit", "deploy"], "timeoutMs": 60000}}},
                {"annotator": {"name": "notify", "annotations": [{
                    "fieldKey": "done", "value": "yes", "condition": {"expression": {"comparator": {
                        "lhs": {"variable": {"name": condition_key}}, "rhs": {"literal": value}, "op": "Equal"}}}}]}}]}


def test_a_condition_on_a_completions_internal_key_reads_the_complete_steps_status() -> None:
    """binge annotated `internal:completion:<name>` = triggered / completed; edgewise's `complete` step writes the
    same words under its `into` as `status`: the condition reads that, and means the same (run on events)."""
    converted = convert(_completion_then("internal:completion:cicd", "completed"))
    assert "cicd.status" in converted.text and "internal" not in converted.text.split("pipelines:")[1]
    from edgewise.clock import FakeClock
    from edgewise.engine.local import LocalEngine
    from edgewise.testing import ListSink, ListSource

    sink = ListSink()
    LocalEngine(load_text_plan(converted.text), clock=FakeClock(0), sinks={"<stdout>": sink}).run([ListSource(
        [{"commit": "a1"}, {"deploy": "a1"}], source_id="binge")])
    assert [r.get("done") for r in sink.records] == [None, "yes"]  # triggered, then completed


@pytest.mark.parametrize("key", ["internal:tee:output", "internal:completion:elsewhere"])
def test_a_condition_on_another_internal_key_is_refused_by_name(key: str) -> None:
    converted = convert(_completion_then(key, "x"))
    assert any(f"notify: left out: its condition reads binge's internal key '{key}'" in w
               for w in converted.warnings), converted.warnings
    assert "notify" not in converted.text and "internal:" not in converted.text.split("pipelines:")[1]
    load_text_plan(converted.text)
