"""The class archive that makes Spark's driver JVM start faster (edgewise/engine/spark/startup.py): which archive an
install gets, who records it, the helper that builds it with a real ``java``, and two real ``edgewise spark`` runs,
the second mapping what the first one recorded."""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from edgewise.engine.spark import startup
from edgewise.engine.spark.startup import StartupArchive, build, java_option
from tests.conftest import ROOT, need


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(startup.SWITCH, raising=False)
    monkeypatch.setenv(startup.CACHE, str(tmp_path / "the cache"))  # a space: one option to Spark all the same
    return tmp_path / "the cache"


def _java() -> str:
    java = startup.java_executable()
    need(java is not None and os.path.exists(java), "Java 17 for Spark")
    assert java is not None
    return java


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(done.stdout)


def test_each_install_has_its_own_archive_and_the_switch_turns_it_off(cache: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _java()
    first = StartupArchive.for_this_install()
    assert first is not None and first.directory.parent == cache / "spark-startup"
    again = StartupArchive.for_this_install()
    assert again is not None and again.directory == first.directory
    monkeypatch.setenv("SPARK_CONF_DIR", str(cache / "conf"))  # another class path: another archive
    other = StartupArchive.for_this_install()
    assert other is not None and other.directory != first.directory
    monkeypatch.delenv("SPARK_CONF_DIR")
    for off in ("off", "OFF", "0", "false", "no"):
        monkeypatch.setenv(startup.SWITCH, off)
        assert StartupArchive.for_this_install() is None
    monkeypatch.delenv(startup.SWITCH)
    monkeypatch.delenv(startup.CACHE)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_user(uid: int) -> Any:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.delenv("HOME", raising=False)  # and no entry in the password database: no home directory
    monkeypatch.setattr(pwd, "getpwuid", no_user)
    assert StartupArchive.for_this_install() is None  # nowhere to keep one
    monkeypatch.setenv(startup.CACHE, str(cache))
    monkeypatch.setenv("JAVA_HOME", str(cache / "no-java-here"))
    assert StartupArchive.for_this_install() is None


def test_one_run_records_at_a_time_a_dead_holders_lock_is_taken_over_and_an_archive_is_used(cache: Path) -> None:
    directory = cache / "spark-startup" / "k"
    recorder = StartupArchive(directory)
    options = recorder.prepare()
    assert options == f"-XX:DumpLoadedClassList={directory / 'classes.lst'}".replace(" ", "\\ ")
    assert recorder.mode == "record" and recorder.lock.read_text() == str(os.getpid())
    second = StartupArchive(directory)
    assert second.prepare() == "" and second.mode == "none"  # the holder (this process) is alive
    recorder.lock.write_text(str(_dead_pid()))
    assert StartupArchive(directory).prepare().startswith("-XX:DumpLoadedClassList=")
    recorder.lock.unlink()
    recorder.failed.write_text("java -Xshare:dump exited with 1\n")
    assert StartupArchive(directory).prepare() == ""  # a build that failed is not retried at once
    day_and_more = time.time() - startup.RETRY_AFTER - 60
    os.utime(recorder.failed, (day_and_more, day_and_more))
    assert StartupArchive(directory).prepare().startswith("-XX:DumpLoadedClassList=")  # but a day later
    assert not recorder.failed.exists()
    recorder.lock.unlink()
    recorder.archive.write_bytes(b"an archive")
    user = StartupArchive(directory)
    options = user.prepare()
    assert user.mode == "use"
    assert java_option("-XX:SharedArchiveFile=", recorder.archive) in options and "-Xshare:auto" in options
    assert "-Xlog:cds=off" in options


class _BrokenJvm:
    """A JVM whose every call fails, as py4j would for one without HotSpot's management beans."""

    def __getattr__(self, name: str) -> object:
        raise RuntimeError(f"no {name} here")


def test_a_jvm_that_cannot_answer_leaves_the_run_alone(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = cache / "spark-startup" / "k"
    user = StartupArchive(directory)
    directory.mkdir(parents=True)
    user.archive.write_bytes(b"an archive")
    user.prepare()
    user.started(_BrokenJvm())
    assert user.archive.exists()  # not known to be unused: kept
    user.archive.unlink()
    recorder = StartupArchive(directory)
    recorder.prepare()
    recorder.started(_BrokenJvm())
    assert not recorder.lock.exists() and capsys.readouterr().err == ""  # no helper, no promise


def test_an_unwritable_cache_starts_spark_without_an_archive(cache: Path) -> None:
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text("a file where the cache directory would be")
    archive = StartupArchive(cache / "spark-startup" / "k")
    assert archive.prepare() == "" and archive.mode == "none"


def _job(directory: Path, pid: int, java: str, classpath: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "classes.lst").write_text("java/lang/Object\njava/lang/String\njava/util/HashMap\n")
    (directory / "job.json").write_text(json.dumps({"pid": pid, "java": java, "classpath": str(classpath)}))
    (directory / "building").write_text(str(os.getpid()))


def test_the_helper_builds_once_the_jvm_exited_an_archive_java_maps(tmp_path: Path) -> None:
    java = _java()
    classpath = tmp_path / "classes"
    classpath.mkdir()
    jvm = subprocess.Popen(["sleep", "60"])  # stands for the recording JVM
    directory = tmp_path / "k"
    _job(directory, jvm.pid, java, classpath)
    made: list[bool] = []
    helper = threading.Thread(target=lambda: made.append(build(directory, poll=0.05)))
    helper.start()
    time.sleep(0.5)
    assert helper.is_alive() and not (directory / "classes.jsa").exists()  # it waits for the JVM
    jvm.kill()
    jvm.wait()
    helper.join(60)
    assert made == [True]
    archive = directory / "classes.jsa"
    assert archive.exists() and not (directory / "building").exists()
    assert not list(directory.glob("*.part"))
    # -Xshare:on fails rather than start without the archive: Java maps it for this class path
    mapped = subprocess.run([java, "-Xshare:on", f"-XX:SharedArchiveFile={archive}", "-cp", str(classpath),
                             "-version"], capture_output=True, text=True)
    assert mapped.returncode == 0, mapped.stderr


def test_a_failed_build_is_remembered_and_frees_the_lock(tmp_path: Path) -> None:
    failing = tmp_path / "java"
    failing.write_text("#!/bin/sh\necho 'Error: no space left on device' >&2\nexit 1\n")
    failing.chmod(0o755)
    directory = tmp_path / "k"
    _job(directory, _dead_pid(), str(failing), tmp_path)
    assert build(directory) is False
    assert not (directory / "classes.jsa").exists() and not list(directory.glob("*.part"))
    assert not (directory / "building").exists()
    assert "no space left" in (directory / "build.log").read_text()
    assert StartupArchive(directory).prepare() == ""


PIPELINE = """\
version: 1
sources: [{id: spool, type: file, path: in, schema: "n BIGINT, room STRING"}]
pipelines:
  - id: loud
    steps: [{filter: {id: big, where: "n > 1"}}]
    to: [out]
sinks:
  - {id: out, type: file, path: "%s"}
"""


def _edgewise(work: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "edgewise", *args], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, env=env, cwd=work, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


@pytest.mark.slow
def test_a_second_spark_run_maps_the_archive_the_first_one_recorded(tmp_path: Path) -> None:
    """The cheapest runs that start a driver JVM do the recording and the control (`explain --engine spark`
    starts Spark and plans, as every Spark command does, but runs no job); the run between them is a job."""
    need(importlib.util.find_spec("pyspark") is not None, "PySpark (pip install -e '.[spark]')")
    _java()
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-1.ndjson").write_text("".join(json.dumps({"n": n, "room": "a"}) + "\n"
                                                           for n in range(5)))
    (tmp_path / "pipeline.yaml").write_text(PIPELINE % (tmp_path / "out"))
    cache = tmp_path / "a cache"  # a space in the path: the Java options must stay whole
    env = {**os.environ, startup.CACHE: str(cache), "PYTHONPATH": str(ROOT / "src")}
    env.pop(startup.SWITCH, None)
    explain = ("explain", str(tmp_path / "pipeline.yaml"), "--engine", "spark")
    assert "later Spark runs start faster" in _edgewise(tmp_path, env, *explain)
    (directory,) = (cache / "spark-startup").iterdir()
    archive = directory / "classes.jsa"
    deadline = time.monotonic() + 240  # the helper builds it once the first run's JVM is gone
    while (not archive.exists() or (directory / "building").exists()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert archive.exists(), (directory / "build.log").read_text() if (directory / "build.log").exists() else ""
    assert not (directory / "failed").exists()

    err = _edgewise(tmp_path, env, "spark", str(tmp_path / "pipeline.yaml"), "--once", "--master", "local[1]",
                    "--checkpoint", str(tmp_path / "ck"))
    assert "later Spark runs start faster" not in err
    segments = sorted((tmp_path / "out").glob("*.ndjson"))
    assert sorted(json.loads(line)["n"] for p in segments for line in p.read_text().splitlines()) == [2, 3, 4]
    assert archive.exists()  # a run whose JVM did not map it removes it (the control below)

    archive.chmod(0o644)
    archive.write_bytes(b"not an archive")
    _edgewise(tmp_path, env, *explain)
    assert not archive.exists()  # Java started without it; edgewise saw that and removed it
    shutil.rmtree(cache)


@pytest.mark.parametrize(("options", "environment", "expected"), [
    ("-Duser.timezone=UTC", {}, False),
    ("-Duser.timezone=UTC -XX:StartFlightRecording=filename=/tmp/a.jfr", {}, True),
    ("", {"SPARK_SUBMIT_OPTS": "-XX:StartFlightRecording=duration=30s"}, True),
    ("", {"JAVA_TOOL_OPTIONS": "-XX:FlightRecorderOptions=stackdepth=128"}, True),
    ("", {"JDK_JAVA_OPTIONS": "-Xmx2g"}, False),
])
def test_a_driver_started_with_flight_recorder_gets_no_archive(options: str, environment: dict[str, str],
                                                               expected: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Java 17's Flight Recorder crashed a driver that mapped the archive (startup.PROFILING)."""
    for name in ("SPARK_SUBMIT_OPTS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert startup.profiled(options) is expected
