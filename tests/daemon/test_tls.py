"""TLS: the daemon serves HTTPS with a certificate made in the test (trustme), can require client certificates
(mutual TLS), and the mesh sink verifies the hub against its CA and presents its own certificate."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trustme

from tests.daemon.helpers import DaemonProcess, wait_processed
from tests.daemon.test_api import read_spool

HUB = """
version: 1
sources: [{{id: edges, type: http, mesh: true, tokens: [edge-token]}}, {{id: open, type: http, anonymous: true}}]
pipelines: [{{id: p, to: [out]}}]
sinks: [{{id: out, type: file, path: {out}, envelope: true, max_age: 100ms}}]
"""


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files."""
    ca = trustme.CA()
    files = {"ca": tmp_path / "ca.pem", "cert": tmp_path / "server.pem", "key": tmp_path / "server.key",
             "client": tmp_path / "client.pem", "client_key": tmp_path / "client.key"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.cert_chain_pems[0].write_to_path(str(files["cert"]))
    server.private_key_pem.write_to_path(str(files["key"]))
    client = ca.issue_cert("edge-1.example")
    client.cert_chain_pems[0].write_to_path(str(files["client"]))
    client.private_key_pem.write_to_path(str(files["client_key"]))
    return files


def client_context(pki: dict[str, Path], with_cert: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    if with_cert:
        context.load_cert_chain(str(pki["client"]), str(pki["client_key"]))
    return context


def start_hub(tmp_path: Path, pki: dict[str, Path]) -> DaemonProcess:
    """A daemon serving HTTPS that requires client certificates of the test CA; its events spooled to out/."""
    pipeline = tmp_path / "hub.yaml"
    pipeline.write_text(HUB.format(out=tmp_path / "out"))
    return DaemonProcess(pipeline, tmp_path / "hub", "--tls-cert", str(pki["cert"]), "--tls-key", str(pki["key"]),
                         "--tls-client-ca", str(pki["ca"]))


def test_https_with_a_certificate_and_mutual_tls(tmp_path: Path, pki: dict[str, Path]) -> None:
    daemon = start_hub(tmp_path, pki)
    try:
        assert daemon.url is not None and daemon.url.startswith("https://127.0.0.1:")
        with httpx.Client(base_url=daemon.url, verify=client_context(pki, with_cert=True)) as client:
            assert client.post("/v1/events", json={"n": 1}).status_code == 202
            wait_processed(client, 1)
        with httpx.Client(base_url=daemon.url, verify=client_context(pki, with_cert=False)) as anonymous, \
                pytest.raises(httpx.HTTPError):  # no client certificate: the handshake fails, nothing is read
            anonymous.post("/v1/events", json={"n": 2})
        with httpx.Client(base_url=daemon.url) as untrusting, pytest.raises(httpx.ConnectError):
            untrusting.get("/healthz")  # the system's CAs do not know the test CA
        with pytest.raises(httpx.HTTPError):  # plain HTTP to a TLS port
            httpx.get(daemon.url.replace("https", "http") + "/healthz", timeout=5)
    finally:
        daemon.kill()


def test_the_mesh_sink_verifies_the_hub_and_presents_its_certificate(tmp_path: Path, pki: dict[str, Path]) -> None:
    hub = start_hub(tmp_path, pki)
    try:
        edge = tmp_path / "edge.yaml"
        edge.write_text(f"""
version: 1
pipelines: [{{id: p, to: [hub]}}]
sinks:
  - {{id: hub, type: edgewise, url: "{hub.url}", source: edges, headers: {{Authorization: Bearer edge-token}},
     ca_file: ca.pem, client_cert: client.pem, client_key: client.key, retry: {{attempts: 1}}}}
""")
        events = "".join(json.dumps({"n": i}) + "\n" for i in range(3))
        done = subprocess.run([sys.executable, "-m", "edgewise", "run", str(edge)], input=events.encode(),
                              capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr
        with httpx.Client(base_url=hub.url, verify=client_context(pki, with_cert=True)) as client:
            wait_processed(client, 3)
        # without the CA the edge does not trust the hub: one clear line, not a traceback
        edge.write_text(edge.read_text().replace("ca_file: ca.pem, ", ""))
        refused = subprocess.run([sys.executable, "-m", "edgewise", "run", str(edge)], input=events.encode(),
                                 capture_output=True, timeout=120)
        assert refused.returncode != 0 and b"Traceback" not in refused.stderr
        assert b"CERTIFICATE_VERIFY_FAILED" in refused.stderr
    finally:
        hub.kill()
    assert sorted(r["payload"]["n"] for r in read_spool(tmp_path / "out")) == [0, 1, 2]


def test_tls_flags_are_checked_before_anything_starts(tmp_path: Path, pki: dict[str, Path]) -> None:
    pipeline = tmp_path / "hub.yaml"
    pipeline.write_text(HUB.format(out=tmp_path / "out"))
    for args, message in ((["--tls-cert", str(pki["cert"])], "--tls-cert and --tls-key go together"),
                          (["--tls-client-ca", str(pki["ca"])], "--tls-client-ca checks clients' certificates"),
                          (["--tls-cert", "nope.pem", "--tls-key", str(pki["key"])], "--tls-cert nope.pem: no such")):
        done = subprocess.run([sys.executable, "-m", "edgewise", "serve", str(pipeline), "--port", "0",
                               "--data-dir", str(tmp_path / "d"), *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
