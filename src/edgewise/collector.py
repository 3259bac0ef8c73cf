"""How edgewise sets Python's cyclic garbage collector where it processes many events at once.

Events are dicts and lists: a run makes and frees hundreds of thousands of small containers, which reference
counting frees without help. The cyclic collector runs anyway, every 700 new containers by default, and each of its
full passes walks every tracked object of the process (the loaded plan, sqlglot, pydantic; on Spark's workers
pandas, PyArrow and PySpark too). A local ``complete`` over 300,000 events ran 17% faster with rare passes, and its
step over 150,000 rows, in a process holding pandas as a Spark worker does, took half the time with the collector off
(BENCHMARKS.md, issue 43). The cycles a run can leave (an exception's traceback) are few and are still collected,
later.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

RUN_THRESHOLDS = (20_000, 20, 20)
"""A young-generation pass every 20,000 new containers instead of 700; older generations as rarely in proportion.
A one-shot run measured the same with these as with the collector off (BENCHMARKS.md)."""


def for_a_run() -> None:
    """A one-shot run (``edgewise run``, ``edgewise bench``) is about to process its input: what is loaded now lives
    until the process ends, so no pass walks it again (``gc.freeze``), and passes come rarely."""
    gc.freeze()
    gc.set_threshold(*RUN_THRESHOLDS)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The collector off for one bounded piece of work in a process edgewise does not own (a call of a Spark
    operator in PySpark's worker), and as it was after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
