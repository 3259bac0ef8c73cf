"""The shape of the pipeline file: the top level, pipelines, and the fields every step, source and sink shares.

Each plugin adds its own fields by subclassing ``StepConfig``, ``SourceConfig`` or ``SinkConfig``; that one class
is the single source of validation, JSON Schema and reference docs. The classes are declared as pydantic models are,
through ``declare.py``, so a run of values validated before does not import pydantic. Expression fields use the
``Expr`` type, so an expression that does not parse is reported at the exact field that holds it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

from edgewise.declare import AfterValidator, Field, Model, WithJsonSchema, model_validator
from edgewise.durations import Duration
from edgewise.errors import ConfigError

ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]*$"


def checked_by(parse: Callable[[str], object]) -> Callable[[str], str]:
    """A pydantic validator that runs ``parse`` on the text at load time: its ``ConfigError`` becomes the field's
    validation error (and so gets the field's file, line and path)."""

    def check(text: str) -> str:
        try:
            parse(text)
        except ConfigError as exc:
            raise ValueError(exc.message) from None
        return text

    return check


def _readable_schema(ddl: str | None) -> str | None:
    from edgewise.schema import declared_columns

    if ddl is not None:
        declared_columns(ddl)  # a ValueError says which column cannot be read
    return ddl


def _compile(text: str) -> object:
    from edgewise.expr.compiler import compile_expression
    from edgewise.expr.tree_cache import parse_node
    from edgewise.expr.typecheck import check_types

    compiled = compile_expression(text)
    check_types(parse_node(text), text)
    return compiled


def _condition(text: str) -> object:
    from edgewise.expr.typecheck import check_condition

    compiled = _compile(text)
    check_condition(text)
    return compiled


Expr = Annotated[
    str,
    AfterValidator(checked_by(_compile)),
    WithJsonSchema({"type": "string", "description": "a Spark SQL expression, e.g. \"speed > 10 AND line = '55'\""}),
]
"""A field that holds a Spark SQL expression; checked (parsed, functions and arity resolved, the types the text
decides: ``expr/typecheck.py``) at load time."""

Condition = Annotated[
    str,
    AfterValidator(checked_by(_condition)),
    WithJsonSchema({"type": "string", "description": "a Spark SQL condition (BOOLEAN), e.g. \"speed > 10\""}),
]
"""An expression that must be BOOLEAN: checked like ``Expr``, and rejected where the text makes it another type."""

Id = Annotated[str, Field(pattern=ID_PATTERN, max_length=128, description="a stable, unique identifier")]


class RetryPolicy(Model):
    """How often to try again, and how long to wait between tries (doubling up to ``max_backoff``)."""

    attempts: int = Field(default=3, ge=1, le=100, description="total tries, the first included")
    backoff: Duration = Field(default=100_000, description="wait before the second try; doubles after each try")
    max_backoff: Duration = Field(default=10_000_000, description="the longest wait between two tries")


class StepConfig(Model):
    """Fields every step has."""

    id: Id
    when: Condition | None = Field(default=None, description="run the step only where this is TRUE; other events pass "
                                   "unchanged")
    retry: RetryPolicy | None = Field(default=None, description="try the step again on failure before on_error applies")
    on_error: str = Field(
        default="fail",
        description="what happens to an event the step fails on: 'fail' (reported; exit code 1), 'skip' "
        "(dropped silently) or the id of a sink that receives it as a dead letter with the error",
    )

    def sink_references(self) -> list[tuple[str, str]]:
        """(field, sink id) pairs this step names besides ``on_error``; checked at load time."""
        return []


class SourceConfig(Model):
    """Fields every source has."""

    is_link: ClassVar[bool] = False
    """A hub's end of a link (``placement.py``): Spark types its fields by their use, not from a sample, unwraps
    the edge's envelopes and routes its heartbeats past the steps (their event time moves the watermark)."""

    id: Id
    type: str
    declared_schema: Annotated[str | None, AfterValidator(_readable_schema)] = Field(
        default=None, alias="schema", description="a DDL schema of the events' top-level fields (\"speed DOUBLE, line "
        "STRING\"): Spark reads field references at those types, and on both engines an event whose declared "
        "field holds a value of another kind (text in a DOUBLE, a number in a STRING) is malformed input. Without "
        "it Spark takes the types from the input data (see docs/spark.md)")
    idle_timeout: Duration | None = Field(
        default=None, description="edge daemon: once every source has been quiet this long, event time moves on with "
        "processing time, so windows close and event-time completions time out (default 30s; 0: never)")
    idle_speed: float = Field(default=1.0, gt=0, allow_inf_nan=False, description="edge daemon: how fast event time "
                              "moves on once every source is idle, in times the clock (1: real time). A source fed by "
                              "a recording replayed at speed N keeps its recorded pace with N")


class SinkConfig(Model):
    """Fields every sink has."""

    id: Id
    type: str
    retry: RetryPolicy = Field(
        # made, not validated (5 tries, 200 ms doubling up to 10 s, in µs): a default built in code builds no schema
        default_factory=lambda: RetryPolicy.model_construct(attempts=5, backoff=200_000, max_backoff=10_000_000),
        description="retries for a failed write, with exponential backoff")
    on_error: str = Field(
        default="fail",
        description="after the retries: 'fail' (the run fails) or the id of another sink that receives the "
        "undelivered events as dead letters",
    )


class PipelineConfig(Model):
    """One pipeline: its steps in order and the sinks its results go to (stdout when ``to`` is empty)."""

    id: Id
    description: str | None = None
    steps: list[Any] = Field(default_factory=list, description="steps, each a one-key map: "
                                        "`- filter: {id: ..., where: ...}`")
    to: list[str] = Field(default_factory=list, description="sink ids; without any, results go to stdout")
    hub_from: Id | None = Field(default=None, description="the id of one of this pipeline's steps: it and the steps "
                                "after it (and `to`) run at the hub (`edgewise spark`), the steps before it at the "
                                "edge (`edgewise serve`), the `link` between them; `edgewise run` runs it all "
                                "(docs/placement.md)")
    placement: Literal["auto"] | None = Field(default=None, description="auto: the stateless steps before the first "
                                              "stateful one run at the edge, the rest at the hub (as `hub_from` that "
                                              "step); a pipeline without a stateful step runs at the edge")

    @model_validator(mode="after")
    def _one_placement(self) -> PipelineConfig:
        if self.hub_from is not None and self.placement is not None:
            raise ValueError("give either `hub_from` (a step id) or `placement: auto`, not both")
        return self


class SpoolLinkConfig(Model):
    """The link as a directory of sealed NDJSON segments, one folder per split pipeline."""

    type: Literal["spool"] = "spool"
    path: str = Field(default="edgewise-link", description="the link's directory, relative to the pipeline file; the "
                      "edge writes it, the hub reads it (shared storage where they are different machines)")
    max_age: Duration = Field(default=1_000_000, description="seal a segment this long after its first event at the "
                              "latest (a daemon also seals at each commit): how long the hub may wait for an event")


class NatsLinkConfig(Model):
    """The link as a JetStream stream; each split pipeline publishes on ``<subject>.<pipeline id>``."""

    type: Literal["nats"]
    url: str = Field(default="nats://127.0.0.1:4222", description="server URL")
    stream: str = Field(min_length=1, description="the JetStream stream (it must capture `<subject>.>`)")
    subject: str = Field(min_length=1, description="the subjects' prefix: a pipeline's events go to "
                         "`<subject>.<pipeline id>`")


LinkConfig = Annotated[SpoolLinkConfig | NatsLinkConfig, Field(discriminator="type")]


class PipelineFileConfig(Model):
    """The top level of a pipeline file."""

    version: Literal[1] = Field(description="the file format version; always 1")
    name: str | None = Field(default=None, description="a name for this set of pipelines")
    description: str | None = None
    event_time: Expr | None = Field(
        default=None, description="expression giving each event's event time (a TIMESTAMP, timestamp text or epoch "
        "seconds); default: the ingestion time")
    sources: list[dict[str, Any]] = Field(default_factory=list, description="where events come from")
    state: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="state stores by name, e.g. {default: {type: sqlite, path: "
        "./state/edgewise.db}}; stateful steps use `default` unless they name another; without this section "
        "state is kept in memory only")
    pipelines: list[PipelineConfig] = Field(min_length=1, description="the pipelines; every event enters each")
    sinks: list[dict[str, Any]] = Field(default_factory=list, description="where results go")
    link: LinkConfig | None = Field(
        default=None, description="what carries events from the edge to the hub where a pipeline is split (`hub_from`, "
        "`placement`): {type: spool, path: DIR} (the default) or {type: nats, url, stream, subject}")
