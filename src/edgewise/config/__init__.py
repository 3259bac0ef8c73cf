"""Load a pipeline file into a ``Plan``, in small passes, each reporting located errors.

1. parse YAML/JSON, remembering every value's line (``yamlpos``);
2. check the top level (``PipelineFileConfig``);
3. check each source, sink and step against its plugin's model (lazy registry); values validated before (by this
   code) give the configs they gave then instead, without importing pydantic (``validated_cache``);
4. check ids are unique and every reference (``to``, ``on_error``, ``tee.to``) names a sink;
5. build the steps (expressions are compiled once here) into a ``Plan``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from edgewise.config import registry, validated_cache
from edgewise.config.models import PipelineFileConfig, SinkConfig, SourceConfig
from edgewise.config.plan import PipelinePlan, Plan
from edgewise.config.validate import validate_model
from edgewise.config.yamlpos import Document, Path, load_file, load_text
from edgewise.errors import ConfigError, PluginError
from edgewise.expr import tree_cache
from edgewise.expr.compiler import compile_expression

__all__ = ["BuildContext", "Plan", "load", "load_document", "load_text_plan"]


@dataclass(frozen=True)
class BuildContext:
    """What a plugin may know while it is built: where the pipeline file is (relative paths start there)."""

    base_dir: str

    def path(self, relative: str) -> str:
        return relative if os.path.isabs(relative) else os.path.normpath(os.path.join(self.base_dir, relative))


def load(path: str) -> Plan:
    """Load and check a pipeline file; raises ``ConfigError`` with every problem located. The expressions it
    parsed are kept for the next run (``expr/tree_cache.py``)."""
    plan = load_document(load_file(path))
    tree_cache.save()
    return plan


def load_text_plan(text: str, file: str = "<text>", base_dir: str = ".") -> Plan:
    return load_document(load_text(text, file), base_dir=base_dir)


def load_document(doc: Document, base_dir: str | None = None) -> Plan:
    if not isinstance(doc.data, dict):
        raise doc.error((), f"expected a mapping with 'version: 1' at the top, found {type(doc.data).__name__}")
    if "version" not in doc.data and "tests" in doc.data and "pipeline" in doc.data:
        raise doc.error((), "this is a test file (pipeline unit tests: `pipeline:` and `tests:`), not a pipeline "
                        f"file: run its tests with `edgewise test {doc.file}`")
    ctx = BuildContext(base_dir if base_dir is not None else os.path.dirname(os.path.abspath(doc.file)))
    known = validated_cache.cached(doc.data)
    top, sources, sinks, stores, step_configs = known or _validated(doc)
    problems: list[ConfigError] = []

    sink_ids = {s.id for s in sinks if s is not None}
    problems.extend(_check_ids(doc, top, sources, sinks, step_configs))
    problems.extend(_check_references(doc, top, sinks, step_configs, sink_ids))
    problems.extend(_check_stores(doc, step_configs, set(stores)))
    from edgewise.placement import placement_problems

    problems.extend(placement_problems(doc, top, [[cfg.id for _, _, cfg in entries] for entries in step_configs],
                                       sink_ids))
    if problems:
        raise ConfigError.of(problems)

    pipelines = []
    for pi, pipeline in enumerate(top.pipelines):
        steps = []
        for path, kind, config in step_configs[pi]:
            cls = registry.resolve("steps", kind)
            try:
                steps.append(cls.from_config(config, ctx))
            except ConfigError as exc:
                problems.append(ConfigError(exc.message, doc.locate((*path, kind))))
        pipelines.append(PipelinePlan(pipeline.id, steps, list(pipeline.to), pipeline.description, position=pi))
    if problems:
        raise ConfigError.of(problems)
    if known is None:
        validated_cache.keep(doc.data, validated_cache.Validated(top, sources, sinks, stores, step_configs))
    return Plan(
        file=doc.file,
        config=top,
        event_time=compile_expression(top.event_time) if top.event_time else None,
        sources=[s for s in sources if s is not None],
        pipelines=pipelines,
        sinks={s.id: s for s in sinks if s is not None},
        source_classes={s.id: registry.resolve("sources", s.type) for s in sources if s is not None},
        sink_classes={s.id: registry.resolve("sinks", s.type) for s in sinks if s is not None},
        stores={name: store for name, store in stores.items() if store is not None},
        base_dir=ctx.base_dir,
        document=doc,
    )


def _validated(doc: Document) -> validated_cache.Validated:
    """The top level, each source, store and step checked against its model; every problem found is raised."""
    top = validate_model(PipelineFileConfig, doc, ())
    problems: list[ConfigError] = []

    def collect(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except ConfigError as exc:
            problems.extend(exc.problems or [exc])
            return None

    sources = [collect(_plugin_config, "sources", doc, ("sources", i)) for i in range(len(top.sources))]
    stores = {name: collect(_store_config, doc, ("state", name)) for name in top.state}
    sinks = [collect(_plugin_config, "sinks", doc, ("sinks", i)) for i in range(len(top.sinks))]
    step_configs: list[list[tuple[Path, str, Any]]] = []
    for pi, pipeline in enumerate(top.pipelines):
        entries = []
        for si in range(len(pipeline.steps)):
            found = collect(_step_config, doc, ("pipelines", pi, "steps", si))
            if found is not None:
                entries.append(found)
        step_configs.append(entries)
    if problems:
        raise ConfigError.of(problems)
    return validated_cache.Validated(top, sources, sinks, stores, step_configs)


def _plugin_config(kind: registry.Kind, doc: Document, path: Path) -> SourceConfig | SinkConfig:
    item = doc.sub(path).data
    singular = kind[:-1]
    if not isinstance(item, dict):
        raise doc.error(path, f"expected a {singular} mapping with 'id' and 'type', found {item!r}")
    kind_name = item.get("type")
    if not isinstance(kind_name, str):
        raise doc.error((*path, "type"), f"missing 'type'; expected one of: {', '.join(registry.names(kind))}")
    if registry.target(kind, kind_name) is None:
        raise doc.error((*path, "type"), f"unknown {singular} type {kind_name!r}; expected one of: "
                        f"{', '.join(registry.names(kind))}")
    try:
        cls = registry.resolve(kind, kind_name)
    except PluginError as exc:
        raise doc.error((*path, "type"), str(exc)) from None
    config: SourceConfig | SinkConfig = validate_model(cls.Config, doc, path)
    return config


def _store_config(doc: Document, path: Path) -> Any:
    from edgewise.state import STORE_CONFIGS

    item = doc.sub(path).data
    kinds = ", ".join(STORE_CONFIGS)
    if not isinstance(item, dict) or item.get("type") not in STORE_CONFIGS:
        found = item.get("type") if isinstance(item, dict) else item
        where = (*path, "type") if isinstance(item, dict) and "type" in item else path
        raise doc.error(where, f"a state store needs `type`: one of {kinds}; found {found!r}")
    return validate_model(STORE_CONFIGS[item["type"]], doc, path)


def _check_stores(doc: Document, steps: list[list[tuple[Path, str, Any]]], declared: set[str]) -> list[ConfigError]:
    problems = []
    for entries in steps:
        for path, kind, cfg in entries:
            name = getattr(cfg, "store", None)
            if name is not None and name != "default" and name not in declared:
                known = ", ".join(sorted(declared)) or "the file has no `state:` section"
                problems.append(doc.error((*path, kind, "store"), f"store {name!r} is not declared under `state:`; "
                                          f"declared: {known}"))
    return problems


def _step_config(doc: Document, path: Path) -> tuple[Path, str, Any]:
    item = doc.sub(path).data
    expected = ", ".join(registry.names("steps"))
    if not isinstance(item, dict) or len(item) != 1:
        shown = list(item) if isinstance(item, dict) else item
        raise doc.error(path, f"a step is a map with exactly one key, the step type ({expected}), "
                        f"e.g. `- filter: {{id: ..., where: ...}}`; found {shown!r}")
    kind = next(iter(item))
    if registry.target("steps", kind) is None:
        raise doc.error((*path, kind), f"unknown step type {kind!r}; expected one of: {expected}")
    if not isinstance(item[kind], dict):
        raise doc.error((*path, kind), f"the {kind} step takes a mapping with at least 'id', found {item[kind]!r}")
    try:
        cls = registry.resolve("steps", kind)
    except PluginError as exc:
        raise doc.error((*path, kind), str(exc)) from None
    return path, kind, validate_model(cls.Config, doc, (*path, kind))


def _check_ids(doc: Document, top: PipelineFileConfig, sources: list[Any], sinks: list[Any],
               steps: list[list[tuple[Path, str, Any]]]) -> list[ConfigError]:
    seen: dict[str, str] = {}
    problems = []
    named: list[tuple[Path, str, str]] = []
    named += [(("sources", i, "id"), s.id, "source") for i, s in enumerate(sources) if s is not None]
    named += [(("sinks", i, "id"), s.id, "sink") for i, s in enumerate(sinks) if s is not None]
    named += [(("pipelines", i, "id"), p.id, "pipeline") for i, p in enumerate(top.pipelines)]
    named += [((*path, kind, "id"), cfg.id, f"{kind} step") for entries in steps for path, kind, cfg in entries]
    for path, ident, what in named:
        if ident in seen:
            problems.append(doc.error(path, f"duplicate id {ident!r}: already used by a {seen[ident]}; every "
                                      "source, pipeline, step and sink needs its own id"))
        else:
            seen[ident] = what
    return problems


def _check_references(doc: Document, top: PipelineFileConfig, sinks: list[Any],
                      steps: list[list[tuple[Path, str, Any]]], sink_ids: set[str]) -> list[ConfigError]:
    problems = []
    known = ", ".join(sorted(sink_ids)) or "none are declared"

    def check(path: Path, ref: str, what: str) -> None:
        if ref not in sink_ids:
            problems.append(doc.error(path, f"{what} {ref!r} is not a sink id; declared sinks: {known}"))

    for pi, pipeline in enumerate(top.pipelines):
        for ti, ref in enumerate(pipeline.to):
            check(("pipelines", pi, "to", ti), ref, "`to` names")
    for entries in steps:
        for path, kind, cfg in entries:
            if cfg.on_error not in ("fail", "skip"):
                check((*path, kind, "on_error"), cfg.on_error, "on_error must be 'fail', 'skip' or a sink id;")
            for field, ref in cfg.sink_references():
                check((*path, kind, field), ref, f"{field} names")
    for i, sink in enumerate(sinks):
        if sink is not None and sink.on_error != "fail":
            if sink.on_error == sink.id:
                problems.append(doc.error(("sinks", i, "on_error"), "a sink cannot dead-letter into itself"))
            else:
                check(("sinks", i, "on_error"), sink.on_error, "on_error must be 'fail' or a sink id;")
    return problems
