"""The commands a core install offers work with only the core install's packages (tests/core_only.py): a new user
runs `pip install edgewise` or `make run`, not the dev environment the other tests run in. The showcase's daemon
and replay are checked the same way by tests/test_showcase.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.core_only import blocked_modules, core_distributions, core_only_env


def edgewise(tmp_path: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgewise", *args], input=stdin, capture_output=True, text=True,
                          env=core_only_env(tmp_path), cwd=tmp_path, timeout=120)


def test_the_guard_refuses_what_only_an_extra_installs(tmp_path: Path) -> None:
    assert {"pydantic", "sqlglot", "orjson", "starlette", "cryptography"} <= core_distributions()
    assert {"pyspark", "redis", "nats", "psycopg", "hypothesis"} <= blocked_modules()
    assert "paho" not in blocked_modules()  # MQTT is core: the showcase's ingestion path
    probe = ("import importlib, sys\n"
             "for m in ('pydantic', 'sqlglot', 'cryptography', 'paho.mqtt.client'): importlib.import_module(m)\n"
             "try:\n    import nats.js\nexcept ModuleNotFoundError as e:\n    print('refused', e.name)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=core_only_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "refused nats"


@pytest.mark.parametrize("args", [
    ("keygen", "edge.key"),
    ("validate", str(ROOT / "examples" / "hsl" / "live.yaml"), str(ROOT / "examples" / "ysb" / "pipeline.yaml")),
    ("explain", str(ROOT / "examples" / "hsl" / "live.yaml")),
    ("functions",),
    ("schema",),
], ids=lambda a: a[0])
def test_a_core_command_needs_no_extra(tmp_path: Path, args: tuple[str, ...]) -> None:
    done = edgewise(tmp_path, *args)
    assert done.returncode == 0, done.stderr


def test_a_run_with_an_entwine_step_needs_no_extra(tmp_path: Path) -> None:
    assert edgewise(tmp_path, "keygen", "edge.key").returncode == 0
    (tmp_path / "p.yaml").write_text(
        "version: 1\npipelines:\n  - id: signed\n    steps:\n"
        "      - entwine: {id: chain, timeline: timeline, key: edge.key}\n")
    done = edgewise(tmp_path, "run", "p.yaml", stdin='{"n": 1}\n{"n": 2}\n')
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 2


def test_what_needs_an_extra_says_which_one(tmp_path: Path) -> None:
    """On the core install, the Spark engine and a connector of an extra are refused with the pip command that
    installs what they need, not a ModuleNotFoundError."""
    done = edgewise(tmp_path, "spark", str(ROOT / "examples" / "ysb" / "windowed.yaml"), "--once")
    assert done.returncode != 0 and "pip install 'edgewise[spark]'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "ModuleNotFoundError" not in done.stderr
    (tmp_path / "p.yaml").write_text("version: 1\npipelines: [{id: p, steps: [], to: [cache]}]\n"
                                     "sinks: [{id: cache, type: redis, stream: s}]\n")
    done = edgewise(tmp_path, "run", "p.yaml", stdin='{"a": 1}\n')
    assert done.returncode == 2 and "pip install 'edgewise[redis]'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
