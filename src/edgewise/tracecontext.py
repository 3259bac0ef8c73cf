"""W3C trace context across the daemon: a request's ``traceparent`` is kept with its queue entry, the worker's
pipeline spans continue that trace, and the http sink's requests carry the span they were sent from.

A client that traces its request (an OpenTelemetry-instrumented service posting events) then sees edgewise's work
on its events inside its own trace, and a service the http sink posts to continues it further. Without a tracer
(``serve --trace off``, the default) nothing here imports OpenTelemetry: the header is kept, nothing else costs.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$")


def incoming(headers: Mapping[str, str], meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """``meta`` with the request's ``traceparent`` (and ``tracestate``), when it has a valid one (the W3C form,
    ids not all zero); other values are ignored, as the W3C spec says a receiver must."""
    parent = (headers.get("traceparent") or "").strip().lower()
    if not _TRACEPARENT.match(parent):
        return meta
    kept: dict[str, Any] = {**(meta or {}), "traceparent": parent}
    state = headers.get("tracestate")
    if state:
        kept["tracestate"] = state[:512]
    return kept


def parent_of(metas: list[dict[str, Any] | None]) -> tuple[Any, list[Any]]:
    """For a group of queue entries run as one batch: the context to start the pipeline spans in (the first
    entry's trace) and links to the other entries' traces. ``(None, [])`` when none came with one."""
    carriers = [{k: m[k] for k in ("traceparent", "tracestate") if k in m} for m in metas if m and "traceparent" in m]
    if not carriers:
        return None, []
    from opentelemetry import trace
    from opentelemetry.propagate import extract

    contexts = [extract(c) for c in carriers]
    links = [trace.Link(trace.get_current_span(c).get_span_context()) for c in contexts[1:]]
    return contexts[0], links


def outgoing(headers: dict[str, str]) -> None:
    """Add the current span's ``traceparent`` to an outgoing request's headers, if a tracer is on and recording."""
    if "opentelemetry.trace" not in sys.modules:  # no tracer was ever made here: nothing to continue
        return
    from opentelemetry import trace
    from opentelemetry.propagate import inject

    if trace.get_current_span().get_span_context().is_valid:
        inject(headers)
