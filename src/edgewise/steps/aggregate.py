"""``aggregate``: running aggregates per group; each event leaves carrying its group's updated values.

    - aggregate: {id: per-repo, key: [repository.full_name], aggs: {pushes: count(), biggest: max(size)},
                  into: stats}

gives every event ``stats: {pushes: 3, biggest: 120}`` — the values after that event counted. Each aggregate step
has its own state (two steps never share counters, even with the same key), kept per group in the step's store.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import orjson
from pydantic import Field

from edgewise.engine.context import RunContext
from edgewise.events import Batch
from edgewise.steps.aggs import AggExpr, AggSpec, decode_value, parse_agg
from edgewise.steps.annotate import set_path, split_path
from edgewise.steps.stateful import KeyColumns, KeySpec, StatefulConfig, StatefulStep, key_text


class AggregateConfig(StatefulConfig):
    """Running aggregates per group."""

    key: KeySpec = Field(default_factory=list, description="group by these expressions (or a map name -> "
                         "expression); empty: one global group")
    aggs: dict[str, AggExpr] = Field(min_length=1, description="name -> aggregate, e.g. {n: count(), top: max(x)}")
    into: str = Field(description="field (dotted path) that receives the group's values")


class AggregateStep(StatefulStep):
    kind: ClassVar[str] = "aggregate"
    Config = AggregateConfig
    config: AggregateConfig

    def __init__(self, config: AggregateConfig) -> None:
        super().__init__(config)
        self.keys = KeyColumns(config.key)
        self.specs: list[tuple[str, AggSpec]] = [(name, parse_agg(text)) for name, text in config.aggs.items()]
        self.args = [spec.argument.evaluate if spec.argument else None for _, spec in self.specs]
        self.into = split_path(config.into)
        self.reset()

    def reset(self) -> None:
        self.groups: dict[tuple[Any, ...], list[Any]] = {}
        self.dirty.clear()

    def process(self, batch: Batch, ctx: RunContext) -> Batch:
        key_of = self.keys.of
        payloads = batch.payloads
        keys = [key_of(p) for p in payloads]  # evaluate first: an error leaves the state untouched
        rows = [[None if fn is None else fn(p) for fn in self.args] for p in payloads]
        out = []
        specs = self.specs
        for payload, key, row in zip(payloads, keys, rows, strict=True):
            accs = self.groups.get(key)
            if accs is None:
                accs = self.groups[key] = [spec.init() for _, spec in specs]
            for j, (_, spec) in enumerate(specs):
                accs[j] = spec.add(accs[j], row[j])
            self.dirty.add(key)
            values = {name: spec.result(acc) for (name, spec), acc in zip(specs, accs, strict=True)}
            out.append(set_path(payload, self.into, values))
        return batch.replace(out)

    def changes(self) -> dict[str, bytes | None]:
        changed: dict[str, bytes | None] = {}
        for key in self.dirty:
            accs = self.groups[key]
            changed[f"g/{key_text(key)}"] = orjson.dumps([spec.encode(a) for (_, spec), a in zip(self.specs, accs,
                                                                                                 strict=True)])
        self.dirty.clear()
        return changed

    def restore(self, items: Iterable[tuple[str, bytes]]) -> None:
        for name, value in items:
            if name.startswith("g/"):
                key = tuple(decode_value(orjson.loads(name[2:])))
                self.groups[key] = [spec.decode(a) for (_, spec), a in zip(self.specs, orjson.loads(value),
                                                                          strict=True)]

    def lookup(self, key: str) -> Any:
        for k, accs in self.groups.items():
            if key_text(k) == key:
                return {name: spec.result(a) for (name, spec), a in zip(self.specs, accs, strict=True)}
        return None

    def describe(self) -> list[str]:
        lines = [f"{self.head()}: running aggregates into {self.config.into}",
                 f"key: {self.keys.describe()}"]
        lines += [f"{name} = {spec.text}" for name, spec in self.specs]
        lines.append(f"state: store {self.store_name!r}")
        return lines
