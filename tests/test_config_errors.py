"""`edgewise validate` on broken files: each problem is located (file, line, field path) and explained."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgewise.cli import main
from edgewise.config import load_text_plan
from edgewise.errors import ConfigError

GOOD = """\
version: 1
pipelines:
  - id: p
    steps:
      - filter: {id: f, where: "x > 1"}
"""

CASES = {
    "yaml_syntax": ("version: 1\npipelines:\n  - id: p\n    steps: [\n", r"pipeline.yaml:\d+:\d+: invalid YAML"),
    "unknown_step": (GOOD.replace("filter:", "filtre:"),
                     r"pipeline.yaml:5:\d+: pipelines\[0\].steps\[0\].filtre: unknown step type 'filtre'; "
                     r"expected one of: aggregate, annotate, complete"),
    "missing_id": (GOOD.replace("{id: f, ", "{"),
                   r"pipeline.yaml:5:\d+: pipelines\[0\].steps\[0\].filter.id: missing required field 'id'"),
    "duplicate_ids": (GOOD + "      - annotate: {id: f, set: {y: '1'}}\n",
                      r"pipeline.yaml:6:\d+: pipelines\[0\].steps\[1\].annotate.id: duplicate id 'f'"),
    "unknown_sink": (GOOD + "    to: [nowhere]\n",
                     r"pipeline.yaml:6:\d+: pipelines\[0\].to\[0\]: `to` names 'nowhere' is not a sink id"),
    "bad_expression": (GOOD.replace("x > 1", "x >"),
                       r"pipeline.yaml:5:\d+: pipelines\[0\].steps\[0\].filter.where: the expression 'x >' "
                       r"does not parse"),
    "unknown_function": (GOOD.replace("x > 1", "lenght(x) > 1"),
                         r"filter.where: unknown function lenght\(\); did you mean length\(\)\?"),
    "wrong_arity": (GOOD.replace("x > 1", "upper(x, x) = 'A'"), r"filter.where: upper\(\) takes 1 argument"),
    "unknown_field": (GOOD.replace("{id: f, ", "{id: f, wher: 1, "),
                      r"filter.wher: unknown field 'wher'; expected one of: id, when, retry, on_error, where"),
    "unknown_source_field": (GOOD + "sources: [{id: s, type: file, path: x, bogus: 1}]\n",
                             r"sources\[0\].bogus: unknown field 'bogus'; expected one of: id, type, schema, "
                             r"idle_timeout"),  # a field's key as a file writes it (its alias), not its Python name
    "bad_version": (GOOD.replace("version: 1", "version: 2"), r"pipeline.yaml:1:\d+: version: expected 1, found 2"),
    "dead_letter_sink": (GOOD.replace("x > 1\"}", "x > 1\", on_error: dlq}"),
                         r"filter.on_error: on_error must be 'fail', 'skip' or a sink id; 'dlq' is not a sink id"),
    "step_not_a_map": (GOOD.replace("- filter: {id: f, where: \"x > 1\"}", "- filter"),
                       r"steps\[0\]: a step is a map with exactly one key"),
    "duplicate_key": (GOOD + "version: 1\n", r"duplicate key 'version'"),
    # issue 13: types the text decides are checked at load time; parser internals never reach the user
    "non_boolean_filter": (GOOD.replace("x > 1", "temp + 1"),
                           r"pipeline.yaml:5:\d+: pipelines\[0\].steps\[0\].filter.where: a condition must be "
                           r"BOOLEAN, but 'temp \+ 1' is NUMERIC"),
    "string_literal_condition": (GOOD.replace("{id: f, ", "{id: f, when: \"'yes'\", "),
                                 r"filter.when: a condition must be BOOLEAN, but \"'yes'\" is STRING"),
    "non_boolean_case_condition": (GOOD.replace("x > 1", "CASE WHEN x THEN true WHEN x * 2 THEN false END"),
                                   r"filter.where: a condition must be BOOLEAN, but 'x \* 2' in .* is NUMERIC"),
    "non_boolean_and_operand": (GOOD.replace("x > 1", "x > 1 AND 'a'"), r"filter.where: a condition must be "
                                r"BOOLEAN, but \"'a'\" in .* is STRING"),
    "arithmetic_with_text": (GOOD.replace("x > 1", "speed + 'fast' > 1"),
                             r"filter.where: \"speed \+ 'fast'\" in .*: the string 'fast' is not a number"),
    "incomplete_expression": (GOOD.replace("x > 1", "a >> "),
                              r"filter.where: the expression 'a >> ' does not parse: an operand is missing"),
    "unclosed_flow_mapping": (GOOD.replace('where: "x > 1"}', 'where: "x > 1"') + "      - filter: {id: g}\n",
                              r"pipeline.yaml:6:\d+: invalid YAML: .*the mapping opened at line 5, column \d+, "
                              r"is not closed"),
    # issue 16: an option that would do nothing is refused
    "drop_with_a_pattern": (GOOD.replace('- filter: {id: f, where: "x > 1"}',
                                         "- transform: {id: t, ops: [{drop: ['debug_*']}]}"),
                            r"pipeline.yaml:5:\d+: pipelines\[0\].steps\[0\].transform.ops\[0\].drop.*'debug_\*' "
                            r"looks like a pattern, but drop takes field paths .*use drop_keys"),
    "drop_keys_bad_regex": (GOOD.replace('- filter: {id: f, where: "x > 1"}',
                                         "- transform: {id: t, ops: [{drop_keys: '(unclosed'}]}"),
                            r"transform.ops\[0\].drop_keys.*'\(unclosed' is not a valid regular expression"),
    "unknown_sink_type": (GOOD + "sinks:\n  - {id: s, type: kafka}\n",
                          r"sinks\[0\].type: unknown sink type 'kafka'; expected one of: edgewise, file, http, live, "
                          r"mqtt, nats, parquet, postgres, redis, sqlite, stdout"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_validate_prints_a_located_message(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text, pattern = CASES[name]
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "sqlglot" not in err and "<class" not in err
    import re

    assert re.search(pattern, err), err


@pytest.mark.parametrize("text", ["x > 1", "x", "coalesce(flag, false)", "if(x > 1, a, b) = 'a'",
                                  "CASE WHEN x > 1 THEN true ELSE y END", "x + '1.5' > 2", "NOT (x IS NULL)",
                                  "array_contains(tags, 'a') OR startswith(name, 'b')",
                                  "CASE kind WHEN 'push' THEN true WHEN 'x' THEN y END"])
def test_conditions_whose_type_depends_on_data_are_accepted(text: str) -> None:
    load_text_plan(GOOD.replace("x > 1", text.replace('"', '\\"')))


def test_several_problems_are_reported_together() -> None:
    text = GOOD + "      - annotate: {set: {y: 'nope('}}\n    to: [x]\n"
    with pytest.raises(ConfigError) as info:
        load_text_plan(text, "p.yaml")
    rendered = info.value.render()
    assert "missing required field 'id'" in rendered
    assert "does not parse" in rendered


def test_valid_file_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD)
    assert main(["validate", str(path)]) == 0
    assert "ok (1 pipeline, 1 step, 0 sources, 0 sinks)" in capsys.readouterr().out


def test_json_pipeline_files_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"version": 1, "pipelines": [{"id": "p", "steps": [{"filter": {"id": "f", "where": "x"}}]}]}')
    assert main(["validate", str(path)]) == 0


def test_schema_lists_every_plugin(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    steps = schema["$defs"]["PipelineConfig"]["properties"]["steps"]["items"]["oneOf"]
    assert {next(iter(s["properties"])) for s in steps} >= {"filter", "gate", "annotate", "transform", "lookup",
                                                              "tee", "spawn"}
    assert {d["$ref"].rsplit("/", 1)[1] for d in schema["properties"]["sinks"]["items"]["oneOf"]} >= {
        "FileSinkConfig", "HttpSinkConfig", "StdoutConfig"}


def test_a_duration_needs_a_unit_except_zero() -> None:
    """`tumbling: 30` could be seconds, minutes or milliseconds: refused with the spellings it may have meant."""
    with pytest.raises(ConfigError, match=r"tumbling: .*a duration needs a unit: '30s', '30m' or '30ms'"):
        load_text_plan("version: 1\npipelines:\n  - id: p\n    steps:\n"
                       "      - window: {id: w, key: [k], tumbling: 30, aggs: {n: count()}}\n")
    plan = load_text_plan("version: 1\npipelines:\n  - id: p\n    steps:\n"
                          "      - window: {id: w, key: [k], tumbling: 30s, watermark: 0, aggs: {n: count()}}\n")
    assert plan.pipelines[0].steps[0].config.watermark == 0


def test_the_default_retries_wait_milliseconds_not_days() -> None:
    """The defaults built in code went through the duration parser, which took 200_000 (meant as µs) for seconds:
    a sink that failed once waited 55 hours before its second try."""
    from edgewise.config.models import SinkConfig
    from edgewise.replay import PUSHBACK_RETRY

    retry = SinkConfig(id="s", type="stdout").retry
    assert (retry.attempts, retry.backoff, retry.max_backoff) == (5, 200_000, 10_000_000)
    assert (PUSHBACK_RETRY.backoff, PUSHBACK_RETRY.max_backoff) == (100_000, 2_000_000)
