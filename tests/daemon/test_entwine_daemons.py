"""Two edge daemons entwine each other: each appends its events to its own timeline and anchors the other's head
in every entry; ``edgewise verify`` then checks both chains and every anchor (docs/entwine.md)."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import orjson

from tests.daemon.helpers import DaemonProcess
from tests.test_cli import edgewise

PIPELINE = """
version: 1
sources: [{{id: http, type: http, anonymous: true}}]
pipelines:
  - id: p
    steps:
      - entwine: {{id: e, timeline: {me}, key: {me}.key, anchor_every: 1, anchors: [{other}], into: receipt}}
"""


def test_two_daemons_entwine_each_other_and_verify_checks_the_anchors(tmp_path: Path) -> None:
    keys = {}
    for name, other in (("a", "b"), ("b", "a")):
        done = edgewise("keygen", str(tmp_path / f"{name}.key"))
        assert done.returncode == 0, done.stderr
        keys[name] = done.stdout.decode().strip()
        (tmp_path / f"{name}.yaml").write_text(PIPELINE.format(me=name, other=other))
    daemons = {name: DaemonProcess(tmp_path / f"{name}.yaml", tmp_path / f"data-{name}") for name in "ab"}
    try:
        _feed_in_turns(daemons, tmp_path, turns=4, per_turn=3)
    finally:
        _stop(daemons)
    for name in "ab":
        done = edgewise("verify", str(tmp_path / name), "--pubkey", keys[name])
        assert done.returncode == 0, done.stdout
        entries = [orjson.loads(line) for line in (tmp_path / name / "entries.log").read_bytes().splitlines()]
        assert len(entries) == 12
        anchored = [a for e in entries for a in e["anchors"]]
        assert anchored and {a["timeline"] for a in anchored} == {keys["b" if name == "a" else "a"]}
        checked = re.search(rb"(\d+) anchors checked", done.stdout)
        assert checked and int(checked.group(1)) == len(anchored) and b"not checked" not in done.stdout, done.stdout


def _feed_in_turns(daemons: dict[str, DaemonProcess], tmp_path: Path, turns: int, per_turn: int) -> None:
    """Events to each daemon in turn, each batch entwined before the next daemon's: each one's entries anchor a
    head of the other that grew."""
    import httpx

    for turn in range(turns):
        for name, daemon in daemons.items():
            body = b"".join(orjson.dumps({"edge": name, "turn": turn, "i": i}) + b"\n" for i in range(per_turn))
            reply = httpx.post(f"{daemon.url}/v1/events", content=body,
                               headers={"content-type": "application/x-ndjson"}, timeout=30)
            assert reply.status_code in (200, 202), reply.text
            _wait_entries(tmp_path / name, per_turn * (turn + 1))


def _stop(daemons: dict[str, DaemonProcess]) -> None:
    for daemon in daemons.values():
        daemon.signal(signal.SIGTERM)
    for daemon in daemons.values():
        daemon.wait()


def _wait_entries(timeline: Path, n: int, timeout: float = 30) -> None:
    import time

    deadline = time.monotonic() + timeout
    log = timeline / "entries.log"
    while time.monotonic() < deadline:
        if log.exists() and len(log.read_bytes().splitlines()) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"{timeline} did not reach {n} entries")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_daemons_anchor_each_other_over_http_and_verify_reads_the_anchored_timeline(tmp_path: Path) -> None:
    """Anchors by URL (`/v1/timelines/<step>`): each daemon reads the other's head over HTTP, and `edgewise verify`
    fetches the anchored timeline from its daemon to check every anchor. Then one daemon's owner rewrites its
    history; the other's anchors, checked over HTTP, reveal it."""
    import httpx

    ports = {"a": _free_port(), "b": _free_port()}
    keys = {}
    for name, other in (("a", "b"), ("b", "a")):
        done = edgewise("keygen", str(tmp_path / f"{name}.key"))
        assert done.returncode == 0, done.stderr
        keys[name] = done.stdout.decode().strip()
        url = f"http://127.0.0.1:{ports[other]}/v1/timelines/e"
        (tmp_path / f"{name}.yaml").write_text(PIPELINE.replace("anchors: [{other}]", f'anchors: ["{url}"]')
                                               .format(me=name, other=other))
    daemons = {name: DaemonProcess(tmp_path / f"{name}.yaml", tmp_path / f"data-{name}", "--port", str(ports[name]))
               for name in "ab"}
    try:
        _feed_in_turns(daemons, tmp_path, turns=3, per_turn=2)
        listing = httpx.get(f"{daemons['a'].url}/v1/timelines", timeout=10).json()
        assert listing["e"]["entries"] == 6 and listing["e"]["head"]["timeline"] == keys["a"]
        for name in "ab":  # verified while both daemons serve their timelines
            done = edgewise("verify", str(tmp_path / name), "--pubkey", keys[name])
            entries = [orjson.loads(line) for line in (tmp_path / name / "entries.log").read_bytes().splitlines()]
            anchored = [a for e in entries for a in e["anchors"]]
            assert anchored and all(a["at"].startswith("http://127.0.0.1:") for a in anchored)
            checked = re.search(rb"(\d+) anchors checked", done.stdout)
            assert done.returncode == 0 and checked and int(checked.group(1)) == len(anchored), done.stdout
        # b's owner rewrites b's entry 0 and re-signs the chain with b's own key: b alone still verifies
        from tests.test_entwine import _resign

        _resign(tmp_path / "b", tmp_path / "b.key", 0, {"digest": "22" * 32})
        assert edgewise("verify", str(tmp_path / "b")).returncode == 0
        done = edgewise("verify", str(tmp_path / "a"))
        assert done.returncode == 1 and b"anchor" in done.stdout, done.stdout
    finally:
        _stop(daemons)
