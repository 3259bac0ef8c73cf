"""``edgewise serve FILE --check-reload NEW``: the running file and NEW over the daemon's recent input, while the
daemon runs (docs/diff.md, docs/daemon.md)."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.daemon.helpers import InProcessDaemon
from tests.test_cli import edgewise

OLD = """
version: 1
sources: [{id: http, type: http, anonymous: true}]
pipelines:
  - id: speeds
    steps:
      - annotate: {id: kmh, set: {kmh: "spd * 3.6"}}
      - filter: {id: fast, where: "kmh > 20"}
"""


def test_check_reload_replays_the_daemons_recent_input_through_both_files(tmp_path: Path) -> None:
    (tmp_path / "old.yaml").write_text(OLD)
    (tmp_path / "same.yaml").write_text(OLD)
    (tmp_path / "new.yaml").write_text(OLD.replace("kmh > 20", "kmh > 30"))
    daemon = InProcessDaemon(tmp_path / "old.yaml", tmp_path / "data", keep_recent=2)
    try:
        requests = [[{"veh": v, "spd": s} for v, s in enumerate(speeds)]
                    for speeds in ([1.0, 7.0], [6.0, 9.0, 2.0], [8.0, 5.5], [10.0, 7.5, 3.0])]
        for body in requests:  # one queue entry each
            assert daemon.post("/v1/events", orjson.dumps(body)).status_code == 202
        daemon.wait_processed(sum(len(b) for b in requests))
        data = str(tmp_path / "data")
        same = edgewise("serve", str(tmp_path / "old.yaml"), "--data-dir", data, "--check-reload",
                        str(tmp_path / "same.yaml"))
        assert same.returncode == 0, same.stdout + same.stderr
        changed = edgewise("serve", str(tmp_path / "old.yaml"), "--data-dir", data, "--check-reload",
                           str(tmp_path / "new.yaml"), "--format", "json")
        assert changed.returncode == 1, changed.stdout + changed.stderr
        report = orjson.loads(changed.stdout)
    finally:
        daemon.stop()
    # the last two entries only (--keep-recent 2): speeds 8.0, 5.5, 10.0, 7.5, 3.0; above 20 km/h: 8.0 (28.8),
    # 10.0 (36) and 7.5 (27); above 30: 10.0 alone, so 8.0 and 7.5 are only in old
    kept = [e for body in requests[2:] for e in body]
    only_old = sorted(e["spd"] for e in kept if 20 < e["spd"] * 3.6 <= 30)
    text = orjson.dumps(report).decode()
    assert only_old == [7.5, 8.0] and all(f'"spd":{s}' in text for s in only_old)
    assert '"spd":1.0' not in text and '"spd":9.0' not in text  # older entries were not kept


def test_check_reload_without_recent_input_says_so(tmp_path: Path) -> None:
    (tmp_path / "old.yaml").write_text(OLD)
    done = edgewise("serve", str(tmp_path / "old.yaml"), "--data-dir", str(tmp_path / "none"), "--check-reload",
                    str(tmp_path / "old.yaml"))
    assert done.returncode == 2 and b"no daemon queue" in done.stderr and b"Traceback" not in done.stderr
