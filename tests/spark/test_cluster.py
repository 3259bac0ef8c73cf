"""A real Spark cluster (issue 38, docs/deploy.md): a standalone master and two workers started with PySpark's own
launcher, each worker with its own work directory; executors take their Python, and edgewise, from a packed
environment (a virtualenv with the edgewise wheel, packed by venv-pack and shipped with ``--python-env``), not
from the driver's virtualenv. A windowed pipeline whose sink and one step run in Python on the executors goes
through both ``edgewise spark --master spark://`` and the ``spark-submit`` command ``--print-submit`` prints; both
give the local engine's results, by value."""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from edgewise.config import BuildContext, load
from edgewise.engine.local import LocalEngine
from edgewise.testing import FakeClock
from tests.conftest import ROOT
from tests.fuzz.oracles import canonical
from tests.spark.test_sources_and_sinks import ROOMS_PIPELINE

pytestmark = pytest.mark.slow

PIPELINE = ROOMS_PIPELINE + """\
      - transform: {id: strip, ops: [{drop_keys: "tmp_*"}]}   # no Spark form: the local step, on the executors
      - window: {id: per-k, key: [k], tumbling: 20s, aggs: {n: count(), s: sum(x), top: max(x)}}
    to: [db]
sinks:
  - {id: db, type: sqlite, path: OUT, table: w}                # written by the local sink, on the executors
"""

MARKER = "python-of-the-packed-env"
"""A file each Python process of the packed environment leaves in its working directory (a .pth line): proof that
the executors' Python came from the archive."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def packed_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv of its own with the edgewise wheel (and pandas and pyarrow, which Spark's Python steps need),
    packed by venv-pack."""
    where = tmp_path_factory.mktemp("env")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(where / "dist"), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    [wheel] = (where / "dist").glob("edgewise-*.whl")
    env = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=120)
    subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel), "pandas<3", "pyarrow>=15"],
                   check=True, capture_output=True, timeout=600)
    [site] = (env / "lib").glob("python3*/site-packages")
    (site / "edgewise-test-marker.pth").write_text(
        f"import os; open(os.path.join(os.getcwd(), {MARKER!r}), 'a').close()\n")
    archive = where / "edgewise-env.tar.gz"
    subprocess.run([str(Path(sys.executable).with_name("venv-pack")), "-p", str(env), "-o", str(archive),
                    "--compress-level", "1", "-q"], check=True, capture_output=True, timeout=300)
    return archive


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[Path]]]:
    """A standalone master and two one-core workers, each with its own work directory."""
    import pyspark

    home = Path(pyspark.__file__).parent
    where = tmp_path_factory.mktemp("cluster")
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    port = _free_port()
    master = f"spark://127.0.0.1:{port}"
    procs = []
    logs = []
    with open(where / "master.log", "wb") as log:
        procs.append(subprocess.Popen([str(home / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
                                       "--host", "127.0.0.1", "--port", str(port), "--webui-port", "0"],
                                      stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
    works = []
    for i in (1, 2):
        work = where / f"worker{i}"
        work.mkdir()
        works.append(work)
        logs.append(where / f"worker{i}.log")
        with open(logs[-1], "wb") as log:
            procs.append(subprocess.Popen(
                [str(home / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker", master, "--host",
                 "127.0.0.1", "--cores", "1", "--memory", "1g", "--work-dir", str(work), "--webui-port", "0"],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
    try:
        deadline = time.monotonic() + 120
        while not all("Successfully registered with master" in p.read_text(errors="replace") for p in logs):
            assert time.monotonic() < deadline, "the workers did not register: " + " ".join(
                p.read_text(errors="replace")[-2000:] for p in logs)
            assert all(p.poll() is None for p in procs), (where / "master.log").read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        yield master, works
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def _pipeline(tmp_path: Path, name: str) -> Path:
    (tmp_path / "in").mkdir(exist_ok=True)
    lines = [orjson.dumps({"t": 1000 + i * 3, "k": "abc"[i % 3], "x": i if i % 4 else i + 0.5, "tmp_a": 1,
                           "meta": {"tmp_b": 2, "keep": i}}) for i in range(60)]
    (tmp_path / "in" / "part-1.ndjson").write_bytes(b"\n".join(lines[:30]) + b"\n")
    (tmp_path / "in" / "part-2.ndjson").write_bytes(b"\n".join(lines[30:]) + b"\n")
    path = tmp_path / f"{name}.yaml"
    path.write_text(PIPELINE.replace("OUT", str(tmp_path / f"{name}.db")))
    return path


def _rows(db: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return sorted(canonical(orjson.loads(p)) for (p,) in conn.execute("SELECT payload FROM w"))


def _local(pipeline: Path) -> list[str]:
    plan = load(str(pipeline))
    LocalEngine(plan, clock=FakeClock(0), stdout=io.BytesIO()).run(
        [plan.source_classes[s.id](s, BuildContext(str(pipeline.parent))) for s in plan.sources])
    return _rows(Path(str(pipeline).replace(".yaml", ".db")))


def _run(command: list[str] | str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600, env=env,
                          shell=isinstance(command, str))


def test_a_standalone_cluster_runs_the_pipeline_from_a_packed_environment(
        spark: Any, cluster: tuple[str, list[Path]], packed_env: Path, tmp_path: Path) -> None:
    master, works = cluster
    expected = _local(_pipeline(tmp_path, "local"))
    assert len(expected) == 27  # 60 events 3 s apart from t=1000: 9 windows of 20 s, each with 3 keys
    options = ["--master", master, "--python-env", str(packed_env), "--once", "--quiet",
               "--conf", "spark.sql.shuffle.partitions=4"]

    direct = _pipeline(tmp_path, "direct")
    done = _run([sys.executable, "-m", "edgewise", "spark", str(direct), "--checkpoint", str(tmp_path / "ck1"),
                 *options], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _rows(tmp_path / "direct.db") == expected

    submitted = _pipeline(tmp_path, "submitted")
    printed = _run([sys.executable, "-m", "edgewise", "spark", str(submitted), "--checkpoint",
                    str(tmp_path / "ck2"), *options, "--print-submit"], tmp_path)
    assert printed.returncode == 0, printed.stderr
    command = printed.stdout.strip()
    assert re.search(r"spark-submit --master spark://\S+ --archives '?\S+#edgewise-env'? .*/engine/spark/submit\.py ",
                     command), command
    done = _run(command, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _rows(tmp_path / "submitted.db") == expected
    # both workers ran executors whose Python came from the archive, unpacked in their own work directory
    for work in works:
        executors = [d for d in work.glob("app-*/*") if d.is_dir()]
        assert executors, f"{work}: no executor ran here"
        assert any((d / "edgewise-env" / "bin").is_dir() and (d / MARKER).exists() for d in executors), work
