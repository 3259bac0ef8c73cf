"""A per-source request rate limit: 429 with Retry-After, nothing queued, and unauthenticated requests do not use
up a source's budget."""

from __future__ import annotations

from edgewise.daemon.ratelimit import TokenBucket, retry_after
from tests.daemon.helpers import wait_for


def test_the_bucket_grants_a_burst_then_the_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=2.0, burst=3, clock=lambda: now[0])
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == 0.5  # the next token in half a second; nothing taken
    now[0] = 0.25
    assert bucket.take() == 0.25
    now[0] = 0.5
    assert bucket.take() == 0.0
    now[0] = 100.0  # a long quiet fills the bucket to its burst, no more
    assert [bucket.take() for _ in range(4)][3] > 0
    assert [retry_after(w) for w in (0.01, 1.0, 1.2)] == ["1", "1", "2"]


def test_a_source_over_its_rate_gets_429_and_nothing_is_queued(start_daemon, tmp_path) -> None:
    d = start_daemon(f"""
version: 1
sources:
  - {{id: devices, type: http, tokens: [t0k3n], rate_limit: 1, burst: 2}}
pipelines: [{{id: p, steps: [], to: [out]}}]
sinks: [{{id: out, type: file, path: {tmp_path / 'out'}}}]
""")
    post = lambda token: d.post("/v1/events?source=devices", '{"n": 1}', Authorization=f"Bearer {token}")  # noqa: E731
    assert [post("wrong").status_code for _ in range(5)] == [403] * 5  # these take nothing from the budget
    before = d.client.get("/v1/queue").json()["next_event"]
    replies = [post("t0k3n") for _ in range(3)]
    assert [r.status_code for r in replies] == [202, 202, 429]
    assert replies[2].headers["Retry-After"] == "1"
    assert "takes 1 requests a second" in replies[2].json()["error"]
    assert d.client.get("/v1/queue").json()["next_event"] == before + 2  # the refused one was not queued
    refused = 0

    def accepted_again() -> bool:  # the bucket refills at 1 a second: asked again until it has
        nonlocal refused
        status = post("t0k3n").status_code
        refused += status == 429
        return status == 202

    wait_for(accepted_again, timeout=10, what="the budget to refill")
    assert refused >= 1  # not at once: the budget was spent
    assert d.client.get("/v1/queue").json()["next_event"] == before + 3  # the ones refused meanwhile were not queued


def test_oversized_headers_get_431_and_nothing_else_is_looked_at(start_daemon, tmp_path) -> None:
    d = start_daemon(f"""
version: 1
pipelines: [{{id: p, steps: [], to: [out]}}]
sinks: [{{id: out, type: file, path: {tmp_path / 'out'}}}]
""", max_header_bytes=4096)
    before = d.client.get("/v1/queue").json()["next_event"]
    big = d.post("/v1/events", '{"n": 1}', **{"X-Padding": "x" * 5000})
    assert big.status_code == 431 and "larger than 4096 bytes" in big.json()["error"]
    assert d.client.get("/healthz", headers={"X-Padding": "x" * 5000}).status_code == 431
    assert d.client.get("/v1/queue").json()["next_event"] == before
    assert d.post("/v1/events", '{"n": 1}', **{"X-Padding": "x" * 3000}).status_code == 202
