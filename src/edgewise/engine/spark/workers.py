"""Spark's Python workers started while the driver plans, not when the first micro-batch needs them.

A step that runs in Python on Spark (``keyed``: aggregate, complete, dedupe; ``python_steps``: spawn, plugins)
runs in Spark's Python workers, which a local master starts at the first task that needs one: the worker daemon's
own start (a Python process importing PySpark) and each worker's imports (pandas, PyArrow, the step's modules) then
sit on the first micro-batch's critical path, about 2 s of a `dedupe` over 300,000 events on 2 cores
(BENCHMARKS.md, keyed steps on Spark). Meanwhile, the driver spends seconds building and planning its queries
with cores to spare. So a short job of one task per core, started beside the planning, starts the daemon and
its workers and imports what the steps' operators import; Spark keeps a finished task's worker for the next task
of the same Python (``spark.python.worker.reuse``, on by default), and the first micro-batch finds them ready.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OPERATOR_MODULES = ("edgewise.engine.spark.keyed_processor", "edgewise.engine.spark.python_steps",
                    "edgewise.engine.guard", "edgewise.engine.context", "edgewise.config", "edgewise.clock")
"""What both operators that run local steps import on a worker, beside each step's own module."""
JOB_DESCRIPTION = "edgewise: starting the Python workers"


def warm_python_workers(spark: SparkSession, modules: Iterable[str], slots: int) -> threading.Thread:
    """Runs ``import_on_workers`` in a thread of its own, returned started. It never fails the run: where the job
    cannot run, the queries' own Python operators say why."""
    def run() -> None:
        with contextlib.suppress(Exception):  # a head start only: the queries report what fails
            import_on_workers(spark, modules, slots)

    thread = threading.Thread(target=run, name="edgewise-python-workers", daemon=True)
    thread.start()
    return thread


def import_on_workers(spark: SparkSession, modules: Iterable[str], slots: int) -> list[tuple[int, list[str]]]:
    """A job of ``slots`` tasks (a local master's cores) whose Python workers import pandas, PyArrow,
    ``OPERATOR_MODULES`` and ``modules``: each task's worker process id and the modules it then holds. It is a
    SQL operator's job (``mapInArrow``), as the steps' operators are: Spark keeps their workers for one another
    (an RDD's Python tasks run in workers of their own)."""
    imports = tuple(dict.fromkeys([*OPERATOR_MODULES, *modules]))
    spark.sparkContext.setJobDescription(JOB_DESCRIPTION)
    try:
        rows = (spark.range(0, slots, 1, slots)
                .mapInArrow(partial(_imported, imports), "pid BIGINT, modules ARRAY<STRING>")
                .collect())
    finally:
        spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]  # None clears it (PySpark's stub says str)
    return [(row.pid, list(row.modules)) for row in rows]


def _imported(modules: tuple[str, ...], batches: Iterator[Any]) -> Iterator[Any]:
    """On a worker: ``modules``, pandas and PyArrow imported (the operators hand their rows over as pandas frames),
    then a row per batch: the process and the modules it holds of those asked for."""
    import importlib
    import os
    import sys

    import pandas  # noqa: F401
    import pyarrow as pa

    for name in modules:
        importlib.import_module(name)
    held = [name for name in modules if name in sys.modules]
    for _ in batches:
        yield pa.RecordBatch.from_pydict({"pid": [os.getpid()], "modules": [held]},
                                         schema=pa.schema([("pid", pa.int64()), ("modules", pa.list_(pa.string()))]))
