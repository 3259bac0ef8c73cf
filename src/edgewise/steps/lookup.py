"""``lookup`` enriches events from a static table (a CSV or JSON file) by a key expression.

The table is read once when the pipeline loads. Each event's ``key`` is evaluated and matched against the table's
``match`` column; the matching row's fields (all, or those in ``fields``) are written under ``into`` (or merged
into the event when ``into`` is not given). An event with no match gets ``default`` (NULL by default), or is
dropped with ``missing: drop``, or fails with ``missing: error``.
"""

from __future__ import annotations

import csv
import os
from typing import Any, ClassVar, Literal

import orjson

from edgewise.config import BuildContext
from edgewise.config.models import Expr, StepConfig
from edgewise.declare import Field, field_validator
from edgewise.engine.context import RunContext
from edgewise.errors import ConfigError, StepError
from edgewise.events import Batch, Payload
from edgewise.expr import values as V
from edgewise.expr.compiler import compile_expression
from edgewise.steps.annotate import set_path, split_path
from edgewise.steps.base import Step


class LookupConfig(StepConfig):
    """Enrich from a static table."""

    table: str = Field(description="path of a CSV file (with a header) or a JSON file (array of objects, or an "
                       "object of key -> row), relative to the pipeline file")
    key: Expr = Field(description="expression giving the value to look up")
    match: str | None = Field(default=None, description="the table column holding the key (default: the first column; "
                              "ignored for a JSON object table)")
    fields: list[str] | None = Field(default=None, description="table columns to copy (default: all but the key)")
    into: str | None = Field(default=None, description="write the row as an object under this field; default: merge "
                             "the columns into the event")
    missing: Literal["null", "drop", "error"] = Field(default="null", description="an event whose key is not in the "
                                                      "table: keep it (fields NULL), drop it, or fail it")

    @field_validator("missing", mode="before")
    @classmethod
    def _yaml_null(cls, value: object) -> object:
        # `missing: null` written as the docs show it is YAML's null, not the text: both mean the default
        return "null" if value is None else value


def read_table(path: str, match: str | None) -> tuple[dict[str, dict[str, Any]], str]:
    """Rows of a CSV or JSON table keyed by the string form of their key column."""
    if not os.path.exists(path):
        raise ConfigError(f"the lookup table {path} does not exist")
    rows: list[dict[str, Any]]
    if path.endswith(".json"):
        try:
            with open(path, "rb") as fh:
                data = orjson.loads(fh.read())
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"the lookup table {path} is not valid JSON: {exc}") from None
        if isinstance(data, dict):
            key_name = match or "key"
            return {str(k): (v if isinstance(v, dict) else {"value": v}) for k, v in data.items()}, key_name
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise ConfigError(f"the lookup table {path} must be a JSON array of objects or an object of rows")
        rows = data
    else:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    if not rows:
        return {}, match or "key"
    key_name = match or next(iter(rows[0]))
    if key_name not in rows[0]:
        raise ConfigError(f"the lookup table {path} has no column {key_name!r}; columns: {', '.join(rows[0])}")
    table: dict[str, dict[str, Any]] = {}
    for row in rows:
        k = row.get(key_name)
        if k is not None:
            table.setdefault(V.to_string(k) or "", row)
    return table, key_name


class LookupStep(Step):
    kind: ClassVar[str] = "lookup"
    Config = LookupConfig

    def __init__(self, config: LookupConfig, table: dict[str, dict[str, Any]], key_name: str) -> None:
        super().__init__(config)
        self.key = compile_expression(config.key)
        self.key_name = key_name
        self.missing = config.missing
        self.into = split_path(config.into) if config.into else None
        wanted = config.fields
        self.table = {
            k: {c: v for c, v in row.items() if (c in wanted if wanted else c != key_name)}
            for k, row in table.items()
        }
        self.columns = wanted or sorted({c for row in self.table.values() for c in row})
        self._key_field: str | None = getattr(self.key.evaluate, "field_name", None)

    @classmethod
    def from_config(cls, config: LookupConfig, ctx: BuildContext) -> LookupStep:
        table, key_name = read_table(ctx.path(config.table), config.match)
        return cls(config, table, key_name)

    def process(self, batch: Batch, ctx: RunContext) -> Batch:
        found = self._merge_found(batch.payloads)
        if found is not None:
            return batch.replace(found)
        key, table, into = self.key.evaluate, self.table, self.into
        out: list[Payload] = []
        mask: list[bool] = []
        empty = dict.fromkeys(self.columns)
        for p in batch.payloads:
            k = key(p)
            if k.__class__ is not str and k is not None:
                k = V.to_string(k)
            row = table.get(k) if k is not None else None
            if row is None:
                if self.missing == "drop":
                    mask.append(False)
                    continue
                if self.missing == "error":
                    raise StepError(f"lookup {self.id}: no row for key {k!r}")
                row = empty if into is None else None
            mask.append(True)
            if into is not None:
                out.append(set_path(p, into, row))
            else:
                merged = dict(p)
                merged.update(row or {})
                out.append(merged)
        if all(mask):
            return batch.replace(out)
        return batch.select(mask).replace(out)

    def _merge_found(self, payloads: list[Payload]) -> list[Payload] | None:
        """The common case in a few C-level passes: the key is a top-level field, every event's key is text, every
        key has a row and the row is merged into the event. ``None`` otherwise (``process`` goes event by event)."""
        if self.into is not None or self._key_field is None:
            return None
        field = self._key_field
        keys: list[Any] = [p.get(field) for p in payloads]
        if set(map(type, keys)) != {str}:
            return None
        rows: list[Any] = list(map(self.table.get, keys))
        if None in rows:
            return None
        return [{**p, **row} for p, row in zip(payloads, rows, strict=True)]

    def describe(self) -> list[str]:
        target = f"into {'.'.join(self.into)}" if self.into else "merged"
        return [f"{self.head()}: {len(self.table)} rows keyed by {self.key_name} = {self.key.sql}, {target}, "
                f"missing: {self.missing}"]
