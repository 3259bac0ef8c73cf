"""Config classes declared without pydantic (``declare.py``) and their pydantic mirrors (``config/mirror.py``).

The declared classes answer some questions without pydantic (a field's default for ``model_construct``, an
unpickled instance, equality); pydantic answers them for the mirror it builds from the same declaration. These
tests hold the two readings to each other over every config class edgewise has, and hold a run of values validated
before to its promise: it does not import pydantic at all.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic_core import PydanticUndefined

from edgewise.config import load, registry
from edgewise.config.mirror import as_mirror, declared, mirror
from edgewise.config.models import PipelineConfig, PipelineFileConfig, RetryPolicy, SpoolLinkConfig
from edgewise.declare import REQUIRED, Model, declared_fields
from edgewise.expr import tree_cache

ROOT = Path(__file__).resolve().parent.parent


def _config_classes() -> list[type[Model]]:
    from edgewise.state import STORE_CONFIGS

    found: list[type[Model]] = [PipelineFileConfig, PipelineConfig, RetryPolicy, SpoolLinkConfig,
                                *STORE_CONFIGS.values()]
    kinds: tuple[registry.Kind, ...] = ("steps", "sources", "sinks")
    for kind in kinds:
        for name in registry.names(kind):
            try:
                found.append(registry.resolve(kind, name).Config)
            except Exception:
                continue
    nested: list[type[Model]] = []
    for cls in found:  # the configs inside them too (a transform's operations, a completion's parts)
        for field in mirror(cls).model_fields.values():
            nested += [m.__edgewise_declared__ for m in _mirrors_in(field.annotation)]
    return list(dict.fromkeys(found + nested))


def _mirrors_in(annotation: Any) -> list[Any]:
    if isinstance(annotation, type) and hasattr(annotation, "__edgewise_declared__"):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) or () for m in _mirrors_in(arg)]


CLASSES = _config_classes()


def test_the_classes_cover_every_plugin() -> None:
    names = {cls.__name__ for cls in CLASSES}
    assert {"FilterConfig", "WindowConfig", "TransformOp", "FileSourceConfig", "HttpSinkConfig",
            "SqliteStoreConfig"} <= names
    assert len(CLASSES) >= 35


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_a_declared_class_reads_its_fields_and_defaults_as_pydantic_reads_its_mirror(cls: type[Model]) -> None:
    """``model_construct`` (no pydantic) fills defaults from ``declared_fields``; pydantic's mirror reads the same
    declaration: the same fields, in the same order, the same required ones and the same defaults."""
    ours = declared_fields(cls)
    theirs = mirror(cls).model_fields
    assert list(ours) == list(theirs)
    for name, spec in ours.items():
        field = theirs[name]
        assert (spec.default is REQUIRED and spec.default_factory is None) == field.is_required(), name
        if spec.default_factory is not None:
            assert field.default_factory is not None
            assert spec.default_factory() == field.default_factory()  # type: ignore[call-arg]
        elif spec.default is not REQUIRED:
            assert field.default is not PydanticUndefined and field.default == spec.default, name
    for name in vars(cls).get("__annotations__", {}):
        if name not in ours:  # a ClassVar: not a field of either
            assert name not in theirs


def _example_configs() -> list[tuple[str, Any]]:
    found = []
    for path in sorted([*ROOT.glob("examples/**/*.yaml"), *ROOT.glob("conformance/*.yaml")]):
        if path.name.endswith(".test.yaml"):
            continue
        plan = load(str(path))
        configs = [plan.config, *plan.sources, *plan.sinks.values(), *plan.stores.values(),
                   *(step.config for pipeline in plan.pipelines for step in pipeline.steps)]
        found += [(f"{path.name}:{getattr(config, 'id', type(config).__name__)}", config) for config in configs]
    return found


@pytest.fixture(scope="module")
def example_configs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, Any]]:
    os.environ["EDGEWISE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    try:
        return _example_configs()
    finally:
        del os.environ["EDGEWISE_CACHE_DIR"]


def test_every_example_config_survives_a_pickle_and_the_way_to_pydantic_and_back(
        example_configs: list[tuple[str, Any]]) -> None:
    assert len(example_configs) > 30
    for name, config in example_configs:
        restored = pickle.loads(pickle.dumps(config))
        assert type(restored) is type(config), name
        assert restored == config, name
        if not _unhashable(config):  # frozen, as pydantic's: hashable where its values are
            assert hash(restored) == hash(config), name
        assert restored.model_fields_set == config.model_fields_set, name
        assert restored.model_dump() == config.model_dump(), name
        assert declared(as_mirror(config)) == config, name


def _unhashable(config: Any) -> bool:
    try:
        hash(config)
    except TypeError:
        return True
    return False


def test_a_declared_config_is_frozen_and_compares_by_value() -> None:
    retry = RetryPolicy(attempts=2, backoff="1s")
    with pytest.raises(AttributeError, match="frozen"):
        retry.attempts = 3  # type: ignore[misc]
    assert retry == RetryPolicy(attempts=2, backoff="1s", max_backoff="10s")
    assert retry != RetryPolicy(attempts=3, backoff="1s")
    assert retry.model_fields_set == {"attempts", "backoff"}
    copied = retry.model_copy(update={"attempts": 4, "max_backoff": 5_000_000})
    assert (copied.attempts, copied.backoff, copied.max_backoff, retry.attempts) == (4, 1_000_000, 5_000_000, 2)
    assert copied.model_fields_set == {"attempts", "backoff", "max_backoff"}
    pydantics = mirror(RetryPolicy).model_validate({"attempts": 2, "backoff": "1s"})  # what pydantic's copy gives
    assert pydantics.model_copy(update={"attempts": 4, "max_backoff": 5_000_000}).model_fields_set == \
        copied.model_fields_set
    assert retry.model_fields_set == {"attempts", "backoff"}


def test_validating_in_code_raises_pydantics_error_with_the_field() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="attempts"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        RetryPolicy.model_validate({"attempts": 2, "tries": 3})


PIPELINE = """version: 1
event_time: timestamp_seconds(t)
state:
  default: {type: sqlite, path: state.db}
sources:
  - {id: in, type: file, path: events.ndjson, schema: "t BIGINT, k STRING, x DOUBLE"}
pipelines:
  - id: p
    steps:
      - transform: {id: tr, ops: [{set: {y: x * 2}}, {drop: [junk]}]}
      - annotate: {id: an, set: {big: y > 3}}
      - dedupe: {id: dd, key: "concat(k, ':', t)", within: 1m}
      - window: {id: w, key: [k], tumbling: 10s, aggs: {n: count(), s: sum(y)}}
    to: [out]
sinks:
  - {id: out, type: file, path: out, retry: {attempts: 2}}
"""


def test_a_run_of_a_file_validated_before_does_not_import_pydantic(tmp_path: Path) -> None:
    """In a fresh interpreter, the second run of a file with a state store, a transform, a dedupe and a window:
    its configs come from the validated cache, and pydantic is never imported; the output is the first run's."""
    (tmp_path / "events.ndjson").write_text("".join(
        f'{{"t": {t}, "k": "{k}", "x": {x}, "junk": 1}}\n' for t, k, x in
        [(1, "a", 1.0), (2, "b", 2.5), (2, "b", 2.5), (12, "a", 4.0), (25, "b", 1.0)]))
    (tmp_path / "pipeline.yaml").write_text(PIPELINE)
    probe = ("import sys\nfrom edgewise.cli import main\ncode = main(['run', '--quiet', 'pipeline.yaml'])\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')) or 'none', "
             "file=sys.stderr)\nsys.exit(code)\n")
    env = {**os.environ, "EDGEWISE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop(tree_cache.SWITCH, None)
    outputs = []
    imported = []
    for _ in range(2):
        shutil.rmtree(tmp_path / "out", ignore_errors=True)
        (tmp_path / "state.db").unlink(missing_ok=True)
        run = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                             check=True)
        imported.append(run.stderr.strip())
        outputs.append("".join(path.read_text() for path in sorted((tmp_path / "out").rglob("*")) if path.is_file()))
    assert "pydantic" in imported[0]  # the probe can tell: the first run validates
    assert imported[1] == "none"
    assert outputs[0] == outputs[1]
    # the dedupe drops the repeated (2, b); the input's end closes every window: a and b at 0 s, a at 10 s, b at 20 s
    assert outputs[0].count("\n") == 4


def test_configs_given_to_a_config_made_in_code_are_taken_as_they_are() -> None:
    """pydantic takes an instance of a field's model as it is; a declared config in the values is taken alike
    (``edgewise replay`` makes its sink with a ``RetryPolicy`` built beforehand: this once failed validation)."""
    from edgewise.sinks.file import FileSinkConfig

    retry = RetryPolicy(attempts=2, backoff="1s")
    sink = FileSinkConfig(id="o", path="out", retry=retry)
    assert sink.retry == retry and type(sink.retry) is RetryPolicy
    assert FileSinkConfig.model_validate({"id": "o", "path": "out", "retry": retry}) == sink


def test_a_config_class_with_a_base_that_is_not_a_config_class_is_refused() -> None:
    from edgewise.config.models import StepConfig

    class Named:
        def label(self) -> str:
            return "x"

    class MixedConfig(Named, StepConfig):
        pass

    with pytest.raises(TypeError, match="MixedConfig has bases that are not config classes \\(Named\\)"):
        MixedConfig.model_validate({"id": "m"})
