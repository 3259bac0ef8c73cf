"""Placement: which steps of a pipeline run at the edge, which at the hub, and the link that carries events
between them (docs/placement.md).

A pipeline is *split* by ``hub_from: <step id>`` (that step and those after it, and the pipeline's ``to``, run at
the hub) or ``placement: auto`` (from its first stateful step on). One file gives three plans:

* ``edgewise run FILE``: the whole file, the reference;
* ``edge_plan``: what ``edgewise serve FILE`` runs: each split pipeline's steps before the split, then a link sink
  that writes each event reaching the split as an envelope (id, event time, source) holding only the fields the
  hub reads (``forwarded_fields``); pipelines that are not split run whole;
* ``hub_plan``: what ``edgewise spark FILE`` runs: each split pipeline from its split on, reading its own link.

A file without a split pipeline runs whole everywhere, as before. Nothing here opens a file or a connection.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from edgewise.config.models import NatsLinkConfig, SinkConfig, SourceConfig, SpoolLinkConfig
from edgewise.config.plan import PipelinePlan, Plan
from edgewise.errors import ConfigError

LINK = "link."
"""The prefix of the ids of a link's sinks (edge) and sources (hub): ``link.<pipeline id>``."""

PASSES_EVENTS_ON = frozenset({"filter", "gate", "annotate", "dedupe", "lookup", "aggregate", "complete"})
"""Steps whose output is their input events (some dropped, fields set): a field a later step reads must come in."""


@dataclass(frozen=True)
class Split:
    """Where one pipeline is cut: ``steps[:at]`` at the edge, the rest at the hub."""

    pipeline: PipelinePlan
    at: int
    why: str
    fields: frozenset[str] | None
    """The top-level fields the edge forwards; None: every field (a hub step or sink takes the whole event)."""

    @property
    def link_id(self) -> str:
        return LINK + self.pipeline.id


def splits(plan: Plan) -> list[Split]:
    """The file's split pipelines, in file order (``hub_from`` was checked at load: it names one of the pipeline's
    steps). A part (an edge's or a hub's plan) is not split again: its pipelines are left out."""
    found = []
    for pipeline in plan.pipelines:
        config = plan.config.pipelines[pipeline.position]
        if pipeline.first_step or len(pipeline.steps) != len(config.steps):
            continue
        at: int | None = None
        if config.hub_from is not None:
            at = next(i for i, s in enumerate(pipeline.steps) if s.id == config.hub_from)
            why = f"hub_from: {config.hub_from}"
        elif config.placement == "auto":
            at = next((i for i, s in enumerate(pipeline.steps) if _stateful(s)), None)
            why = "placement: auto (its first stateful step)"
        if at is not None:
            found.append(Split(pipeline, at, why, forwarded_fields(pipeline.steps[at:])))
    return found


def forwarded_fields(steps: list[Any]) -> frozenset[str] | None:
    """The top-level fields the hub's part (``steps``, then its sinks) can read, or None where it may read
    any. Walked from the end: a sink writes the whole event; a window (its late events dropped, none dead-lettered)
    gives results of its own and reads only its keys and aggregates; a step that passes its events on reads what it
    reads and what comes after it; any other step may read anything. A name too many costs bytes, a name missing
    would change results, so every text in a step's config that parses as an expression counts."""
    needed: set[str] | None = None
    for step in reversed(steps):
        reads = step_reads(step)
        routes = step.config.on_error not in ("fail", "skip")
        if step.kind == "window" and step.config.late == "drop" and step.config.when is None and not routes:
            needed = set(reads)
        elif step.kind in PASSES_EVENTS_ON and not routes and not step.config.sink_references():
            needed = None if needed is None else needed | reads
        else:
            needed = None
    return None if needed is None else frozenset(needed)


def step_reads(step: Any) -> set[str]:
    """The top-level field names any text of the step's config could read, as an expression."""
    from sqlglot import exp

    from edgewise.expr.parsing import parse

    names: set[str] = set()
    # ids, sink names and settings are no expressions (a name they parse to would only be forwarded needlessly)
    for text in _texts(step.config.model_dump(exclude_defaults=True, exclude={"id", "on_error", "retry", "store"})):
        try:
            tree = parse(text)
        except ConfigError:
            continue
        for column in tree.find_all(exp.Column):
            parts = column.parts
            if parts:
                names.add(parts[0].name)
    return names


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):  # its keys name outputs (aggregates, key columns, fields set)
        for v in value.values():
            yield from _texts(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _texts(v)


def _stateful(step: Any) -> bool:
    from edgewise.steps.stateful import StatefulStep

    return isinstance(step, StatefulStep)


def link_of(plan: Plan) -> SpoolLinkConfig | NatsLinkConfig:
    return plan.config.link or SpoolLinkConfig()


def link_directory(plan: Plan, split: Split) -> str:
    """A spool link's folder for one split pipeline."""
    link = link_of(plan)
    assert isinstance(link, SpoolLinkConfig)
    from edgewise.config import BuildContext

    return os.path.join(BuildContext(plan.base_dir).path(link.path), split.pipeline.id)


EDGE_ADDRESS = "edge.json"
"""In a spool link's folder: ``{"url": ...}`` of the edge daemon writing it, where a hub's ``live`` sinks post."""


def edge_address_file(plan: Plan) -> str | None:
    """Where an edge daemon serving ``plan`` says its address: a spool link's folder, where the file splits a
    pipeline; None otherwise."""
    link = link_of(plan)
    if not isinstance(link, SpoolLinkConfig) or not any(p.hub_from or p.placement for p in plan.config.pipelines):
        return None
    from edgewise.config import BuildContext

    return os.path.join(BuildContext(plan.base_dir).path(link.path), EDGE_ADDRESS)


def edge_plan(plan: Plan) -> Plan:
    """What the edge runs: split pipelines up to their split, each into its link; the others whole."""
    cut = {s.pipeline.id: s for s in splits(plan)}
    if not cut:
        return plan
    from edgewise.sinks.link import link_sink_class

    pipelines = []
    link_sinks: dict[str, SinkConfig] = {}
    link_classes: dict[str, Any] = {}
    for p in plan.pipelines:
        s = cut.get(p.id)
        if s is None:
            pipelines.append(p)
            continue
        pipelines.append(dataclasses.replace(p, steps=p.steps[: s.at], to=[s.link_id]))
        link_sinks[s.link_id], link_classes[s.link_id] = link_sink_class(plan, s)
    return _with(plan, pipelines, link_sinks, link_classes)


def hub_plan(plan: Plan, cut: list[Split] | None = None) -> Plan:
    """What the hub runs: each split pipeline from its split on (``cut``: the file's ``splits``), reading its own
    link (event times and ids are the envelopes')."""
    cut = splits(plan) if cut is None else cut
    if not cut:
        return plan
    from edgewise.sources.link import LinkFileSource, LinkNatsSourceConfig, LinkSourceConfig

    pipelines = []
    sources: list[SourceConfig] = []
    classes: dict[str, Any] = {}
    link = link_of(plan)
    for s in cut:
        if isinstance(link, SpoolLinkConfig):
            sources.append(LinkSourceConfig(id=s.link_id, type="file", path=link_directory(plan, s)))
            classes[s.link_id] = LinkFileSource
        else:
            from edgewise.sources.nats import NatsSource

            sources.append(LinkNatsSourceConfig(id=s.link_id, type="nats", url=link.url, stream=link.stream,
                                                subject=f"{link.subject}.{s.pipeline.id}"))
            classes[s.link_id] = NatsSource
        pipelines.append(dataclasses.replace(s.pipeline, steps=s.pipeline.steps[s.at:], first_step=s.at,
                                             sources=frozenset({s.link_id})))
    hub = _with(plan, pipelines, {}, {})
    address = edge_address_file(plan)
    if address is not None:  # a live sink without `url:` at the hub posts to the edge daemon's pages
        hub = dataclasses.replace(hub, sinks={k: _to_edge(v, address) for k, v in hub.sinks.items()})
    return dataclasses.replace(hub, sources=sources, source_classes=classes, event_time=None)


def _to_edge(config: SinkConfig, address: str) -> SinkConfig:
    if config.type == "live" and getattr(config, "url", None) is None and getattr(config, "url_file", None) is None:
        return config.model_copy(update={"url_file": address})
    return config


def hub_to_run(plan: Plan, *, spark: bool = True) -> Plan:
    """``hub_plan`` for a run (on Spark: checked for it), a spool link's folders made (the hub may start before
    the edge has written anything, and waits for it)."""
    cut = splits(plan)
    hub = hub_plan(plan, cut)
    if spark:
        _refuse_for_spark(hub, cut)
    if hub is not plan and isinstance(link_of(plan), SpoolLinkConfig):
        for s in cut:
            os.makedirs(link_directory(plan, s), exist_ok=True)
    return hub


def part(plan: Plan, name: str) -> Plan:
    """The plan of one part: ``all`` (the whole file), ``edge`` or ``hub``."""
    if name == "edge":
        return edge_plan(plan)
    if name == "hub":
        if isinstance(link_of(plan), NatsLinkConfig) and splits(plan):
            raise plan.error(("link", "type"), "the hub's part over a NATS link runs on Spark (`edgewise spark`); "
                             "on the local engine, use a spool link")
        return hub_to_run(plan, spark=False)
    return plan


def _with(plan: Plan, pipelines: list[PipelinePlan], extra_sinks: dict[str, SinkConfig],
          extra_classes: dict[str, Any]) -> Plan:
    """``plan`` with these pipelines and only the sinks they (and those sinks' dead letters) use."""
    used = set(extra_sinks)
    for p in pipelines:
        used.update(p.to)
        for step in p.steps:
            used.update(ref for _, ref in step.config.sink_references())
            if step.config.on_error not in ("fail", "skip"):
                used.add(step.config.on_error)
    used = _with_dead_letters(used, plan.sinks)
    sinks = {k: v for k, v in plan.sinks.items() if k in used} | extra_sinks
    classes = {k: v for k, v in plan.sink_classes.items() if k in sinks} | extra_classes
    return dataclasses.replace(plan, pipelines=pipelines, sinks=sinks, sink_classes=classes)


def _with_dead_letters(used: set[str], sinks: dict[str, SinkConfig]) -> set[str]:
    todo = list(used)
    while todo:
        config = sinks.get(todo.pop())
        if config is not None and config.on_error != "fail" and config.on_error not in used:
            used.add(config.on_error)
            todo.append(config.on_error)
    return used


def check_hub(plan: Plan) -> None:
    """Refuse, at its file and line, a step placed at the hub that Spark does not run."""
    cut = splits(plan)
    _refuse_for_spark(hub_plan(plan, cut), cut)


def _refuse_for_spark(hub: Plan, cut: list[Split]) -> None:
    if not cut:  # nothing placed at a hub (and no need to import the Spark compiler's checks)
        return
    from edgewise.engine.spark.sources import refused_steps

    problems = refused_steps(hub, {s.pipeline.id: s.why for s in cut})
    if problems:
        raise ConfigError.of(problems)


def explain(plan: Plan) -> str:
    """Step by step, what runs where and through which link; empty where no pipeline is split."""
    cut = {s.pipeline.id: s for s in splits(plan)}
    if not cut:
        return ""
    link = link_of(plan)
    lines = ["placement (`edgewise serve` runs the edge, `edgewise spark` the hub, `edgewise run` all of it):"]
    for p in plan.pipelines:
        s = cut.get(p.id)
        if s is None:
            lines.append(f"  pipeline {p.id}: all at the edge")
            continue
        lines.append(f"  pipeline {p.id} ({s.why}):")
        lines.extend(f"    edge  {i + 1}. {step.kind} {step.id}" for i, step in enumerate(p.steps[: s.at]))
        where = (link_directory(plan, s) if isinstance(link, SpoolLinkConfig)
                 else f"{link.url} stream {link.stream} subject {link.subject}.{p.id}")
        kept = "every field" if s.fields is None else "fields " + (", ".join(sorted(s.fields)) or "none")
        lines.append(f"    link  -> {link.type} {where} (envelopes: id, event time, source; {kept})")
        lines.extend(f"    hub   {i + 1}. {step.kind} {step.id}" for i, step in enumerate(p.steps[s.at:], s.at))
        lines.append(f"    hub   -> {', '.join(p.to) if p.to else 'stdout'}")
    return "\n".join(lines)


def placement_problems(doc: Any, top: Any, step_ids: Iterable[list[str]], sink_ids: set[str]) -> list[ConfigError]:
    """Load-time checks: ``hub_from`` names a step of its pipeline; no sink takes a link's id."""
    problems = []
    for pi, (pipeline, ids) in enumerate(zip(top.pipelines, step_ids, strict=True)):
        if pipeline.hub_from is not None and pipeline.hub_from not in ids:
            known = ", ".join(ids) or "it has no steps"
            problems.append(doc.error(("pipelines", pi, "hub_from"), f"hub_from {pipeline.hub_from!r} is not a "
                                      f"step of pipeline {pipeline.id}; its steps: {known}"))
        if (pipeline.hub_from or pipeline.placement) and LINK + pipeline.id in sink_ids:
            problems.append(doc.error(("pipelines", pi, "id"), f"a sink is named {LINK + pipeline.id!r}, the id "
                                      "of this pipeline's link; rename the sink"))
    return problems
