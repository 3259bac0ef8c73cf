"""The Spark session edgewise runs on: ANSI mode, UTC, the RocksDB state store, the worker Python set.

PySpark is the ``spark`` extra (``pip install 'edgewise[spark]'``); without it every Spark command says so.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from edgewise.engine.spark.startup import StartupArchive, profiled
from edgewise.errors import EdgewiseError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PYSPARK_VERSION = "4.3.0"
"""The tested PySpark version, pinned by the ``spark`` extra."""
DRIVER_OPTIONS = "spark.driver.extraJavaOptions"
EXECUTOR_OPTIONS = "spark.executor.extraJavaOptions"
QUICK_COMPILER = "-XX:TieredStopAtLevel=1"
"""Java option of a driver that lives seconds (``short_lived``): the JIT's quick compiler (C1) only. The optimising
compiler (C2) earns its cost over minutes; ``explain`` spent it compiling code that runs a few times (BENCHMARKS.md:
17% less time, 41% less CPU), and so does a ``--once`` run over a small input (``sources.short_job``: 21% less
time over 20 MB). A test suite whose workers keep every core busy gains too (DEVELOPING.md)."""


class SparkUnavailable(EdgewiseError):
    """PySpark (or Java) is missing."""


def require_pyspark() -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise SparkUnavailable("the Spark engine needs PySpark: pip install 'edgewise[spark]' (PySpark "
                               f"{PYSPARK_VERSION}, pyarrow, pandas<3, protobuf) and Java 17") from None


def spark_session(master: str | None = None, *, app: str = "edgewise", shuffle_partitions: int | None = None,
                  conf: dict[str, str] | None = None, report: Callable[[str], None] | None = None,
                  short_lived: bool = False) -> SparkSession:
    """The active session, or a new one configured for edgewise.

    ``master`` defaults to ``local[*]``; under ``spark-submit`` the submitted master wins. Python workers must run
    the driver's interpreter (``PYSPARK_PYTHON``) or they cannot import edgewise; ``SPARK_LOCAL_IP`` keeps a local
    run on the loopback interface. A driver JVM this call launches maps the install's archive of Spark's classes,
    or records the classes for one (``startup.py``); when it records, ``report`` (else stderr) is told once.
    ``short_lived``: a driver for work that ends in seconds (``explain``, ``--once`` over a small input) compiles
    with C1 only (``QUICK_COMPILER``); it applies when this call launches the JVM, and Java options in ``conf``
    come after it (``-XX:TieredStopAtLevel=4`` restores the optimising compiler).
    """
    require_pyspark()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master is None or master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder: Any = SparkSession.builder.appName(app)
    if master is not None:
        builder = builder.master(with_task_retries(master))
    elif not os.environ.get("PYSPARK_GATEWAY_PORT"):  # not launched by spark-submit, which sets the master
        builder = builder.master(with_task_retries("local[*]"))
    settings = session_settings(master, shuffle_partitions=shuffle_partitions, conf=conf,
                                short_lived=short_lived)
    startup = _startup_archive(settings[DRIVER_OPTIONS])
    if startup is not None:
        settings[DRIVER_OPTIONS] = _java_options(settings[DRIVER_OPTIONS], startup.prepare())
    for key, value in settings.items():
        builder = builder.config(key, value)
    session: SparkSession = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("EDGEWISE_SPARK_LOG_LEVEL", "ERROR"))
    if startup is not None:
        startup.started(session.sparkContext._jvm, report)
    return session


def session_settings(master: str | None, *, shuffle_partitions: int | None = None, conf: dict[str, str] | None = None,
                     short_lived: bool = False) -> dict[str, str]:
    """The Spark settings ``spark_session`` gives a new session (before the class archive's Java options): edgewise's
    defaults, then ``conf``. Java options in ``conf`` are added after edgewise's instead of replacing them."""
    settings = {
        "spark.sql.ansi.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        DRIVER_OPTIONS: "-Duser.timezone=UTC",
        EXECUTOR_OPTIONS: "-Duser.timezone=UTC",
        # an annotate that replaces a field concatenates maps with the new value last
        "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        # a commit writes the micro-batch's changes, not a snapshot of the whole store (snapshots are made in the
        # background): half the commit time of a window's micro-batch (BENCHMARKS.md); an existing checkpoint
        # continues in either mode
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # a pipeline's query reads its source in several branches (results, routed rows, late-event copies), each
        # with its own watermark node; the watermark is the largest they saw, as if one node saw every row
        "spark.sql.streaming.multipleWatermarkPolicy": "max",
        # one watermark for late rows and eviction, the micro-batch's own (as locally, where an event is late by
        # the watermark every earlier event moved): by default Spark 4 drops late rows by the previous
        # micro-batch's watermark, for queries that chain stateful operators, and counted an event the local
        # engine calls late (issue 39)
        "spark.sql.streaming.statefulOperator.allowMultiple": "false",
        "spark.ui.enabled": "false",
        # with no UI to show them, what Spark's status store keeps of past SQL executions, jobs, stages and
        # queries only fills the driver's heap: a continuous job runs an execution per micro-batch, each with its
        # (large) plan, and Spark keeps 1,000 of them by default
        "spark.sql.ui.retainedExecutions": "20",
        "spark.ui.retainedJobs": "100",
        "spark.ui.retainedStages": "100",
        "spark.sql.streaming.ui.retainedQueries": "20",
        "spark.sql.streaming.ui.retainedProgressUpdates": "20",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.adaptive.enabled": "false",
        # Python processes connecting to the JVM's sockets (keyed steps' state server, foreachBatch, collects) wait
        # this long, not Spark's 15 s: on a busy machine a worker that starts slowly failed the job with
        # CANNOT_OPEN_SOCKET ... timed out (issue 40: 21 such failures in one loaded test run)
        "spark.python.authenticate.socketTimeout": "120s",
    }
    # a local master's cores (None on a cluster, or under spark-submit, whose master is not known here)
    cores = None if os.environ.get("PYSPARK_GATEWAY_PORT") else local_cores(master or "local[*]")
    if cores is not None:
        # checkpoint files through Hadoop's FileSystem API, not its FileContext: without Hadoop's native library
        # (PySpark ships none) every FileContext rename forks `readlink` and every file made forks `chmod`, 4x
        # the processes a micro-batch (2,243 against ~560 for a conformance file's runs) and ~8% of a small
        # stateful micro-batch's time (BENCHMARKS.md). What it gives up, a rename that refuses an existing file,
        # guards against two drivers on one checkpoint; the FileSystem manager still checks for the file first
        settings["spark.sql.streaming.checkpointFileManagerClass"] = (
            "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager")
    if shuffle_partitions is None:
        shuffle_partitions = cores
    if shuffle_partitions is not None:
        settings["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    if short_lived:
        settings[DRIVER_OPTIONS] = _java_options(settings[DRIVER_OPTIONS], QUICK_COMPILER)
    for key, value in (conf or {}).items():
        # Java options given add to edgewise's (a JVM takes the last of two contrary options): an -Xmx must not
        # drop -Duser.timezone=UTC, which keeps the JVM's own time conversions in the session's zone
        settings[key] = _java_options(settings[key], value) if key in (DRIVER_OPTIONS, EXECUTOR_OPTIONS) else value
    return settings


def _java_options(current: str, added: str) -> str:
    """Java options with ``added`` after ``current`` (the later of two contrary options wins)."""
    return f"{current} {added}".strip()


def _startup_archive(driver_options: str) -> StartupArchive | None:
    """The class archive for a driver JVM this process is about to launch; None where it launches none (under
    ``spark-submit``, or into a session already running) or starts it with Flight Recorder (``profiled``)."""
    if os.environ.get("PYSPARK_GATEWAY_PORT") or session_active():
        return None
    if profiled(driver_options):
        return None
    return StartupArchive.for_this_install()


def session_active() -> bool:
    """Whether this process runs a Spark session already (``spark_session`` then returns it as it is)."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


LOCAL_TASK_ATTEMPTS = 4
"""Attempts of a task on a ``local`` master (a cluster's are ``spark.task.maxFailures``, 4 by default): a local
master tries each task once unless its URL says otherwise, so a Python worker lost on a busy machine (one that
did not connect back in Spark's fixed 10 s) failed the micro-batch and the job."""


def with_task_retries(master: str) -> str:
    """``local[2]`` as ``local[2,4]``: a local master that retries a failed task (one that names its attempts, and
    any other master, as given)."""
    match = re.fullmatch(r"local(?:\[(\*|\d+)\])?", master.strip())
    if match is None:
        return master
    return f"local[{match.group(1) or 1},{LOCAL_TASK_ATTEMPTS}]"


def local_cores(master: str) -> int | None:
    """The cores a ``local`` master runs on (``local`` 1, ``local[4]`` 4, ``local[*]`` all), None for a cluster.

    A local job's default number of shuffle partitions: Spark's 200 made every stateful micro-batch of a window
    load and commit 200 state stores on a 2-core machine (25-30 s a micro-batch for 100 windows; BENCHMARKS.md).
    A streaming query keeps the number its checkpoint was started with, so this applies to new checkpoints only.
    """
    match = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if match is None:
        return None
    cores = match.group(1)
    if cores is None:
        return 1
    return (os.cpu_count() or 1) if cores == "*" else max(1, int(cores))
