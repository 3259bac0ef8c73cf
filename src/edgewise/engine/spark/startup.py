"""A faster start for Spark's driver JVM: an archive of the classes it loads (class-data sharing, AppCDS).

A Spark job started from a shell loads and verifies some 17,000 classes from PySpark's ~280 jars before its first
result, most of them while the session starts and while its first queries are analysed. Java can map those
classes from an archive made beforehand instead, parsed and verified already. For the YSB windowed job, counted from
process start, the session starts in 3.5 s instead of 5.7, the queries are built in 2.0 s instead of 3.3, and the whole
run takes 13.3 s instead of 17.7 (BENCHMARKS.md, "Spark's start").

How the archive comes about, per Java and PySpark install (``StartupArchive.for_this_install``):

1. The first run records the classes its driver loads (``-XX:DumpLoadedClassList``) and starts a detached helper
   (``python -m edgewise.engine.spark.startup DIR``). The run itself is no slower.
2. The helper waits for that JVM to exit, then makes the archive with ``java -Xshare:dump``, at low priority (about
   30 s of one core, 1 GB of memory while it runs, ~200 MB on disk under ``cache_dir()``), and moves it into place
   whole. A lock file (the helper's pid) keeps two runs from recording at once.
3. Later runs map it (``-XX:SharedArchiveFile``). Java checks the archive against its own build and the class path,
   and starts without it where they differ (``-Xshare:auto``; its messages are silenced). A stale or damaged
   archive costs the speed-up, never a run; edgewise then sees that sharing is off (``UseSharedSpaces``) and removes
   the archive, so the next run records a new one. A build that fails is remembered (``failed``, with Java's
   output in ``build.log``) and retried a day later at the earliest.

Only where edgewise launches the JVM (not under ``spark-submit``, which started it already, and not into a running
session). ``EDGEWISE_SPARK_ARCHIVE=off`` turns it off; ``EDGEWISE_CACHE_DIR`` moves the cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from edgewise import cachedir
from edgewise.cachedir import CACHE as CACHE  # the switch users set, named here as before
from edgewise.cachedir import cache_dir

SWITCH = "EDGEWISE_SPARK_ARCHIVE"
"""``off`` (or ``0``, ``false``, ``no``): no archive is made or used."""
FORMAT = 1
"""Part of every archive's key: a new layout of the cache makes new archives."""
QUIET = "-Xlog:cds=off"
"""Java's notes about an archive it cannot use go nowhere: using none is the fallback, not an error."""

RETRY_AFTER = 24 * 3600
"""Seconds after a failed build before a run records the classes for another."""

Mode = Literal["use", "record", "none"]


def java_executable() -> str | None:
    """The ``java`` PySpark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on the ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    if home:
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def java_option(option: str, path: Path) -> str:
    r"""``option`` and ``path`` as one word of ``spark.driver.extraJavaOptions``, which Spark's launcher splits at
    whitespace and reads quotes and backslashes in: each of those in the path is escaped (a cache under
    ``/home/J Doe`` stays one option).

    >>> java_option("-XX:SharedArchiveFile=", Path("/home/J Doe/it's.jsa"))
    "-XX:SharedArchiveFile=/home/J\\ Doe/it\\'s.jsa"
    """
    return option + re.sub(r"""([\s'"\\])""", r"\\\1", str(path))


def switched_off() -> bool:
    return cachedir.switched_off(SWITCH)


PROFILING = ("-XX:StartFlightRecording", "-XX:FlightRecorderOptions")
"""Java options that turn on Java Flight Recorder. Java 17's recorder crashed a driver that mapped the archive
(SIGSEGV in ``KlassFactory::check_shared_class_file_load_hook``, 2026-11-26; the run that records the classes and a
run without the archive were fine), so a profiled driver neither maps nor records one."""


def profiled(driver_options: str) -> bool:
    """The driver JVM starts with Flight Recorder on: in its options, or in the environment Spark's launcher and
    Java read (``SPARK_SUBMIT_OPTS``, ``JAVA_TOOL_OPTIONS``, ``JDK_JAVA_OPTIONS``)."""
    options = [driver_options, *(os.environ.get(name, "") for name in
                                 ("SPARK_SUBMIT_OPTS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"))]
    return any(flag in text for text in options for flag in PROFILING)


@dataclass
class StartupArchive:
    """The archive of one Java and PySpark install, in its own directory of the cache."""

    directory: Path
    mode: Mode = "none"
    """What this run does: map the archive, record the classes for one, or neither (``prepare``)."""

    @classmethod
    def for_this_install(cls) -> StartupArchive | None:
        """The archive for the Java and PySpark this process would start, or None when switched off or there is
        no Java. The key covers what decides which classes the driver loads from where: the ``java`` binary, the
        PySpark install and the environment variables Spark's launcher builds its class path from."""
        if switched_off():
            return None
        java = java_executable()
        if java is None or not os.path.exists(java):
            return None
        import pyspark

        try:
            real = os.path.realpath(java)
            stat = os.stat(real)
            cache = Path(cache_dir())
        except (OSError, RuntimeError):  # no home directory to put a cache in (RuntimeError): no archive
            return None
        ident = {"format": FORMAT, "java": real, "java_size": stat.st_size, "java_mtime": stat.st_mtime_ns,
                 "pyspark": pyspark.__version__, "pyspark_dir": os.path.dirname(os.path.realpath(pyspark.__file__)),
                 **{name: os.environ.get(name) for name in ("SPARK_HOME", "SPARK_CONF_DIR", "SPARK_DIST_CLASSPATH",
                                                            "SPARK_CLASSPATH", "HADOOP_CONF_DIR")}}
        key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
        return cls(cache / "spark-startup" / key)

    @property
    def archive(self) -> Path:
        return self.directory / "classes.jsa"

    @property
    def class_list(self) -> Path:
        return self.directory / "classes.lst"

    @property
    def lock(self) -> Path:
        return self.directory / "building"

    @property
    def failed(self) -> Path:
        return self.directory / "failed"

    @property
    def build_log(self) -> Path:
        """What ``java -Xshare:dump`` printed in the last build."""
        return self.directory / "build.log"

    @property
    def job(self) -> Path:
        """What the helper needs of the recording JVM: its pid, its ``java`` and its class path."""
        return self.directory / "job.json"

    def prepare(self) -> str:
        """Decide what this run does and give the driver's Java options for it ("" for nothing)."""
        self.mode = "none"
        try:
            if self.archive.exists():
                self.mode = "use"
                return f"{java_option('-XX:SharedArchiveFile=', self.archive)} -Xshare:auto {QUIET}"
            if self._failed_lately() or not self._take_lock():
                return ""
        except OSError:  # an unwritable cache: Spark starts as it would without edgewise
            return ""
        self.mode = "record"
        self.class_list.unlink(missing_ok=True)
        return java_option("-XX:DumpLoadedClassList=", self.class_list)

    def _failed_lately(self) -> bool:
        """A build failed less than ``RETRY_AFTER`` ago (a full disk may have been the cause: a day later it is
        tried again)."""
        try:
            failed_at = self.failed.stat().st_mtime
        except FileNotFoundError:
            return False
        if time.time() - failed_at < RETRY_AFTER:
            return True
        self.failed.unlink(missing_ok=True)
        return False

    def _take_lock(self) -> bool:
        """The lock, unless a live process holds it (a lock left by a process that died is taken over)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(self.lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if _alive(_pid_in(self.lock)):
                    return False
                self.lock.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as fh:
                fh.write(str(os.getpid()))
            return True
        return False

    def started(self, jvm: Any, report: Callable[[str], None] | None = None) -> None:
        """After the session started: remove an archive Java did not map; or, when recording, hand the class list
        to the helper that makes the archive once this JVM exits, and say so (to ``report``, else on stderr).

        A speed-up only: whatever fails here (the cache, a JVM without these management beans, py4j) leaves the
        job to run as it would without it, and an archive not known to be unused is kept."""
        if self.mode == "use":
            with contextlib.suppress(Exception):
                if not sharing_on(jvm):
                    self.archive.unlink(missing_ok=True)
        elif self.mode == "record":
            try:
                self._hand_over(jvm)
            except Exception:  # noqa: BLE001  # see above: no helper, so no lock and no promise
                self.lock.unlink(missing_ok=True)
                return
            note = (f"later Spark runs start faster: once this one ends, the classes its JVM loaded are archived in "
                    f"the background (~30 s of one core, ~200 MB in {self.directory.parent}; {SWITCH}=off turns "
                    "this off)")
            if report is not None:
                report(note)
            else:
                print(f"edgewise: {note}", file=sys.stderr)

    def _hand_over(self, jvm: Any) -> None:
        """Start the helper that builds the archive once this JVM exited; the lock becomes the helper's."""
        system = jvm.java.lang.System
        pid = int(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getPid())
        self.job.write_text(json.dumps({
            "pid": pid, "java": os.path.join(str(system.getProperty("java.home")), "bin", "java"),
            "classpath": str(system.getProperty("java.class.path"))}))
        helper = subprocess.Popen(  # our own interpreter and module
            [sys.executable, "-m", "edgewise.engine.spark.startup", str(self.directory)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True)
        self.lock.write_text(str(helper.pid))


def sharing_on(jvm: Any) -> bool:
    """Whether the JVM mapped a class-data archive (with ``-XX:SharedArchiveFile``: that one)."""
    bean_class = jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(bean_class)
    return str(bean.getVMOption("UseSharedSpaces").getValue()) == "true"


def build(directory: Path, *, poll: float = 0.5) -> bool:
    """The helper's work: wait for the recording JVM to exit, make the archive, move it into place, free the lock.
    Returns whether an archive was made."""
    archive = StartupArchive(directory)
    try:
        job = json.loads(archive.job.read_text())
        while _alive(int(job["pid"])):
            time.sleep(poll)
        if not archive.class_list.exists() or archive.class_list.stat().st_size == 0:
            return False
        partial = archive.archive.with_name(f"{archive.archive.name}.{os.getpid()}.part")
        with open(archive.build_log, "wb") as log:
            done = subprocess.run(  # the JVM the job ran on
                [job["java"], "-Xshare:dump", f"-XX:SharedClassListFile={archive.class_list}",
                 f"-XX:SharedArchiveFile={partial}", "-cp", job["classpath"], *QUIET.split()],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0 or not partial.exists():
            partial.unlink(missing_ok=True)
            archive.failed.write_text(f"java -Xshare:dump exited with {done.returncode}: see build.log\n")
            return False
        os.replace(partial, archive.archive)
        return True
    finally:
        archive.lock.unlink(missing_ok=True)


def _pid_in(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int | None) -> bool:
    if pid is None or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


if __name__ == "__main__":
    with contextlib.suppress(OSError):
        os.nice(10)  # behind whatever the user runs next
    sys.exit(0 if build(Path(sys.argv[1])) else 1)
