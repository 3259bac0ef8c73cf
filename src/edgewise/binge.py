"""``edgewise import-binge``: an agglo/binge JSON configuration as an edgewise pipeline file (``docs/binge.md``).

binge (github.com/kmgreen2/agglo) declares ``pipelines`` of named processes, the processes in
``processDefinitions`` (annotator, aggregator, completer, filter, spawner, tee, transformer, continuation,
entwine) and ``externalSystems`` the tees write to. Each process becomes one or more edgewise steps; conditions
(``exists`` lists and expression trees) become SQL. Where edgewise means something else a ``#`` comment in the
output says so at that step, and what cannot be expressed is left out with a warning that says why (``warnings``,
printed on stderr by the command).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from edgewise.engine.spark.frame import quote
from edgewise.errors import ConfigError

AGGREGATIONS = {"AggSum": "sum", "AggMax": "max", "AggMin": "min", "AggAvg": "avg", "AggCount": "count",
                "AggDiscreteHistogram": "histogram"}
COMPARATORS = {"GreaterThan": ">", "LessThan": "<", "GreaterThanOrEqual": ">=", "LessThanOrEqual": "<=",
               "Equal": "=", "NotEqual": "!=", "RegexMatch": "RLIKE", "RegexNotMatch": "NOT RLIKE"}
BINARY = {"Addition": "+", "Subtract": "-", "Multiply": "*", "Divide": "/", "Modulus": "%", "Or": "|", "And": "&",
          "Xor": "^", "RightShift": ">>", "LeftShift": "<<"}
LOGICAL = {"LogicalAnd": "AND", "LogicalOr": "OR"}
SINK_TYPES = {"ExternalHttp": "http", "ExternalLocalFile": "file"}
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class Step:
    kind: str
    config: dict[str, Any]
    comments: list[str] = field(default_factory=list)


@dataclass
class Converted:
    """The pipeline file's text and what could not be expressed."""

    text: str
    warnings: list[str] = field(default_factory=list)


class _Converter:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.warnings: list[str] = []
        self.definitions: dict[str, tuple[str, dict[str, Any]]] = {}
        for definition in doc.get("processDefinitions") or []:
            if not isinstance(definition, dict) or len(definition) != 1:
                raise ConfigError(f"a processDefinitions entry must name one process type, found {definition!r}")
            (kind, body), = definition.items()
            self.definitions[str(body.get("name", ""))] = (kind, body)
        self.externals = {str(e.get("name")): e for e in doc.get("externalSystems") or []}
        self.sinks: dict[str, dict[str, Any]] = {}
        self.sink_comments: dict[str, str] = {}
        self.sink_ids: dict[str, str] = {}
        self.ids: set[str] = set()
        self.completions: dict[str, str] = {}
        """Completion processes converted so far: binge name -> the `complete` step's id (its `into`)."""

    # ------------------------------------------------------------ whole file

    def convert(self) -> Converted:
        pipelines = self.doc.get("pipelines")
        if not isinstance(pipelines, list) or not pipelines:
            raise ConfigError("not an agglo/binge configuration: no `pipelines` list")
        out = ["# Converted from an agglo/binge configuration by `edgewise import-binge`: comments starting with",
               "# `binge:` say where edgewise means something else. binge took events over HTTP, as `edgewise serve`",
               "# does; `edgewise run THIS_FILE events.ndjson` runs the same steps over a file.",
               "version: 1",
               "sources: [{id: binge, type: http}]",
               "pipelines:"]
        for pipeline in pipelines:
            out += self._pipeline(pipeline)
        if self.sinks:
            out.append("sinks:")
            for name, sink in self.sinks.items():
                if name in self.sink_comments:
                    out.append(f"  # binge: {self.sink_comments[name]}")
                out.append(f"  - {json.dumps(sink, ensure_ascii=False)}")
        return Converted("\n".join(out) + "\n", self.warnings)

    def _pipeline(self, pipeline: dict[str, Any]) -> list[str]:
        name = str(pipeline.get("name") or "pipeline")
        lines = [f"  - id: {json.dumps(self._id(name))}"]
        if pipeline.get("checkpoint"):
            lines.append("    # binge: `checkpoint` has no equivalent: edgewise commits state and input positions "
                         "itself")
        if pipeline.get("enableTracing") or pipeline.get("enableMetrics"):
            lines.append("    # binge: tracing and metrics need no switch: /metrics and /v1/queue count every step")
        lines.append("    steps:")
        steps: list[Step] = []
        for process in pipeline.get("processes") or []:
            process_name = str(process.get("name", ""))
            found = self.definitions.get(process_name)
            if found is None:
                raise ConfigError(f"pipeline {name}: process {process_name!r} has no entry in processDefinitions")
            kind, body = found
            try:
                converted = self._process(kind, body)
            except _InternalKey as exc:
                self._warn(process_name, f"left out: its condition reads binge's internal key {exc.key!r}, which "
                           "edgewise does not set (of binge's internal keys only internal:completion:<name> maps, "
                           "to the status of a completion converted before it)")
                converted = []
            retry = process.get("retryStrategy") or {}
            if converted and int(retry.get("numRetries") or 0) > 0:
                converted[0].config["retry"] = {"attempts": int(retry["numRetries"]) + 1,
                                                "backoff": f"{int(retry.get('initialBackOffMs') or 100)}ms"}
            steps += converted
        if not steps:
            lines[-1] = "    steps: []"
        for step in steps:
            lines += [f"      # binge: {c}" for c in step.comments]
            lines.append(f"      - {step.kind}: {json.dumps(step.config, ensure_ascii=False)}")
        return lines

    def _id(self, name: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "step"
        if not re.match(r"[A-Za-z_]", base):
            base = f"p-{base}"
        candidate, n = base, 1
        while candidate in self.ids:
            n += 1
            candidate = f"{base}-{n}"
        self.ids.add(candidate)
        return candidate

    def _warn(self, process: str, message: str) -> None:
        self.warnings.append(f"{process}: {message}")

    # ------------------------------------------------------------ processes

    def _process(self, kind: str, body: dict[str, Any]) -> list[Step]:
        name = str(body.get("name", kind))
        handler = getattr(self, f"_{kind}", None)
        if handler is None:
            self._warn(name, f"process type {kind!r} is unknown to edgewise's importer; left out")
            return []
        steps: list[Step] = handler(name, body)
        return steps

    def _with_when(self, config: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        when = self.condition(body.get("condition"))
        if when:
            config["when"] = when
        return config

    def _annotator(self, name: str, body: dict[str, Any]) -> list[Step]:
        steps = []
        for annotation in body.get("annotations") or []:
            key, value = str(annotation.get("fieldKey")), str(annotation.get("value", ""))
            if value.startswith("derived:"):
                self._warn(name, f"annotation {key} = {value} left out: edgewise expressions are deterministic "
                           "(a replay gives the same results), so they have no current time; the event time is "
                           "the event's own")
                continue
            config = self._with_when({"id": self._id(f"{name}-{key}"), "set": {key: _literal(value)}},
                                     annotation)
            comments = ["an annotation with a condition becomes a step with `when`: events it does not apply to "
                        "pass unchanged"] if "when" in config else []
            if "exists" in (annotation.get("condition") or {}):
                comments.append(_EXISTS_NOTE)
            steps.append(Step("annotate", config, comments))
        return steps

    def _aggregator(self, name: str, body: dict[str, Any]) -> list[Step]:
        aggregation = body.get("aggregation") or {}
        kind = str(aggregation.get("aggregationType", ""))
        fn = AGGREGATIONS.get(kind)
        if fn is None:
            self._warn(name, f"aggregation type {kind!r} has no edgewise aggregate; left out")
            return []
        target = _field(str(aggregation.get("key", "")))
        step_id = self._id(name)
        config = self._with_when({"id": step_id, "key": [_field(k) for k in aggregation.get("groupByKeys") or []],
                                  "aggs": {fn: f"{fn}({target})" if fn != "count" else f"count({target})"},
                                  "into": step_id}, body)
        comments = [f"binge kept this state in {body.get('stateStore')!r}; edgewise keeps it in the file's state "
                    "store (memory unless a `state:` section names sqlite or redis)"] if body.get("stateStore") else []
        steps = [Step("aggregate", config, comments)]
        if not body.get("forwardState"):
            steps.append(Step("transform", {"id": self._id(f"{name}-forget"), "ops": [{"drop": [step_id]}]},
                              ["binge did not forward the aggregate's state into the event (forwardState: false)"]))
        return steps

    def _completer(self, name: str, body: dict[str, Any]) -> list[Step]:
        completion = body.get("completion") or {}
        keys = [str(k) for k in completion.get("joinKeys") or []]
        if len(keys) < 2:
            self._warn(name, "a completion joins at least two keys; left out")
            return []
        step_id = self._id(name)
        self.completions[name] = step_id
        config = self._with_when({
            "id": step_id, "key": f"coalesce({', '.join(_field(k) for k in keys)})",
            "parts": {re.sub(r"\W+", "_", k): f"{_field(k)} IS NOT NULL" for k in keys},
            "timeout": f"{int(completion.get('timeoutMs') or 0)}ms", "time": "processing", "into": step_id}, body)
        return [Step("complete", config, [
            "binge completes when events carrying the same value in each join key arrived; here the join value is "
            "the first join key an event has, and each key is a part",
            "binge timed completions out by the clock: time: processing"])]

    def _filter(self, name: str, body: dict[str, Any]) -> list[Step]:
        regex = str(body.get("regex", ""))
        if body.get("keepMatched"):
            self._warn(name, f"a filter keeping only the keys that match {regex!r} is left out: edgewise's "
                       "transform keeps named top-level fields (keep), not keys by pattern at every depth")
            return []
        return [Step("transform", {"id": self._id(name), "ops": [{"drop_keys": regex}]},
                     ["binge's filter removes the keys the pattern matches, at every depth: drop_keys"])]

    def _spawner(self, name: str, body: dict[str, Any]) -> list[Step]:
        runnable = (body.get("job") or {}).get("runnable") or {}
        if not runnable.get("pathToExec"):
            self._warn(name, "a spawner without job.runnable.pathToExec is left out")
            return []
        step_id = self._id(name)
        config: dict[str, Any] = {"id": step_id, "argv": [str(runnable["pathToExec"]),
                                                           *[str(a) for a in runnable.get("cmdArgs") or []]],
                                  "wait": bool(body.get("doSync"))}
        comments = ["the event goes to the program as JSON on stdin, as in binge"]
        if config["wait"]:
            config["into"] = step_id
            comments.append(f"waiting (doSync), edgewise keeps the program's stdout, which must be one JSON value, "
                            f"under {step_id}")
        if int(body.get("delayInMs") or 0) > 0:
            comments.append(f"binge waited {body['delayInMs']} ms before starting the job; edgewise starts it at once")
        return [Step("spawn", self._with_when(config, body), comments)]

    def _tee(self, name: str, body: dict[str, Any]) -> list[Step]:
        connector = str(body.get("outputConnectorRef") or body.get("outputConnector") or "")
        sink = self._sink(name, connector)
        config: dict[str, Any] = {"id": self._id(name), "to": sink}
        specs = body.get("transformerSpecs") or []
        if body.get("transformerRef"):
            found = self.definitions.get(str(body["transformerRef"]))
            if found is None or found[0] != "transformer":
                raise ConfigError(f"tee {name}: transformerRef {body['transformerRef']!r} names no transformer")
            specs = found[1].get("specs") or []
        assignments = {}
        for spec in specs:
            expression = self._transformation(name, spec)
            if expression is not None:
                assignments[str(spec.get("targetField"))] = expression
        for key, value in (body.get("additionalBody") or {}).items():
            assignments[key] = _literal(value)
        if assignments:
            config["set"] = assignments
        return [Step("tee", self._with_when(config, body))]

    def _transformer(self, name: str, body: dict[str, Any]) -> list[Step]:
        ops: list[dict[str, Any]] = []
        targets = []
        for spec in body.get("specs") or []:
            expression = self._transformation(name, spec)
            if expression is not None:
                target = str(spec.get("targetField"))
                ops.append({"set": {target: expression}})
                targets.append(target)
        if not body.get("forwardInputFields", True) and targets:
            ops.append({"keep": targets})
        if not ops:
            return []
        return [Step("transform", {"id": self._id(name), "ops": ops})]

    def _transformation(self, name: str, spec: dict[str, Any]) -> str | None:
        transformation = spec.get("transformation") or {}
        kind = str(transformation.get("transformationType", ""))
        source = _field(str(spec.get("sourceField", "")))
        if kind == "TransformCopy":
            expression = source
        elif kind == "TransformMapRegex":
            args = transformation.get("mapRegexArgs") or {}
            expression = f"regexp_replace({source}, {_literal(args.get('regex', ''))}, " \
                         f"{_literal(args.get('replace', ''))})"
        elif kind in ("TransformMapAdd", "TransformMapMult"):
            args = transformation.get("mapAddArgs" if kind == "TransformMapAdd" else "mapMultArgs") or {}
            op = "+" if kind == "TransformMapAdd" else "*"
            expression = f"transform({source}, x -> x {op} {_number(args.get('value', 0))})"
        elif kind == "TransformSum":
            expression = f"aggregate({source}, 0, (acc, x) -> acc + x)"
        elif kind == "TransformCount":
            expression = f"size({source})"
        elif kind in ("TransformPopTail", "TransformPopHead") and str(spec.get("sourceField", "")).startswith(
                "internal:"):
            self._warn(name, f"{kind} of {spec.get('sourceField')} is left out: that field is binge's own output "
                       "(its entwine's receipts); edgewise's entwine writes its receipt under its `into` field")
            return None
        elif kind in ("TransformPopTail", "TransformPopHead"):
            expression = f"element_at({source}, {-1 if kind == 'TransformPopTail' else 1})"
        else:
            self._warn(name, f"transformation {kind} of {spec.get('sourceField')} is left out: it has no edgewise "
                       "expression (binge's map and folds run code by path); use a spawn step or a step plugin")
            return None
        when = self.condition(transformation.get("condition"))
        if when:
            target = _field(str(spec.get("targetField")))
            expression = f"CASE WHEN {when} THEN {expression} ELSE {target} END"
        return expression

    def _continuation(self, name: str, body: dict[str, Any]) -> list[Step]:
        where = self.condition(body.get("condition")) or "true"
        return [Step("gate", {"id": self._id(name), "where": where},
                     ["binge's continuation goes on only where its condition holds: a gate"])]

    def _entwine(self, name: str, body: dict[str, Any]) -> list[Step]:
        timeline = f"timelines/{body.get('subStreamID') or self._id(name)}"
        config = self._with_when({"id": self._id(name), "timeline": timeline,
                                  "key": str(body.get("pemPath") or "entwine.key"), "into": "entwine"}, body)
        comments = ["the key must be an Ed25519 private key (`edgewise keygen FILE`); binge's PEM may be another kind",
                    "the timeline is a directory of signed, hash-chained entries (docs/entwine.md), not binge's "
                    "stream state store and object store"]
        if body.get("tickerEndpoint"):
            comments.append("binge ordered timelines through a ticker service; edgewise timelines entwine directly, "
                            "anchoring each other's heads (`anchors:`, `anchor_every:`): add the other timelines")
        return [Step("entwine", config, comments)]

    # ------------------------------------------------------------ sinks

    def _sink(self, process: str, connector: str) -> str:
        external = self.externals.get(connector)
        if connector in self.sink_ids:
            return self.sink_ids[connector]
        sink_id = self.sink_ids[connector] = self._id(f"{connector}-sink" if connector in self.definitions
                                                      else connector)
        kind = str((external or {}).get("externalType", "ExternalUnknown"))
        target = str((external or {}).get("connectionString", ""))
        if kind in SINK_TYPES and target:
            self.sinks[sink_id] = ({"id": sink_id, "type": "http", "url": target} if SINK_TYPES[kind] == "http"
                                   else {"id": sink_id, "type": "file", "path": target})
        else:
            self.sinks[sink_id] = {"id": sink_id, "type": "file", "path": f"out/{sink_id}"}
            why = f"external system {connector!r} ({kind})"
            self.sink_comments[sink_id] = f"{why} has no edgewise sink: written to a file spool instead"
            self._warn(process, f"{why} has no edgewise sink; the tee writes to the file spool out/{sink_id}")
        return sink_id

    # ------------------------------------------------------------ conditions

    def condition(self, condition: Any) -> str | None:
        if not condition:
            return None
        if "exists" in condition:
            ops = (condition["exists"] or {}).get("ops") or []
            parts = [f"{self.variable(str(op.get('key')))} "
                     f"{'IS NULL' if op.get('op') == 'NotExists' else 'IS NOT NULL'}" for op in ops]
            return " AND ".join(parts) or None
        if "expression" in condition:
            return self.expression(condition["expression"])
        return None

    def expression(self, node: dict[str, Any]) -> str:
        if "boolean" in node:
            return "true" if (node["boolean"] or {}).get("value") else "false"
        for kind, table in (("comparator", COMPARATORS), ("logical", LOGICAL), ("binary", BINARY)):
            if kind in node:
                body = node[kind]
                op = str(body.get("op"))
                if op == "Power" and kind == "binary":
                    return f"pow({self.operand(body.get('lhs'))}, {self.operand(body.get('rhs'))})"
                if op not in table:
                    raise ConfigError(f"unknown {kind} operator {op!r}")
                return f"({self.operand(body.get('lhs'))} {table[op]} {self.operand(body.get('rhs'))})"
        if "unary" in node:
            body = node["unary"]
            op = str(body.get("op"))
            inner = self.operand(body.get("rhs"))
            return {"Negation": f"(-{inner})", "Inversion": f"(~{inner})", "LogicalNot": f"(NOT {inner})"}.get(
                op, inner)
        raise ConfigError(f"an expression must be boolean, comparator, logical, binary or unary; found {node!r}")

    def variable(self, key: str) -> str:
        """A key a condition reads. binge's ``internal:completion:<name>`` ("triggered", "completed") is the status
        edgewise's `complete` step writes under its `into`; any other ``internal:`` key is binge's own bookkeeping,
        which edgewise does not set: refused by name (``_InternalKey``)."""
        if key.startswith("internal:"):
            completion = key.removeprefix("internal:completion:")
            if completion != key and completion in self.completions:
                return f"{_field(self.completions[completion])}.status"
            raise _InternalKey(key)
        return _field(key)

    def operand(self, operand: Any) -> str:
        operand = operand or {}
        if "expression" in operand:
            return self.expression(operand["expression"])
        if "variable" in operand:
            return self.variable(str((operand["variable"] or {}).get("name")))
        if "numeric" in operand:
            return _number(operand["numeric"])
        return _literal(operand.get("literal", ""))


class _InternalKey(Exception):
    """A condition reads a binge-internal key the importer cannot translate."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


_EXISTS_NOTE = ("binge's Exists means the key is present; IS NOT NULL also treats a key holding null as missing")


def _field(path: str) -> str:
    """A binge key (dotted for nested objects) as an edgewise field reference."""
    return ".".join(p if _plain_name(p) else f"`{p.replace('`', '``')}`" for p in path.split("."))


def _plain_name(part: str) -> bool:
    """Whether a key can stand unquoted in an expression: an identifier that is no SQL keyword (GitHub's
    `commit`, say, must be written `commit` in backquotes)."""
    from sqlglot.tokenizer_core import TokenType

    from edgewise.expr.dialect import EdgewiseSpark

    if not _IDENTIFIER.match(part):
        return False
    tokens = EdgewiseSpark().tokenize(part)
    return len(tokens) == 1 and tokens[0].token_type == TokenType.VAR


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _number(value)
    return quote(str(value))  # expressions are Spark SQL: its string literal


def _number(value: Any) -> str:
    number = float(value)
    return str(int(number)) if number.is_integer() else repr(number)


def convert(doc: Any) -> Converted:
    if not isinstance(doc, dict):
        raise ConfigError("not an agglo/binge configuration: the document is not a JSON object")
    return _Converter(doc).convert()
