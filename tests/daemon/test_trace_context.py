"""A request's W3C `traceparent` is continued: the pipeline and step spans run in the caller's trace (checked with
the OpenTelemetry SDK's in-memory exporter), and the http sink's requests carry the pipeline span as their parent.
End to end, through `edgewise serve --trace console`: ingest keeps the header with the queue entry, the worker's
spans continue it, the sink's request carries it on."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from edgewise.config import load_text_plan
from edgewise.daemon.telemetry import StepMeter
from edgewise.engine.local import LocalEngine
from edgewise.events import Batch
from edgewise.tracecontext import incoming, parent_of
from tests.daemon.helpers import wait_for

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{PARENT}-01"


class Capture(ThreadingHTTPServer):
    """A local HTTP server that keeps the headers of every request (the http sink's target)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, str]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(handler) -> None:  # `handler`: the request handler; `self` is the server
                handler.rfile.read(int(handler.headers.get("content-length", 0)))
                self.requests.append({k.lower(): v for k, v in handler.headers.items()})
                handler.send_response(200)
                handler.end_headers()

            def log_message(handler, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


@pytest.fixture
def capture() -> Iterator[Capture]:
    server = Capture()
    yield server
    server.shutdown()
    server.server_close()


def pipeline(url: str) -> str:
    return (f"version: 1\npipelines:\n  - id: p\n    steps:\n      - annotate: {{id: tag, set: {{seen: 'true'}}}}\n"
            f"    to: [hook]\nsinks:\n  - {{id: hook, type: http, url: '{url}'}}\n")


@pytest.mark.parametrize("header", ["", "garbage", f"00-{'0' * 32}-{PARENT}-01", f"00-{TRACE}-{'0' * 16}-01"])
def test_only_a_valid_traceparent_is_kept(header: str) -> None:
    assert incoming({"traceparent": header} if header else {}, {"a": 1}) == {"a": 1}
    assert incoming({"traceparent": TRACEPARENT.upper(), "tracestate": "k=v"}, None) == {
        "traceparent": TRACEPARENT, "tracestate": "k=v"}


def test_the_pipeline_spans_continue_the_callers_trace_and_the_sink_carries_it(capture: Capture) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter = StepMeter(provider.get_tracer("test"))
    other = f"00-{'1' * 32}-{'2' * 16}-01"
    meter.parent = parent_of([{"traceparent": TRACEPARENT}, None, {"traceparent": other}])
    engine = LocalEngine(load_text_plan(pipeline(capture.url)), instrument=meter)
    engine.open()
    engine.process(Batch([{"n": 1}, {"n": 2}], source="http", ingest_time_us=0, event_times=[0, 0],
                         ids=["http:1", "http:2"]))
    engine.close()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    run, step = spans["pipeline p"], spans["step tag"]
    assert f"{run.context.trace_id:032x}" == TRACE and f"{run.parent.span_id:016x}" == PARENT
    assert [f"{link.context.trace_id:032x}" for link in run.links] == ["1" * 32]  # the batch's other entry
    assert step.context.trace_id == run.context.trace_id and step.parent.span_id == run.context.span_id
    assert len(capture.requests) == 1
    assert capture.requests[0]["traceparent"] == f"00-{TRACE}-{run.context.span_id:016x}-01"


def test_without_a_tracer_the_sink_sends_no_traceparent(capture: Capture) -> None:
    engine = LocalEngine(load_text_plan(pipeline(capture.url)))
    engine.open()
    engine.process(Batch([{"n": 1}], source="http", ingest_time_us=0, event_times=[0], ids=["http:1"]))
    engine.close()
    assert "traceparent" not in capture.requests[0]


@pytest.mark.slow
def test_a_daemon_continues_an_incoming_trace_to_its_http_sink(capture: Capture, tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(pipeline(capture.url))
    log = tmp_path / "daemon.log"
    with open(tmp_path / "spans.txt", "wb") as out, open(log, "wb") as err:  # the console exporter: stdout
        daemon = subprocess.Popen([sys.executable, "-m", "edgewise", "serve", str(tmp_path / "p.yaml"), "--port",
                                   "0", "--data-dir", str(tmp_path / "data"), "--trace", "console", "--protect",
                                   "none"], stdout=out, stderr=err)
    try:
        wait_for(lambda: re.search(r"listening url=(\S+)", log.read_text()), what="listening")
        url = re.search(r"listening url=(\S+)", log.read_text()).group(1)  # type: ignore[union-attr]
        wait_for(lambda: httpx.get(f"{url}/readyz").status_code == 200, what="ready")
        reply = httpx.post(f"{url}/v1/events", content=b'{"n": 1}', timeout=10,
                           headers={"content-type": "application/json", "traceparent": TRACEPARENT})
        assert reply.status_code == 202, reply.text
        wait_for(lambda: len(capture.requests) == 1, what="the sink's request")
        assert capture.requests[0]["traceparent"].startswith(f"00-{TRACE}-")
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
    spans = [json.loads(chunk) for chunk in re.findall(r"^\{.*?^\}", (tmp_path / "spans.txt").read_text(),
                                                          re.S | re.M)]
    runs = [s for s in spans if s["name"] == "pipeline p"]
    assert len(runs) == 1 and runs[0]["context"]["trace_id"] == f"0x{TRACE}"
    assert runs[0]["parent_id"] == f"0x{PARENT}"
    assert capture.requests[0]["traceparent"] == f"00-{TRACE}-{runs[0]['context']['span_id'][2:]}-01"
