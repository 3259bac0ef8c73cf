"""The pipeline fuzzer as a long soak: ``make fuzz`` (or ``python -m tests.fuzz.soak --minutes 30``).

Runs the oracles of ``oracles.py`` (``crash``, ``batch``, ``spark``; ``partitions``: ``serve --workers N``'s
partitioned workers against one; ``split``/``spark-split``: a pipeline's edge part then its hub part, on the local
engine or Spark, against the whole pipeline), of ``reference.py`` (``reference``: the
reference interpreter against the local engine; ``spark-reference``: against Spark too) and of ``queue_model.py``
(``queue``: the daemon's durable queue against its model, over generated histories) over freshly generated
pipelines and events, each oracle in turn for an equal slice of time (``--slice``), with a new random seed per
hypothesis run, until the time is up; prints what it tried (examples per oracle, Spark rejections) and, for a failure,
hypothesis's minimal failing case (the Spark oracle's as found: shrinking Spark runs would take hours), which it
also writes as a fixture into ``--keep`` (default ``out/fuzz``):
copy it into ``tests/fuzz/cases/`` so the suite replays it for good. Exit 1 when anything failed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import random
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from tests.fuzz.generate import ARRIVALS, DRAWN_FUNCTIONS, Case, batch_cases, cases, partitioned_cases
from tests.fuzz.oracles import (
    Rejected,
    batch_computation,
    crashed_vs_uninterrupted,
    local_vs_spark,
    partitioned_vs_one,
    split_vs_whole,
)
from tests.fuzz.queue_model import queue_ops, queue_vs_model
from tests.fuzz.reference import reference_cases, reference_vs_engines

ORACLES = ("crash", "batch", "reference", "queue", "partitions", "split", "spark", "spark-reference", "spark-split")
SPARK_EXAMPLES_PER_SESSION = 40
"""Spark examples run in one session before the soak starts a fresh one."""


class Found(AssertionError):
    def __init__(self, oracle: str, case: Case, problems: list[str], extra: dict[str, Any] | None = None) -> None:
        self.oracle, self.case, self.problems = oracle, case, problems
        self.extra = extra or {}
        """Kept with the case: what else the oracle drew (the split oracle's ``split_at``)."""
        super().__init__(f"{oracle}: {problems}")


class FoundInQueue(AssertionError):
    """The queue oracle's failing history (no pipeline: kept as the list of operations)."""

    def __init__(self, ops: list[tuple[Any, ...]], problems: list[str]) -> None:
        self.oracle, self.ops, self.problems = "queue", ops, problems
        super().__init__(f"queue: {problems}")


def _round(oracle: str, seed: int, examples: int, counts: Counter[str], spark: Any) -> None:
    """One hypothesis run of ``examples`` examples; raises ``Found`` with the minimal failing case."""
    # a Spark example takes seconds: the failing case is reported as found, not shrunk (shrinking takes hours)
    phases = [Phase.explicit, Phase.reuse, Phase.generate] if oracle.startswith("spark") else list(Phase)
    config = settings(max_examples=examples, deadline=None, database=None, derandomize=False,
                      suppress_health_check=list(HealthCheck), print_blob=False, phases=phases)
    last: dict[str, Any] = {}

    if oracle == "crash":
        @config
        @given(case=cases(), crashes=st.lists(st.integers(0, 14), min_size=1, max_size=3),
               batch_size=st.sampled_from([1, 2, 5, 1024]), flaky=st.sampled_from([0, 2, 3]))
        def prop(case: Case, crashes: list[int], batch_size: int, flaky: int) -> None:
            counts[oracle] += 1
            problems = crashed_vs_uninterrupted(case, crashes, batch_size, flaky)
            if problems:
                where = f"crashes after events {crashes}, batch size {batch_size}, one sink write in {flaky} fails"
                last["found"] = Found(oracle, case, [*problems, where])
                raise last["found"]
    elif oracle == "batch":
        @config
        @given(case=batch_cases())
        def prop(case: Case) -> None:
            counts[oracle] += 1
            problems = batch_computation(case)
            if problems:
                last["found"] = Found(oracle, case, problems)
                raise last["found"]
    elif oracle in ("reference", "spark-reference"):
        @config
        @given(case=reference_cases())
        def prop(case: Case) -> None:
            counts[oracle] += 1
            problems = reference_vs_engines(case, spark if oracle == "spark-reference" else None)
            if problems:
                last["found"] = Found(oracle, case, problems)
                raise last["found"]
    elif oracle == "partitions":
        @config
        @given(case=st.one_of(partitioned_cases(), cases()), workers=st.sampled_from([2, 3, 4]),
               entry_size=st.sampled_from([1, 2, 5, 1024]))
        def prop(case: Case, workers: int, entry_size: int) -> None:
            counts[oracle] += 1
            problems = partitioned_vs_one(case, workers, entry_size)
            if problems:
                last["found"] = Found(oracle, case, [*problems, f"{workers} workers, entries of {entry_size}"])
                raise last["found"]
    elif oracle == "queue":
        @config
        @given(ops=queue_ops())
        def prop(ops: list[tuple[Any, ...]]) -> None:
            counts[oracle] += 1
            problems = queue_vs_model(ops)
            if problems:
                last["found"] = FoundInQueue(ops, problems)
                raise last["found"]
    elif oracle in ("split", "spark-split"):
        @config
        @given(case=cases(spark=oracle == "spark-split", max_steps=3 if oracle == "spark-split" else 4),
               data=st.data())
        def prop(case: Case, data: st.DataObject) -> None:
            counts[oracle] += 1
            at = data.draw(st.one_of(st.none(), st.integers(0, len(case.steps) - 1)))
            try:
                problems = split_vs_whole(case, at, spark if oracle == "spark-split" else None)
            except Rejected:
                counts["spark rejected before data"] += 1
                return
            if problems:
                where = "placement: auto" if at is None else f"split before step {at}"
                last["found"] = Found(oracle, case, [*problems, where], {"split_at": "auto" if at is None else at})
                raise last["found"]
    else:
        @config
        @given(case=cases(spark=True, max_steps=3))
        def prop(case: Case) -> None:
            counts[oracle] += 1
            try:
                problems = local_vs_spark(spark, case)
            except Rejected:
                counts["spark rejected before data"] += 1
                return
            if problems:
                last["found"] = Found(oracle, case, problems)
                raise last["found"]

    try:
        hypothesis_seed(seed)(prop)()
    except (Found, FoundInQueue):
        raise last["found"] from None


FUNCTION_FLOOR = 3
"""Draws of a function below which the soak names it: the crash oracle has hardly tried it."""


def function_coverage(drawn: Counter[str]) -> str:
    """How often the crash oracle's pipelines called each built-in function (``generate.function_calls``), and
    the functions drawn fewer than ``FUNCTION_FLOOR`` times."""
    from edgewise.expr.functions import FUNCTIONS

    below = sorted(name for name in FUNCTIONS if drawn[name] < FUNCTION_FLOOR)
    counts = ", ".join(f"{name} {drawn[name]}" for name in sorted(FUNCTIONS))
    return (f"function coverage: {len(FUNCTIONS) - len(below)} of {len(FUNCTIONS)} functions drawn at least "
            f"{FUNCTION_FLOOR} times ({sum(drawn.values())} calls: {counts})"
            + (f"; below the floor: {', '.join(below)}" if below else ""))


def keep(found: Found | FoundInQueue, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    if isinstance(found, FoundInQueue):  # a history to add to tests/fuzz/test_queue_model.py
        body = yaml.safe_dump({"oracle": "queue", "ops": [list(op) for op in found.ops]}, sort_keys=False)
        path = directory / f"queue-{hashlib.sha1(body.encode()).hexdigest()[:10]}.yaml"
        path.write_text("# " + "\n# ".join(found.problems) + "\n" + body, encoding="utf-8")
        return path
    text = found.case.fixture_text(f"found by the {found.oracle} oracle")
    doc = yaml.safe_load(text)
    doc["oracle"] = found.oracle
    doc.update(found.extra)
    body = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    path = directory / f"{found.oracle}-{hashlib.sha1(body.encode()).hexdigest()[:10]}.yaml"
    path.write_text("# " + "\n# ".join(found.problems) + "\n" + body, encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30, help="how long to run (default 30)")
    parser.add_argument("--oracles", default=",".join(ORACLES), help="comma-separated, of " + ",".join(ORACLES))
    parser.add_argument("--examples", type=int, default=20,
                        help="examples per hypothesis run, a tenth of it on Spark (a new seed each run)")
    parser.add_argument("--slice", type=float, default=20,
                        help="seconds each oracle runs before the next one's turn (default 20)")
    parser.add_argument("--seed", type=int, default=None, help="the first round's seed (default: random)")
    parser.add_argument("--keep", default="out/fuzz", help="where minimal failing cases are written")
    parser.add_argument("--first", action="store_true", help="stop at the first failing case (tools/mutate.py)")
    args = parser.parse_args(argv)
    oracles = [o for o in args.oracles.split(",") if o]
    unknown = set(oracles) - set(ORACLES)
    if unknown:
        parser.error(f"unknown oracle(s) {sorted(unknown)}; expected some of {', '.join(ORACLES)}")
    spark = None
    if any(o.startswith("spark") for o in oracles):
        import os

        os.environ.setdefault("EDGEWISE_SPARK_LOG_LEVEL", "OFF")  # failures are reported here, once
        spark = _new_spark()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    print(f"soak: oracles {', '.join(oracles)}, {args.minutes:g} min, first seed {seed}", flush=True)
    deadline = time.monotonic() + args.minutes * 60
    counts: Counter[str] = Counter()
    failures: list[Path] = []
    rounds = 0
    spark_fresh_at = SPARK_EXAMPLES_PER_SESSION
    while time.monotonic() < deadline and not (args.first and failures):
        for oracle in oracles:
            # each oracle gets an equal slice of time (at least one batch), not an equal number of examples: a
            # Spark example takes seconds, a local one a tenth of a second, and counting examples gave the
            # reference interpreter a twentieth of a short run (tools/mutate.py)
            slice_end = min(deadline, time.monotonic() + args.slice)
            while True:
                if time.monotonic() >= deadline or (args.first and failures):
                    break
                examples = max(1, args.examples // 10) if oracle.startswith("spark") else args.examples
                try:
                    _round(oracle, seed, examples, counts, spark)
                except (Found, FoundInQueue) as found:
                    path = keep(found, Path(args.keep))
                    failures.append(path)
                    print(f"FAIL {oracle} (seed {seed}): {found.problems}\n  minimal case kept in {path}",
                          flush=True)
                except Exception:  # a crash of the harness or an engine: report it and go on
                    print(f"ERROR {oracle} (seed {seed}):\n{traceback.format_exc()}", flush=True)
                    failures.append(Path("<error>"))
                    if spark is not None and _stopped(spark):  # the JVM side is gone: later rounds need a new one
                        print("soak: the Spark session stopped; starting a new JVM", flush=True)
                        spark = _new_jvm(spark)
                seed = (seed + 1) % 2**32
                spark_examples = counts["spark"] + counts["spark-reference"]
                if oracle.startswith("spark") and spark is not None and spark_examples >= spark_fresh_at:
                    # a long-lived driver keeps what each finished query left (status store, listeners, generated
                    # classes) and ran out of heap after ~150-200 queries, failing every later example. A new
                    # session in the same JVM kept that heap (a soak still died of it at 195): a new JVM now and
                    # then
                    spark = _new_jvm(spark)
                    spark_fresh_at = spark_examples + SPARK_EXAMPLES_PER_SESSION
                if time.monotonic() >= slice_end:
                    break
        rounds += 1
        left = max(0.0, deadline - time.monotonic())
        tried = ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
        print(f"round {rounds}: {tried}; {len(failures)} failing; {left / 60:.1f} min left", flush=True)
    tried = ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
    print(f"done: {sum(counts[o] for o in oracles)} examples ({tried}), {len(failures)} failing", flush=True)
    if "crash" in oracles:
        print(function_coverage(DRAWN_FUNCTIONS), flush=True)
    if ARRIVALS:
        print("arrival patterns drawn: " + ", ".join(f"{k} {n}" for k, n in sorted(ARRIVALS.items())), flush=True)
    return 1 if failures else 0


def _new_spark() -> Any:
    from edgewise.engine.spark.session import spark_session

    return spark_session("local[2]", app="edgewise-fuzz", shuffle_partitions=2,
                         conf={"spark.default.parallelism": "2"})


def _new_jvm(spark: Any) -> Any:
    """Stop the session and the JVM behind it (PySpark's gateway process), then start both anew."""
    from pyspark import SparkContext

    with contextlib.suppress(Exception):
        spark.stop()
    gateway = SparkContext._gateway
    if gateway is not None:
        with contextlib.suppress(Exception):
            gateway.shutdown()
        process = getattr(gateway, "proc", None)
        if process is not None:
            process.kill()
            process.wait()
    SparkContext._gateway = None  # the next session launches a new gateway (and JVM)
    SparkContext._jvm = None
    return _new_spark()


def _stopped(spark: Any) -> bool:
    try:
        return bool(spark.sparkContext._jsc.sc().isStopped())
    except Exception:  # the gateway itself is gone
        return True


if __name__ == "__main__":
    sys.exit(main())
