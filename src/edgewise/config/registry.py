"""The lazy plugin registry: which class implements each step, source and sink type.

Built-in plugins are listed here as ``"module:Class"`` strings and imported only when a file uses them, so a
plugin whose extra is not installed costs nothing until it is used (and then says which extra to install).
Third-party plugins register through entry points in the groups ``edgewise.steps``, ``edgewise.sources`` and
``edgewise.sinks``.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any, Literal

from edgewise.errors import PluginError

Kind = Literal["steps", "sources", "sinks"]

BUILTINS: dict[Kind, dict[str, str]] = {
    "steps": {
        "filter": "edgewise.steps.filter:FilterStep",
        "gate": "edgewise.steps.filter:GateStep",
        "annotate": "edgewise.steps.annotate:AnnotateStep",
        "transform": "edgewise.steps.transform:TransformStep",
        "lookup": "edgewise.steps.lookup:LookupStep",
        "tee": "edgewise.steps.tee:TeeStep",
        "spawn": "edgewise.steps.spawn:SpawnStep",
        "aggregate": "edgewise.steps.aggregate:AggregateStep",
        "window": "edgewise.steps.window:WindowStep",
        "dedupe": "edgewise.steps.dedupe:DedupeStep",
        "complete": "edgewise.steps.complete:CompleteStep",
        "entwine": "edgewise.steps.entwine:EntwineStep",
    },
    "sources": {
        "stdin": "edgewise.sources.stdin:StdinSource",
        "file": "edgewise.sources.file:FileSource",
        "generator": "edgewise.sources.generator:GeneratorSource",
        "replay": "edgewise.sources.replay:ReplaySource",
        "http": "edgewise.sources.http:HttpSource",
        "mqtt": "edgewise.sources.mqtt:MqttSource",
        "nats": "edgewise.sources.nats:NatsSource",
    },
    "sinks": {
        "stdout": "edgewise.sinks.stdout:StdoutSink",
        "file": "edgewise.sinks.file:FileSink",
        "http": "edgewise.sinks.http:HttpSink",
        "edgewise": "edgewise.sinks.edgewise:EdgewiseSink",
        "postgres": "edgewise.sinks.postgres:PostgresSink",
        "sqlite": "edgewise.sinks.sqlite:SqliteSink",
        "redis": "edgewise.sinks.redis:RedisSink",
        "nats": "edgewise.sinks.nats:NatsSink",
        "mqtt": "edgewise.sinks.mqtt:MqttSink",
        "parquet": "edgewise.sinks.parquet:ParquetSink",
        "live": "edgewise.sinks.live:LiveSink",
    },
}


@cache
def _entry_points(kind: Kind) -> dict[str, str]:
    from importlib.metadata import entry_points  # only for a type that is not built in: ~20 ms of start-up

    return {ep.name: ep.value for ep in entry_points(group=f"edgewise.{kind}")}


def names(kind: Kind) -> list[str]:
    """Every registered type name of a kind, built-ins first."""
    return sorted(BUILTINS[kind]) + sorted(set(_entry_points(kind)) - set(BUILTINS[kind]))


def target(kind: Kind, name: str) -> str | None:
    return BUILTINS[kind].get(name) or _entry_points(kind).get(name)


@cache
def resolve(kind: Kind, name: str) -> Any:
    """The plugin class for a type name; ``PluginError`` if it cannot be imported."""
    spec = target(kind, name)
    if spec is None:
        raise PluginError(f"no {kind[:-1]} type {name!r}")
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginError(f"the {kind[:-1]} type {name!r} could not be loaded: {exc}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise PluginError(f"the {kind[:-1]} type {name!r} points at {spec}, which does not exist") from None
