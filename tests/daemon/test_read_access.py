"""Read access: the daemon's state, queue, metrics, pages and live channels can require a read token; by default
state and queue do whenever a source requires credentials. Health and ingest are unaffected."""

from __future__ import annotations

import httpx
import pytest

SIGNED = """
version: 1
sources: [{{id: gh, type: http, signature: github, secret: s3cret}}, {{id: dev, type: http, tokens: [ingest-token]}}]
pipelines: [{{id: p, steps: [{{aggregate: {{id: totals, key: [k], aggs: {{n: count()}}, into: agg}}}}], to: [out]}}]
sinks: [{{id: out, type: file, path: {out}}}]
"""
OPEN = """
version: 1
pipelines: [{{id: p, steps: [], to: [out]}}]
sinks: [{{id: out, type: file, path: {out}}}]
"""
READS = {"state": "/v1/state/totals/a", "queue": "/v1/queue", "metrics": "/metrics", "ui": "/ui",
         "live": "/v1/live"}


def status(d, path: str, **headers: str) -> int:  # type: ignore[no-untyped-def]
    return int(d.client.get(path, headers=headers).status_code)


def test_by_default_state_and_queue_need_a_read_token_when_ingest_does(start_daemon, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EW_READ", "r3ad,other")
    d = start_daemon(SIGNED.format(out=tmp_path / "out"), read_token_env="EW_READ", protect=None)  # the default
    assert status(d, "/v1/queue") == 401 and status(d, "/v1/state/totals/a") == 401
    assert status(d, "/v1/queue", Authorization="Bearer wrong") == 403
    assert status(d, "/v1/queue", Authorization="Bearer ingest-token") == 403  # an ingest token reads nothing
    assert status(d, "/v1/queue", Authorization="Bearer r3ad") == 200
    assert status(d, "/v1/queue", Authorization="Bearer other") == 200
    for open_path in ("/healthz", "/readyz", "/openapi.json", "/metrics", "/ui", "/v1/live"):
        assert status(d, open_path) == 200, open_path
    # ingest is untouched: its own credentials, not the read token
    assert d.post("/v1/events?source=dev", '{"k": "a"}', Authorization="Bearer ingest-token").status_code == 202
    assert d.post("/v1/events?source=dev", '{"k": "a"}', Authorization="Bearer r3ad").status_code == 403


def test_without_a_read_token_a_protected_group_is_closed_and_says_how_to_open_it(start_daemon, tmp_path) -> None:
    d = start_daemon(SIGNED.format(out=tmp_path / "out"), protect=None)
    r = d.client.get("/v1/queue", headers={"Authorization": "Bearer anything"})
    assert r.status_code == 401 and "--read-token-env" in r.json()["error"]


@pytest.mark.parametrize("group", sorted(READS))
def test_each_group_can_be_protected_alone(start_daemon, tmp_path, monkeypatch, group) -> None:
    monkeypatch.setenv("EW_READ", "r3ad")
    d = start_daemon(OPEN.format(out=tmp_path / "out"), read_token_env="EW_READ", protect=frozenset({group}))
    for other, path in READS.items():
        if other == "state":
            continue  # no stateful step here: 404 either way once admitted
        expected = 401 if other == group else 200
        assert status(d, path) == expected, (group, other)
        assert status(d, path, Authorization="Bearer r3ad") == 200
    if group == "state":
        assert status(d, READS["state"]) == 401
        assert status(d, READS["state"], Authorization="Bearer r3ad") not in (401, 403)  # admitted


def test_a_browser_opens_a_protected_page_once_with_the_token(start_daemon, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EW_READ", "r3ad")
    d = start_daemon(OPEN.format(out=tmp_path / "out"), read_token_env="EW_READ",
                     protect=frozenset({"ui", "queue", "live"}))
    assert status(d, "/ui/map?token=wrong") == 403
    with httpx.Client(base_url=d.url) as first_visit:
        opened = first_visit.get("/ui/map?token=r3ad")
    assert opened.status_code == 303 and opened.headers["location"] == "/ui/map"  # the token leaves the address
    cookie = opened.headers["set-cookie"]
    assert "edgewise_read=r3ad" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    browser = httpx.Client(base_url=d.url, cookies={"edgewise_read": "r3ad"})
    assert browser.get("/ui/map").status_code == 200
    assert browser.get("/v1/queue").status_code == 200  # the page's own requests carry the cookie
    assert browser.get("/v1/live/positions/recent").status_code == 200
    browser.close()
    with httpx.Client(base_url=d.url) as stranger:
        assert stranger.get("/ui/map").status_code == 401


def test_serve_refuses_an_unknown_group_and_a_missing_token_variable(tmp_path) -> None:
    import subprocess
    import sys

    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(OPEN.format(out=tmp_path / "out"))
    serve = [sys.executable, "-m", "edgewise", "serve", str(pipeline), "--port", "0", "--data-dir", str(tmp_path)]
    bad_group = subprocess.run([*serve, "--protect", "queue,secrets"], capture_output=True, text=True, timeout=60)
    assert bad_group.returncode == 2 and "unknown endpoint group secrets" in bad_group.stderr
    no_var = subprocess.run([*serve, "--read-token-env", "EW_NOT_SET_ANYWHERE"], capture_output=True, text=True,
                            timeout=60)
    assert no_var.returncode == 2 and "EW_NOT_SET_ANYWHERE: the environment variable is not set" in no_var.stderr
    assert "Traceback" not in bad_group.stderr + no_var.stderr
