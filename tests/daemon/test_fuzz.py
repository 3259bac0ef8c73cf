"""Property-based fuzzing of the daemon's HTTP API with schemathesis, driven by the daemon's own /openapi.json:
no 5xx, responses as documented (status codes, content types, schemas), 405 with Allow for other methods, and
the daemon still healthy afterwards."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import need


@pytest.mark.slow
def test_schemathesis_finds_no_server_error(start_daemon, tmp_path: Path, monkeypatch) -> None:
    """With the daemon's default read protection (the signed source protects state and queue) and a read token."""
    monkeypatch.setenv("EW_FUZZ_READ", "r3ad")
    st = shutil.which("schemathesis") or str(Path(sys.executable).parent / "schemathesis")
    need(Path(st).exists(), "schemathesis (pip install schemathesis)")
    d = start_daemon(f"""
version: 1
sources:
  - {{id: api, type: http}}
  - {{id: hooks, type: http, signature: github, secret: s3cret}}
pipelines:
  - id: p
    steps:
      - aggregate: {{id: totals, key: [dev], aggs: {{n: "count()"}}, into: agg}}
    to: [out]
sinks: [{{id: out, type: file, path: {tmp_path / 'out'}}}]
""", read_token_env="EW_FUZZ_READ", protect=None)
    # a valid read token, then an invalid one (protected reads answer 403: fewer examples reach further)
    for token, examples in (("r3ad", "60"), ("wrong", "15")):
        result = subprocess.run(
            [st, "run", f"{d.url}/openapi.json", "--checks", "all", "--max-examples", examples, "--seed", "20261121",
             "--request-timeout", "10", "--generation-deterministic", "-H", f"Authorization: Bearer {token}"],
            capture_output=True, text=True, timeout=600, cwd=tmp_path)  # its cache (.schemathesis/) goes there
        assert result.returncode == 0, token + result.stdout[-4000:] + result.stderr[-2000:]
        assert "passed" in result.stdout
    assert d.client.get("/v1/queue").status_code == 401  # protected, and schemathesis got in with the token
    assert d.client.get("/healthz").status_code == 200
    assert d.client.get("/readyz").status_code == 200
    assert "Traceback" not in d.log.getvalue()
