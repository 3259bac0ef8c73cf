"""The mutation check (issue 39): plant known bugs, one at a time, in a temporary copy of the project, and see
which the pipeline fuzzer and the test suite catch.

    .venv/bin/python tools/mutate.py [--minutes 1] [--only NAME,...] [--no-suite] [--no-fuzz]   # make mutate

Each mutation replaces one exact piece of source (which must occur once: a refactor that moves it makes the tool
say so, rather than test nothing) in a copy of ``src/`` and ``tests/`` under a temporary directory; the copy's
``src`` comes first on ``PYTHONPATH``, so the fuzzer, the tests and Spark's Python workers all run the mutant.
For each mutation:

- **fuzzer**: ``python -m tests.fuzz.soak --minutes N --first`` with the oracles that can see the area (the five
  pipeline oracles for the local engine's code and its sinks; ``spark`` and ``spark-reference`` for Spark's;
  ``queue`` for the daemon's queue), each taking two turns of equal time, from a fixed seed; caught when it
  reports a failing case;
- **suite**: the test files that cover the area (named per mutation; the whole suite is ``make test``), ``-x``;
  caught when a test fails.

The unmutated copy is run first the same way: if the fuzzer or a suite file fails there, the tool stops (a check
that fails on correct code catches nothing). Prints a Markdown table (DEVELOPING.md keeps the latest) and writes
``out/mutate.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEED = 20261128
"""The fuzzer's first seed, so that two runs of the tool try the same examples."""

LOCAL, SPARK, QUEUE = "crash,batch,reference,spark,spark-reference", "spark,spark-reference", "queue"
CONFORMANCE = "tests/test_cli.py::test_edgewise_test_runs_the_conformance_suite"
SPARK_CONFORMANCE = "tests/spark/test_conformance.py"
"""The conformance fixtures, on the local engine and on Spark: the suite's own semantics, case by case."""


@dataclass(frozen=True)
class Mutation:
    name: str
    area: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    oracles: str = LOCAL
    """The fuzzer's oracles for this mutation."""


MUTATIONS = [
    Mutation("dedupe within is inclusive", "steps", "src/edgewise/steps/dedupe.py",
             "abs(t - kept) < within)", "abs(t - kept) <= within)",
             ("tests/test_steps.py", "tests/test_stateful.py", "tests/spark/test_chained_steps.py", CONFORMANCE)),
    Mutation("dedupe remembers only the latest kept time of a key", "steps", "src/edgewise/steps/dedupe.py",
             "earlier.setdefault(text, []).append(kept)", "pass",
             ("tests/test_stateful.py", "tests/fuzz/test_pipelines.py")),
    Mutation("an event on a window boundary goes into the window before", "steps",
             "src/edgewise/steps/window.py", "            start = t - t % size\n            if start <= horizon:",
             "            start = t - t % size - (size if t % size == 0 and t else 0)\n"
             "            if start <= horizon:",
             ("tests/test_steps.py", "tests/test_stateful.py", "tests/test_counts_oracle.py", CONFORMANCE)),
    Mutation("a window that ends at the watermark still takes events", "steps", "src/edgewise/steps/window.py",
             "            if start <= horizon:\n", "            if start < horizon:\n",
             ("tests/test_steps.py", "tests/test_stateful.py", "tests/test_event_time.py", CONFORMANCE)),
    Mutation("avg divides by count + 1", "aggregates", "src/edgewise/steps/aggs.py",
             "float(acc[0]) / acc[1]", "float(acc[0]) / (acc[1] + 1)",
             ("tests/test_steps.py", "tests/test_stateful.py", CONFORMANCE)),
    Mutation("count(x) counts NULLs", "aggregates", "src/edgewise/steps/aggs.py",
             'items.append(f"{acc} + 1" if spec.argument is None else f"{acc} if {value} is None else {acc} + 1")',
             'items.append(f"{acc} + 1")',
             ("tests/test_steps.py", "tests/test_stateful.py", "tests/test_fused.py", CONFORMANCE)),
    Mutation("coalesce returns the last non-NULL value", "expressions", "src/edgewise/expr/functions/conditional.py",
             "    def first(p: Any) -> Any:\n        for a in args:",
             "    def first(p: Any) -> Any:\n        for a in reversed(args):",
             ("tests/expr", CONFORMANCE)),
    Mutation("% takes the divisor's sign", "expressions", "src/edgewise/expr/values.py",
             "return r if x >= 0 else -r", "return r", ("tests/expr", CONFORMANCE)),
    Mutation("a filter keeps events whose condition is NULL", "steps", "src/edgewise/steps/filter.py",
             "mask = [where(p) is True for p in batch.payloads]",
             "mask = [where(p) is not False for p in batch.payloads]", ("tests/test_steps.py", CONFORMANCE)),
    Mutation("a completion times out 1 s early", "steps", "src/edgewise/steps/complete.py",
             "while timers and timers[0][0] <= now:", "while timers and timers[0][0] <= now + 1_000_000:",
             ("tests/test_stateful.py", "tests/test_github_completion.py", CONFORMANCE)),
    Mutation("a commit skips a step with one changed key", "state", "src/edgewise/engine/state.py",
             "            for name, value in step.changes().items():\n                for key in self.state_keys(",
             "            for name, value in (c if len(c := step.changes()) > 1 else {}).items():\n"
             "                for key in self.state_keys(",
             ("tests/test_stateful.py", "tests/state")),
    Mutation("Spark: a filter keeps rows whose condition is NULL", "Spark compiler",
             "src/edgewise/engine/spark/steps.py",
             'stage.df.where(f"NOT ({F.LIVE}) OR coalesce({where}, false)")',
             'stage.df.where(f"NOT ({F.LIVE}) OR coalesce({where}, true)")',
             ("tests/spark/test_messy_input.py", SPARK_CONFORMANCE), SPARK),
    Mutation("Spark: a bucket's events are taken latest first", "Spark keyed state",
             "src/edgewise/engine/spark/keyed_processor.py",
             "order = sorted(range(len(times)), key=times.__getitem__)",
             "order = sorted(range(len(times)), key=lambda i: -times[i])",
             ("tests/spark/test_keyed_state.py", "tests/spark/test_chained_steps.py", SPARK_CONFORMANCE), SPARK),
    Mutation("Spark: a guarded + subtracts", "Spark compiler", "src/edgewise/engine/spark/sql.py",
             '{exp.Add: "try_add",', '{exp.Add: "try_subtract",',
             ("tests/spark/test_messy_input.py", SPARK_CONFORMANCE), SPARK),
    Mutation("Spark: a window's count(x) counts NULLs", "Spark compiler", "src/edgewise/engine/spark/windows.py",
             '"count(*)" if spec.argument is None else f"count({argument})"', '"count(*)"',
             ("tests/spark/test_sources_and_sinks.py", SPARK_CONFORMANCE), SPARK),
    Mutation("spawn: a program that prints nothing sets into to NULL", "steps", "src/edgewise/steps/spawn.py",
             "            if not self.wait or result is NOTHING:\n                out.append(p)\n",
             "            if not self.wait:\n                out.append(p)\n            elif result is NOTHING:\n"
             "                out.append(set_path(p, self.into, None) if self.into is not None else p)\n",
             ("tests/test_steps.py", "tests/test_binge.py")),
    Mutation("Spark: a processing-time completion starts at the micro-batch before", "Spark keyed state",
             "src/edgewise/engine/spark/keyed_processor.py",
             "return FakeClock(batch_ms * 1000) if batch_ms >= 0 else SystemClock()",
             "return FakeClock(batch_ms * 1000 - 3_600_000_000) if batch_ms >= 0 else SystemClock()",
             ("tests/spark/test_keyed_state.py", "tests/spark/test_pipeline_fuzz.py"), SPARK),
    Mutation("entwine: the digest covers the whole event whatever its fields", "steps",
             "src/edgewise/steps/entwine.py", "    if not fields:\n        return payload",
             "    if fields is not None:\n        return payload", ("tests/test_entwine.py",)),
    Mutation("a sliding window's event goes into its windows already closed", "steps",
             "src/edgewise/steps/window.py", "            if end + self.lateness > watermark:",
             "            if end + self.lateness > watermark or self.slide < self.size:",
             ("tests/test_steps.py", "tests/test_stateful.py", CONFORMANCE)),
    Mutation("Spark: a dedupe forgets by the watermark before the timeouts an earlier step made", "Spark keyed state",
             "src/edgewise/steps/dedupe.py", "expires_before_rows: ClassVar[bool] = False",
             "expires_before_rows: ClassVar[bool] = True",
             ("tests/spark/test_chained_steps.py",), SPARK),
    Mutation("Spark: a dedupe remembers an event its micro-batch's watermark passed", "Spark keyed state",
             "src/edgewise/steps/dedupe.py",
             "forgotten = (self.max_time - delay if own_time else self.expired_to) - within",
             "forgotten = (self.max_time - delay if own_time else -END_OF_TIME) - within",
             ("tests/spark/test_keyed_state.py",), SPARK),
    Mutation("the queue's ack removes one entry too many", "daemon queue", "src/edgewise/daemon/queue.py",
             'conn.executemany("DELETE FROM entries WHERE seq BETWEEN ? AND ?", runs)',
             'conn.executemany("DELETE FROM entries WHERE seq BETWEEN ? AND ? + 1", runs)',
             ("tests/daemon/test_queue.py",), QUEUE),
    Mutation("a sink is never retried", "sinks", "src/edgewise/sinks/base.py",
             "for attempt in range(policy.attempts):", "for attempt in range(1):", ("tests/test_io.py",)),
]


def _copy(target: Path) -> None:
    """The project's code and tests (not .git, the virtualenv or outputs) into ``target``."""
    ignore = shutil.ignore_patterns("__pycache__", ".hypothesis", ".pytest_cache", "*.egg-info")
    for name in ("src", "tests", "conformance", "examples", "data", "docs", "pyproject.toml"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=ignore)
        elif source.exists():
            shutil.copy2(source, target / name)


def _run(command: list[str], cwd: Path, log: Path, timeout: float) -> tuple[int, float]:
    env = {**os.environ, "PYTHONPATH": f"{cwd / 'src'}{os.pathsep}{cwd}", "EDGEWISE_SPARK_LOG_LEVEL": "OFF"}
    start = time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        try:
            code = subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout, check=False).returncode
        except subprocess.TimeoutExpired:
            code = -1
    return code, time.monotonic() - start


def _fuzz(copy: Path, oracles: str, minutes: float, log: Path) -> bool | None:
    """Caught (True), not caught (False), or the harness broke (None: see the log)."""
    # two turns of each oracle in the time (the soak's slices), so that none waits for the others' whole share
    turn = max(5.0, minutes * 60 / (2 * len(oracles.split(","))))
    code, _ = _run([sys.executable, "-m", "tests.fuzz.soak", "--minutes", str(minutes), "--oracles", oracles,
                    "--seed", str(SEED), "--first", "--keep", str(log.parent / "fuzz-kept"), "--slice", str(turn)],
                   copy, log, timeout=minutes * 60 + 600)
    return {0: False, 1: True}.get(code)


def _suite(copy: Path, tests: tuple[str, ...], log: Path) -> bool | None:
    code, _ = _run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                    *tests], copy, log, timeout=1800)
    return {0: False, 1: True}.get(code)


NOT_RUN = "not run"


def _mark(caught: bool | str | None) -> str:
    if caught == NOT_RUN:
        return NOT_RUN
    return {True: "caught", False: "**missed**", None: "error (see the log)"}[caught]  # type: ignore[index]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=1.0, help="the fuzzer's time per mutation (default 1)")
    parser.add_argument("--only", default="", help="comma-separated parts of mutation names to run")
    parser.add_argument("--no-suite", action="store_true", help="run the fuzzer only")
    parser.add_argument("--no-fuzz", action="store_true", help="run the suite's files only")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if not args.only or any(p in m.name for p in args.only.split(","))]
    if not chosen:
        parser.error(f"no mutation matches {args.only!r}")
    logs = ROOT / "out" / "mutate"
    logs.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="edgewise-mutate-") as tmp:
        copy = Path(tmp)
        _copy(copy)
        # the checks must pass on the code as it is, or a "caught" means nothing
        for oracles in sorted({m.oracles for m in chosen}) if not args.no_fuzz else []:
            log = logs / f"unmutated-fuzz-{oracles.replace(',', '-')}.log"
            if _fuzz(copy, oracles, args.minutes, log) is not False:
                raise SystemExit(f"mutate: the fuzzer ({oracles}) fails on the unmutated code; see {log}")
        if not args.no_suite:
            files = tuple(sorted({t for m in chosen for t in m.tests}))
            log = logs / "unmutated-suite.log"
            if _suite(copy, files, log) is not False:
                raise SystemExit(f"mutate: the suite's files fail on the unmutated code; see {log}")
        for n, m in enumerate(chosen, 1):
            path = copy / m.path
            text = path.read_text(encoding="utf-8")
            if text.count(m.old) != 1:
                raise SystemExit(f"mutate: {m.name!r}: {m.path} holds its text {text.count(m.old)} times, not once")
            path.write_text(text.replace(m.old, m.new), encoding="utf-8")
            try:
                stem = f"{n:02d}"
                fuzz: bool | str | None = (NOT_RUN if args.no_fuzz else
                                           _fuzz(copy, m.oracles, args.minutes, logs / f"{stem}-fuzz.log"))
                suite: bool | str | None = (NOT_RUN if args.no_suite else
                                            _suite(copy, m.tests, logs / f"{stem}-suite.log"))
            finally:
                path.write_text(text, encoding="utf-8")
            rows.append({"mutation": m.name, "area": m.area, "file": m.path, "fuzzer": fuzz, "suite": suite,
                         "oracles": m.oracles, "tests": list(m.tests)})
            print(f"{n}/{len(chosen)} {m.name}: fuzzer {_mark(fuzz)}, suite {_mark(suite)}", flush=True)
    (ROOT / "out" / "mutate.json").write_text(json.dumps({"minutes": args.minutes, "seed": SEED, "rows": rows},
                                                         indent=1) + "\n")
    print("\n| mutation | area | fuzzer | suite's files |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['mutation']} | {r['area']} | {_mark(r['fuzzer'])} | {_mark(r['suite'])} |")  # type: ignore[arg-type]
    fuzzed = [r for r in rows if r["fuzzer"] != NOT_RUN]
    caught = sum(1 for r in fuzzed if r["fuzzer"] is True)
    anything = sum(1 for r in rows if r["fuzzer"] is True or r["suite"] is True)
    print(f"\nfuzzer alone: {caught}/{len(fuzzed)}; caught by something: {anything}/{len(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
