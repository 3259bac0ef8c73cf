"""The OpenAPI 3.1 description of the daemon's HTTP API, served at ``/openapi.json`` (and fuzzed against it in the
tests with schemathesis)."""

from __future__ import annotations

from typing import Any

from edgewise import __version__
from edgewise.daemon.live import CHANNEL_PATTERN

ERROR = {"type": "object", "required": ["error"], "properties": {
    "error": {"type": "string", "description": "what went wrong and what to do"},
    "problems": {"type": "array", "items": {"type": "string"}, "description": "each bad line or array index"}}}
EVENT = {"type": "object", "description": "one event: any JSON object", "additionalProperties": True}


def _error(description: str, retry: bool = False) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description,
                                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    if retry:
        response["headers"] = {"Retry-After": {"schema": {"type": "string"},
                                               "description": "seconds to wait before trying again"}}
    return response


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


READ_ERRORS = {
    "401": _error("this endpoint group is protected (--protect; by default state and queue when a source requires "
                  "credentials): send 'Authorization: Bearer <read token>'"),
    "403": _error("the read token is not accepted"),
}


INGEST_ERRORS = {
    "400": _error("a bad body: malformed JSON, not an object, invalid UTF-8, too deep, a number out of range; "
                  "nothing was queued"),
    "401": _error("authentication needed (bearer token, or a webhook signature missing or wrong)"),
    "403": _error("the token is not accepted by this source; or the request names no source and none takes "
                  "anonymous posts; or a source that requires a signature was posted to at /v1/events; or a source "
                  "that is not a mesh peer got events with their own ids"),
    "404": _error("no such http source"),
    "413": _error("the body or the number of events is over the source's limit"),
    "415": _error("unsupported content type"),
    "422": _error("stateless mode: a step failed on an event"),
    "431": _error("the request's headers are larger than --max-header-bytes"),
    "429": _error("the source's rate_limit is used up, the queue is above its high-water mark, or (stateless) too "
                  "many requests at once", True),
    "502": _error("stateless mode: a sink could not take the results"),
    "503": _error("recovering the queue after a start, or shutting down", True),
    "507": _error("the disk holding the queue is full; nothing was written", True),
}

ACCEPTED = _json("durably queued (after the commit); the ids the events got. Events whose chosen ids (a webhook "
                 "delivery, a mesh peer's) the source accepted within its redelivery window are listed under "
                 "`duplicates` and not queued again", {
    "type": "object", "required": ["accepted", "ids"], "properties": {
        "accepted": {"type": "integer", "minimum": 0}, "ids": {"type": "array", "items": {"type": "string"}},
        "duplicates": {"type": "array", "items": {"type": "string"}}}})

STATELESS_OK = _json("stateless mode: the pipelines ran; their results by pipeline id", {
    "type": "object", "required": ["results"], "properties": {"results": {"type": "object"}}})


def openapi_document(sources: list[str] | None = None, steps: list[str] | None = None) -> dict[str, Any]:
    """The API description; with the running daemon's http sources and stateful steps, their ids are listed as
    examples (so a client generator or a fuzzer reaches them)."""
    source_schema: dict[str, Any] = {"type": "string", "examples": sources} if sources else {"type": "string"}
    step_schema: dict[str, Any] = {"type": "string", "examples": steps} if steps else {"type": "string"}
    source_param = {"name": "source", "in": "query", "required": False, "schema": source_schema,
                    "description": "the http source to post to (default: the first one)"}
    events_body = {"required": True, "content": {
        "application/json": {"schema": {"oneOf": [{"$ref": "#/components/schemas/Event"},
                                                  {"type": "array", "minItems": 1,
                                                   "items": {"$ref": "#/components/schemas/Event"}}]}},
        "application/x-ndjson": {"schema": {"type": "string", "description": "one JSON object per line"}},
        "application/vnd.edgewise.events+json": {"schema": {
            "type": "object", "required": ["events"], "properties": {"events": {
                "type": "array", "minItems": 1, "items": {
                    "type": "object", "required": ["id", "payload"], "properties": {
                        "id": {"type": "string", "minLength": 1},
                        "event_time": {"type": "integer", "minimum": 0, "maximum": 2 ** 63 - 1,
                                       "description": "the origin's event time, microseconds"},
                        "payload": {"$ref": "#/components/schemas/Event"}}}},
                "source": {"type": "string", "minLength": 1, "description": "a mesh peer: the origin's source"},
                "ingest_time": {"type": "integer", "minimum": 0, "maximum": 2 ** 63 - 1,
                                "description": "a mesh peer: when the origin took the events, microseconds"}}}},
    }}
    channel_param = {"name": "channel", "in": "path", "required": True,
                     "schema": {"type": "string", "pattern": CHANNEL_PATTERN}}
    timeline_param = {"name": "step", "in": "path", "required": True, "schema": {"type": "string"}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "edgewise daemon", "version": __version__,
                 "description": "Ingest into a durable queue, webhooks, health, metrics, queue and state."},
        "paths": {
            "/v1/events": {"post": {
                "summary": "queue events (all-or-nothing per request)", "operationId": "postEvents",
                "parameters": [source_param], "requestBody": events_body,
                "responses": {"200": STATELESS_OK, "202": ACCEPTED, **INGEST_ERRORS}}},
            "/v1/webhooks/{source}": {"post": {
                "summary": "a webhook delivery; the raw body is kept and its signature verified",
                "operationId": "postWebhook",
                "parameters": [{"name": "source", "in": "path", "required": True, "schema": source_schema},
                               {"name": "X-GitHub-Event", "in": "header", "required": False,
                                "schema": {"type": "string"}},
                               {"name": "X-GitHub-Delivery", "in": "header", "required": False,
                                "schema": {"type": "string"}},
                               {"name": "X-Hub-Signature-256", "in": "header", "required": False,
                                "schema": {"type": "string"}}],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {}}}},
                "responses": {"200": STATELESS_OK, "202": ACCEPTED, **INGEST_ERRORS}}},
            "/healthz": {"get": {"summary": "the process is alive", "operationId": "healthz", "responses": {
                "200": _json("alive", {"type": "object", "required": ["status"]})}}},
            "/readyz": {"get": {"summary": "recovered and accepting events", "operationId": "readyz", "responses": {
                "200": _json("ready", {"type": "object", "required": ["status"]}),
                "503": _json("recovering or shutting down", {"type": "object", "required": ["status"]})}}},
            "/metrics": {"get": {"summary": "Prometheus metrics", "operationId": "metrics", "responses": {
                **READ_ERRORS,
                "200": {"description": "text exposition format",
                        "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
            "/v1/queue": {"get": {"summary": "queue depth, in-flight entries, dead letters, workers, sources",
                                  "operationId": "queue", "responses": {**READ_ERRORS,
                                      "200": _json("the queue", {"type": "object", "required": ["queued_events",
                                                                                                 "state"]})}}},
            "/v1/state/{step}/{key}": {"get": {
                "summary": "what a stateful step holds for one key (queryable state)", "operationId": "state",
                "parameters": [{"name": "step", "in": "path", "required": True, "schema": step_schema},
                               {"name": "key", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {
                    **READ_ERRORS,
                    "200": _json("the state", {"type": "object", "required": ["step", "key", "value"]}),
                    "404": _error("no such stateful step, or nothing for that key"),
                    "503": _error("no worker is running (starting or reloading)", False),
                    "504": _error("the worker did not answer in time")}}},
            "/openapi.json": {"get": {"summary": "this document", "operationId": "openapi", "responses": {
                "200": _json("OpenAPI 3.1", {"type": "object"})}}},
            "/ui": {"get": {"summary": "live dashboard", "operationId": "ui", "responses": {**READ_ERRORS,
                "200": {"description": "an HTML page", "content": {"text/html": {"schema": {"type": "string"}}}}}}},
            # GET /v1/live/{channel}/events (Server-Sent Events) is left out: OpenAPI cannot describe an endless
            # response (and a fuzzer would wait on it)
            "/v1/live": {"get": {"summary": "live result channels", "operationId": "liveChannels",
                                 "responses": {**READ_ERRORS,
                "200": _json("the channels", {"type": "object", "required": ["channels"]})}}},
            "/v1/live/{channel}/recent": {"get": {
                "summary": "a live channel's recent records", "operationId": "liveRecent",
                "parameters": [channel_param],
                "responses": {**READ_ERRORS,
                              "200": _json("the records", {"type": "array", "items": {"type": "object"}}),
                              "400": _error("not a channel name")}}},
            "/v1/live/{channel}": {"post": {
                "summary": "publish records on a live channel (from the daemon's own machine only)",
                "operationId": "livePublish", "parameters": [channel_param],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "array", "items": {"type": "object"}}}}},
                "responses": {"202": _json("published", {"type": "object", "required": ["published"]}),
                              "400": _error("not a channel name, or not a JSON array of objects"),
                              "403": _error("not from the daemon's own machine"),
                              "413": _error("the body is over 8 MiB")}}},
            "/ui/map": {"get": {"summary": "live map of results", "operationId": "uiMap", "responses": {**READ_ERRORS,
                "200": {"description": "an HTML page", "content": {"text/html": {"schema": {"type": "string"}}}}}}},
            "/v1/timelines": {"get": {"summary": "the entwine steps' timelines", "operationId": "timelines",
                                      "responses": {**READ_ERRORS, "200": _json("by step id", {"type": "object"})}}},
            "/v1/timelines/{step}": {"get": {
                "summary": "a timeline's timeline.json", "operationId": "timeline", "parameters": [timeline_param],
                "responses": {**READ_ERRORS, "200": _json("format, public key, fields", {"type": "object"}),
                              "404": _error("no such entwine step, or no entries yet")}}},
            "/v1/timelines/{step}/head": {"get": {
                "summary": "a timeline's last complete entry, as an anchor", "operationId": "timelineHead",
                "parameters": [timeline_param],
                "responses": {**READ_ERRORS,
                              "200": _json("the head", {"type": "object", "required": ["timeline", "pos", "hash"]}),
                              "404": _error("no such entwine step, or no entries yet")}}},
            "/v1/timelines/{step}/entries": {"get": {
                "summary": "a timeline's entries (NDJSON)", "operationId": "timelineEntries",
                "parameters": [timeline_param],
                "responses": {**READ_ERRORS,
                              "200": {"description": "one entry per line",
                                      "content": {"application/x-ndjson": {"schema": {"type": "string"}}}},
                              "404": _error("no such entwine step, or no entries yet")}}},
        },
        "components": {"schemas": {"Error": ERROR, "Event": EVENT}},
    }
