"""The validated-config cache (``config/validated_cache.py``): a file's values loaded again give the configs that
validating them afresh gives, or are validated afresh; and a run that finds them builds no pydantic schema.

The oracle is the loader with the cache off (``EDGEWISE_LOAD_CACHE=off``): pydantic validating the same values.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from edgewise.config import load_document, validated_cache
from edgewise.config.models import RetryPolicy, SinkConfig
from edgewise.config.plan import Plan
from edgewise.config.yamlpos import load_text
from edgewise.errors import ConfigError
from edgewise.expr import tree_cache
from edgewise.replay import PUSHBACK_RETRY
from edgewise.sinks.stdout import StdoutConfig
from edgewise.sources.file import FileSourceConfig
from edgewise.sources.stdin import StdinConfig
from tests.conftest import ROOT
from tests.fuzz.generate import cases


@pytest.fixture
def cache(load_cache: Path) -> Path:
    return load_cache


def _kept(cache: Path) -> list[Path]:
    return sorted((cache / "configs").glob("*.pickle")) if (cache / "configs").exists() else []


def _configs(plan: Plan) -> list[Any]:
    """Every config of a plan: the top level's, each source's and sink's, each store's and each step's."""
    steps = [step.config for pipeline in plan.pipelines for step in pipeline.steps]
    return [plan.config, *plan.sources, *plan.sinks.values(), *plan.stores.values(), *steps]


def _same(cached: Plan, fresh: Plan) -> None:
    for got, expected in zip(_configs(cached), _configs(fresh), strict=True):
        assert type(got) is type(expected)
        assert got == expected
        assert got.model_fields_set == expected.model_fields_set
        assert got.model_dump(mode="json", by_alias=True) == expected.model_dump(mode="json", by_alias=True)
    assert cached.explain() == fresh.explain()


def _fresh(text: str, file: str, monkeypatch: pytest.MonkeyPatch) -> Plan:
    with monkeypatch.context() as m:
        m.setenv(tree_cache.SWITCH, "off")
        return load_document(load_text(text, file))


def _twice(text: str, file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Load ``text`` twice (the second from the cache where the first kept it); both equal a fresh load."""
    fresh = _fresh(text, file, monkeypatch)
    for _ in range(2):
        _same(load_document(load_text(text, file)), fresh)


def _pipeline_texts() -> list[tuple[str, str]]:
    """(text, file) of every pipeline in the repository: the pipeline files, and the test fixtures' pipelines."""
    found = []
    for path in sorted([*ROOT.glob("examples/**/*.yaml"), *ROOT.glob("conformance/**/*.yaml")]):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("version") == 1:
            found.append((path.read_text(encoding="utf-8"), str(path)))
        elif isinstance(data, dict) and isinstance(data.get("pipeline"), dict):
            found.append((yaml.safe_dump(data["pipeline"], sort_keys=False), str(path)))
    return found


def test_the_repositorys_pipelines_load_from_the_cache_as_they_validate(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pipelines = _pipeline_texts()
    assert len(pipelines) >= 20
    for text, file in pipelines:
        _twice(text, file, monkeypatch)
    assert len(_kept(cache)) == len({str(yaml.safe_load(text)) for text, _ in pipelines})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(case=cases())
def test_generated_pipelines_load_from_the_cache_as_they_validate(
        case: Any, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = case.pipeline_text()
    _twice(text, str(cache / "pipeline.yaml"), monkeypatch)
    assert validated_cache.cached(yaml.safe_load(text)) is not None


def test_values_in_another_order_are_other_values(cache: Path) -> None:
    """An annotate's assignments run in order: the same keys in another order are kept apart, never mixed up."""
    def text(assignments: str) -> str:
        return f"version: 1\npipelines:\n  - id: p\n    steps:\n      - annotate: {{id: a, set: {{{assignments}}}}}\n"

    for _ in range(2):
        one = load_document(load_text(text("x: '1', y: x"), "one.yaml"))
        other = load_document(load_text(text("y: x, x: '1'"), "other.yaml"))
        assert list(one.pipelines[0].steps[0].config.set) == ["x", "y"]
        assert list(other.pipelines[0].steps[0].config.set) == ["y", "x"]
    assert len(_kept(cache)) == 2


def test_invalid_values_are_never_kept(cache: Path) -> None:
    text = "version: 1\npipelines:\n  - id: p\n    steps:\n      - filter: {id: f, where: 'a +'}\n"
    for _ in range(2):
        with pytest.raises(ConfigError, match="where"):
            load_document(load_text(text, "bad.yaml"))
    assert _kept(cache) == []


def test_references_are_checked_on_every_load(cache: Path) -> None:
    """What is kept is what the models validated; the checks across configs (ids, references) run every time."""
    text = ("version: 1\npipelines:\n  - id: p\n    steps:\n      - filter: {id: f, where: 'a = 1'}\n"
            "    to: [nowhere]\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match="not a sink id"):
            load_document(load_text(text, "refs.yaml"))


def _planted(data: Any, cache: Path, mode: int) -> str:
    """A kept file for ``data`` whose top-level config is named 'planted', with file mode ``mode``."""
    load_document(load_text(yaml.safe_dump(data), "p.yaml"))
    [kept] = _kept(cache)
    found = pickle.loads(kept.read_bytes())
    kept.write_bytes(pickle.dumps(found._replace(top=found.top.model_copy(update={"name": "planted"}))))
    kept.chmod(mode)
    return str(load_document(load_text(yaml.safe_dump(data), "p.yaml")).config.name)


DATA = {"version": 1, "pipelines": [{"id": "p", "steps": [{"filter": {"id": "f", "where": "a = 1"}}]}]}


def test_a_kept_file_is_what_a_load_reads(cache: Path) -> None:
    """The guard below is what keeps a planted file out: the same file, this user's alone, is read."""
    assert _planted(DATA, cache, 0o600) == "planted"


def test_a_file_others_can_write_is_never_read(cache: Path) -> None:
    assert _planted(DATA, cache, 0o666) != "planted"


def test_a_link_is_never_followed(cache: Path, tmp_path: Path) -> None:
    """A link in the cache's place, to a file the user owns that holds a planted pickle, is not read."""
    assert _planted(DATA, cache, 0o600) == "planted"
    [kept] = _kept(cache)
    target = tmp_path / "elsewhere.pickle"
    kept.rename(target)
    kept.symlink_to(target)
    assert str(load_document(load_text(yaml.safe_dump(DATA), "p.yaml")).config.name) != "planted"


def test_a_damaged_file_is_validated_again(cache: Path) -> None:
    text = yaml.safe_dump(DATA)
    load_document(load_text(text, "p.yaml"))
    for damage in (b"", b"not a pickle", pickle.dumps({"top": 1})):
        for kept in _kept(cache):
            kept.write_bytes(damage)
        assert load_document(load_text(text, "p.yaml")).pipelines[0].steps[0].config.where == "a = 1"


def test_the_switch_turns_it_off(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tree_cache.SWITCH, "off")
    load_document(load_text(yaml.safe_dump(DATA), "p.yaml"))
    assert _kept(cache) == []


def test_configs_of_other_plugins_are_not_kept(cache: Path) -> None:
    class OtherConfig(SinkConfig):
        type: str = "other"

    validated = validated_cache.Validated(None, [], [OtherConfig(id="o")], {}, [])
    validated_cache.keep({"version": 1}, validated)
    assert _kept(cache) == []


def test_an_edited_source_file_gives_a_new_key(tmp_path: Path) -> None:
    module = tmp_path / "pkg" / "mod.py"
    module.parent.mkdir()
    module.write_text("A = 1\n")
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "mod.py").write_text("")  # bytecode folders are not sources
    before = validated_cache._source_stamps(str(tmp_path))
    assert len(before) == 1
    module.write_text("A = 22\n")
    os.utime(module, ns=(10**18, 10**18))
    assert validated_cache._source_stamps(str(tmp_path)) != before


@pytest.mark.parametrize(("made", "validated"), [
    (lambda: StdoutConfig.model_construct(id="stdout"), lambda: StdoutConfig(id="stdout")),
    (lambda: StdinConfig.model_construct(id="stdin"), lambda: StdinConfig(id="stdin")),
    (lambda: FileSourceConfig.model_construct(id="input", path="in.ndjson"),
     lambda: FileSourceConfig(id="input", path="in.ndjson")),
    (lambda: SinkConfig.model_construct(id="s", type="stdout").retry,  # the default its factory makes
     lambda: RetryPolicy(attempts=5, backoff="200ms", max_backoff="10s")),
    (lambda: PUSHBACK_RETRY, lambda: RetryPolicy(attempts=20, backoff="100ms", max_backoff="2s")),
], ids=["stdout", "stdin", "file", "sink-retry", "replay-pushback"])
def test_configs_made_in_code_are_what_validating_their_values_gives(made: Any, validated: Any) -> None:
    got, expected = made(), validated()
    assert got == expected
    assert got.model_dump() == expected.model_dump()


def test_a_run_whose_configs_are_kept_builds_no_schema(tmp_path: Path) -> None:
    """In a fresh interpreter, the second run of a file: no validator was made (pydantic's plugin loader, which
    its first validator imports, is not loaded), and the output is the first run's."""
    (tmp_path / "one.ndjson").write_text('{"a": 1}\n{"a": 2}\n')
    (tmp_path / "pipeline.yaml").write_text(
        "version: 1\nsources:\n  - {id: in, type: file, path: one.ndjson}\npipelines:\n  - id: p\n    steps:\n"
        "      - filter: {id: f, where: \"a = 1\"}\n")
    probe = ("import sys\nfrom edgewise.cli import main\ncode = main(['run', '--quiet', 'pipeline.yaml'])\n"
             "print('validator made' if 'pydantic.plugin._loader' in sys.modules else 'no validator', "
             "file=sys.stderr)\nsys.exit(code)\n")
    env = {**os.environ, "EDGEWISE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop(tree_cache.SWITCH, None)
    runs = [subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                           check=True) for _ in range(2)]
    assert runs[0].stderr.strip() == "validator made"  # the probe can tell: the first run validates
    assert runs[1].stderr.strip() == "no validator"
    assert runs[0].stdout == runs[1].stdout == '{"a":1}\n'
