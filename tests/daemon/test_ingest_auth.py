"""Issue 14: every ingest route honours its source's authentication. A matrix over the routes (``/v1/events`` naming
a source, the same with the envelope that carries chosen ids, ``/v1/webhooks/<id>``, and ``/v1/events`` naming
none) x each source's setting (none, bearer token, GitHub signature, generic HMAC, mesh peer) x right, wrong and
missing credentials. It checks the reply, that the events queued move by exactly what was accepted (the daemon's
count of events committed to the queue), and that what reaches the sink through the queue is exactly the accepted
events, by id."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.test_api import read_spool

SECRET = "hub-secret"
TOKENS = {"tok": "t-tok", "peer": "t-peer"}
PIPELINE = """
version: 1
sources:
  - {{id: open, type: http, anonymous: true}}
  - {{id: tok, type: http, tokens: [t-tok]}}
  - {{id: gh, type: http, signature: github, secret: {secret}}}
  - {{id: hm, type: http, signature: hmac-sha256, secret: {secret}, signature_header: X-Sig}}
  - {{id: peer, type: http, mesh: true, tokens: [t-peer]}}
pipelines: [{{id: p, to: [out]}}]
sinks: [{{id: out, type: file, path: {out}, envelope: true}}]
"""
SOURCES = ["open", "tok", "gh", "hm", "peer"]
ROUTES = ["events", "envelope", "webhook", "unnamed"]
CREDENTIALS = ["right", "wrong", "missing"]


def _headers(source: str, credentials: str, body: bytes) -> dict[str, str]:
    """What a client sends for this source: a bearer token, or a signature over the body."""
    if credentials == "missing":
        return {}
    if source in ("gh", "hm"):
        key = SECRET if credentials == "right" else "not-the-secret"
        digest = hmac.new(key.encode(), body, hashlib.sha256).hexdigest()
        return {"X-Hub-Signature-256": f"sha256={digest}"} if source == "gh" else {"X-Sig": digest}
    token = TOKENS.get(source, "t-whatever") if credentials == "right" else "t-wrong"
    return {"Authorization": f"Bearer {token}"}


def expected(route: str, source: str, credentials: str) -> int:
    """The status each combination must get (docs/daemon.md, Authentication)."""
    if route == "unnamed":  # goes to `open`, the one source with anonymous: true, whatever credentials are sent
        return 202
    token = source in ("tok", "peer")
    if token and credentials == "missing":
        return 401
    if token and credentials == "wrong":
        return 403
    if route in ("events", "envelope") and source in ("gh", "hm"):
        return 403  # /v1/events carries no signature: a signed source takes webhooks only
    if route == "envelope" and source != "peer":
        return 403  # only a mesh peer may choose event ids
    if route == "webhook" and source in ("gh", "hm") and credentials != "right":
        return 401
    return 202


def _queued_so_far(d: Any) -> float:
    """Events committed to the queue since the daemon started, over every source."""
    text = d.client.get("/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("edgewise_ingest_events_total{"))


@pytest.fixture
def daemon(start_daemon: Any, tmp_path: Path) -> Any:
    return start_daemon(PIPELINE.format(secret=SECRET, out=tmp_path / "out"))


def test_every_route_honours_its_sources_authentication(daemon: Any, tmp_path: Path) -> None:
    accepted: list[str] = []
    n = itertools.count()
    for route, source, credentials in itertools.product(ROUTES, SOURCES, CREDENTIALS):
        i = next(n)
        if route == "envelope":
            body = json.dumps({"events": [{"id": f"chosen-{i}", "payload": {"i": i}}]}).encode()
            content_type = "application/vnd.edgewise.events+json"
        else:
            body = json.dumps({"i": i}).encode()
            content_type = "application/json"
        path = {"events": f"/v1/events?source={source}", "envelope": f"/v1/events?source={source}",
                "webhook": f"/v1/webhooks/{source}", "unnamed": "/v1/events"}[route]
        headers = _headers(source, credentials, body)
        if route == "webhook":
            headers["X-GitHub-Delivery"] = f"delivery-{i}"
        before = _queued_so_far(daemon)
        reply = daemon.post(path, body, content_type, **headers)
        after = _queued_so_far(daemon)
        want = expected(route, source, credentials)
        assert reply.status_code == want, (route, source, credentials, reply.text)
        assert after - before == (1 if want == 202 else 0), (route, source, credentials, "queued")
        if want == 202:
            accepted.extend(reply.json()["ids"])
        else:
            assert reply.json()["error"], reply.text  # a reason, not only a status
    daemon.wait_processed(len(accepted), timeout=120)  # a loaded machine: the worker may start late
    daemon.stop()
    written = [r["id"] for r in read_spool(tmp_path / "out")]
    assert sorted(written) == sorted(accepted)
    # the only chosen ids that got in are the mesh peer's, and an unnamed post landed in `open`
    assert sorted(i for i in written if i.startswith("chosen-")) == [
        f"chosen-{i}" for i, (r, s, c) in enumerate(itertools.product(ROUTES, SOURCES, CREDENTIALS))
        if r == "envelope" and s == "peer" and c == "right"]
    assert any(i.startswith("open:") for i in written)


@pytest.mark.parametrize(("sources", "status"), [
    # no source requires credentials: a post that names none goes to the first one
    ("[{id: a, type: http}, {id: b, type: http}]", 202),
    # one requires a token: a post that names none is refused, unless a source says anonymous: true
    ("[{id: a, type: http}, {id: b, type: http, tokens: [t]}]", 403),
    ("[{id: a, type: http, signature: github, secret: s}]", 403),
    ("[{id: b, type: http, tokens: [t]}, {id: a, type: http, anonymous: true}]", 202),
])
def test_a_post_that_names_no_source(start_daemon: Any, tmp_path: Path, sources: str, status: int) -> None:
    d = start_daemon(f"version: 1\nsources: {sources}\npipelines: [{{id: p, to: [out]}}]\n"
                     f"sinks: [{{id: out, type: file, path: {tmp_path / 'out'}}}]\n")
    before = _queued_so_far(d)
    r = d.post("/v1/events", "{}")
    assert r.status_code == status, r.text
    assert _queued_so_far(d) - before == (1 if status == 202 else 0)
    if status == 202:
        assert r.json()["ids"][0].startswith("a:")


@pytest.mark.parametrize(("source", "message"), [
    ("{id: a, type: http, anonymous: true, tokens: [t]}", "anonymous: true takes requests without credentials"),
    ("{id: a, type: http, mesh: true}", "mesh: true lets a peer choose event ids, so it needs a token"),
    ("{id: a, type: http, mesh: true, tokens: [t], signature: github, secret: s}", "a mesh source authenticates"),
])
def test_contradictory_source_settings_are_refused(tmp_path: Path, source: str, message: str) -> None:
    from edgewise.config import load_text_plan
    from edgewise.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_text_plan(f"version: 1\nsources: [{source}]\npipelines: [{{id: p}}]\n", "p.yaml", str(tmp_path))
