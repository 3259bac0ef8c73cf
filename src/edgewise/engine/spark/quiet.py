"""Spark's own chatter kept off the terminal: what its JVM prints while starting, what PySpark's
``transformWithStateInPandas`` worker prints per query (about 225 lines for ``edgewise test --engine spark``), and
Spark's log records (the session logs at ERROR: a failing query logs its error four or five times, each with a Java
stack trace and the Python traceback of the ``foreachBatch`` function, 300 lines for one bad value).

All of them write to the process's standard error from outside Python (the JVM is a child process; the worker's
prints reach the JVM's stderr), so the filter works on file descriptor 2: it becomes a pipe, and a thread copies
what arrives to the real stderr, minus the chatter. Everything edgewise prints passes; a query that fails is
reported by edgewise in one line (``SparkJob``). The Spark commands use it unless ``--verbose``.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

CHATTER = re.compile(
    r"Streaming TransformWithStateInPandas Python worker"
    r"|^WARNING: Using incubator modules"
    r"|^Using Spark's default log4j profile"
    r"|^Setting default log level to"
    r"|^To adjust logging level use sc\.setLogLevel"
    r"|WARN NativeCodeLoader: Unable to load native-hadoop library"
)
"""Lines of Spark chatter: start-up notices and the Python worker's progress prints (which each end with a
blank line, dropped with them)."""

LOG_RECORD = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d [A-Z]+ ")
"""The first line of a record of Spark's log (``26/11/25 12:59:03 ERROR Executor: ...``); the lines after it, up to
the next record or the next line of edgewise's, are its exception and stack traces."""


def keep(lines: Iterator[bytes]) -> Iterator[bytes]:
    """The lines that are not chatter (nor the blank line after one), nor Spark log records.

    >>> list(keep(iter([b"Starting Streaming TransformWithStateInPandas Python worker.\\n", b"\\n",
    ...                 b"edgewise: done\\n", b"\\n"])))
    [b'edgewise: done\\n', b'\\n']
    >>> list(keep(iter([b"26/11/25 12:59:03 ERROR Executor: Exception in task 0.0\\n",
    ...                 b"org.apache.spark.SparkRuntimeException: [USER_RAISED_EXCEPTION] ...\\n",
    ...                 b"\\tat org.apache.spark.sql.errors.QueryExecutionErrors$.raiseError\\n",
    ...                 b"edgewise: pipeline p: the Spark query failed: ...\\n"])))
    [b'edgewise: pipeline p: the Spark query failed: ...\\n']
    """
    after_chatter = False
    in_record = False
    for line in lines:
        text = line.decode("utf-8", "replace")
        if LOG_RECORD.match(text):
            in_record = True
            continue
        if in_record and not text.startswith("edgewise"):
            continue
        in_record = False
        if CHATTER.search(text):
            after_chatter = True
            continue
        if after_chatter and not line.strip():
            continue
        after_chatter = False
        yield line


DRAINED = b"edgewise-quiet-stderr: drained\n"
"""Written into the pipe at the end of the block; the pump is through what came before when it reads it."""
DRAIN_TIMEOUT_S = 5.0


@contextmanager
def quiet_stderr(enabled: bool = True) -> Iterator[int]:
    """Filter Spark's chatter out of file descriptor 2 while inside (and after: the JVM outlives the block).
    Gives a descriptor of the real standard error (a status line on a terminal writes there, unfiltered)."""
    if not enabled:
        yield 2
        return
    try:
        sys.stderr.flush()
        real = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
    except OSError:  # no file descriptors to play with (an embedding host): leave stderr as it is
        yield 2
        return

    drained = threading.Event()

    def lines(source: IO[bytes]) -> Iterator[bytes]:
        for line in iter(source.readline, b""):
            if line == DRAINED:  # every line before it has been written out (``keep`` looks no further ahead)
                drained.set()
                continue
            yield line

    def pump() -> None:
        with os.fdopen(read_end, "rb") as source:
            for line in keep(lines(source)):
                # a closed stderr must not stop the reading: the JVM would block on a full pipe
                with contextlib.suppress(OSError):
                    os.write(real, line)

    threading.Thread(target=pump, name="edgewise-quiet-stderr", daemon=True).start()
    try:
        yield real
    finally:
        sys.stderr.flush()
        # The pump is a daemon thread (the JVM holds the pipe open, so it never sees its end): without waiting for
        # it here, the lines printed just before the process exits (the last micro-batch's, "done:") were lost.
        os.write(2, DRAINED)
        drained.wait(DRAIN_TIMEOUT_S)
        os.dup2(real, 2)  # edgewise's own last lines go straight out; the JVM keeps the filtered pipe
