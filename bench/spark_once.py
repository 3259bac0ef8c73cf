"""What ``edgewise spark --once`` costs at the end of the input: the code before and after a change, side by side
in one invocation (rounds alternate), each a fresh process from start to exit (what a user waits for), on the same
pipeline file and a fresh checkpoint; with the number of micro-batches each ran (Spark's commit log).

    .venv/bin/python bench/spark_once.py --before /tmp/wt-before/src [--pipeline examples/ysb/windowed.yaml]
        [--rounds 2]

``--before`` is the ``src`` directory of a checkout of the earlier code (``git worktree add /tmp/wt-before
<commit>``); "after" is this tree's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(src: Path, pipeline: Path) -> tuple[float, int]:
    """Seconds from process start to exit, and micro-batches committed, of one ``--once`` run."""
    with tempfile.TemporaryDirectory(prefix="edgewise-once-") as tmp:
        checkpoint = Path(tmp) / "ck"
        env = {**os.environ, "PYTHONPATH": str(src)}
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "edgewise", "spark", str(pipeline), "--once", "--quiet",
                               "--checkpoint", str(checkpoint)], env=env, cwd=ROOT, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"edgewise spark failed ({src}):\n{done.stderr[-3000:]}")
        batches = sum(len([n for n in os.listdir(d / "commits") if n.isdigit()])
                      for d in checkpoint.iterdir() if (d / "commits").is_dir())
        return seconds, batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="src directory of the earlier code")
    parser.add_argument("--pipeline", type=Path, default=ROOT / "examples" / "ysb" / "windowed.yaml")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    sides = {"before": args.before.resolve(), "after": ROOT / "src"}
    times: dict[str, list[float]] = {side: [] for side in sides}
    batches: dict[str, int] = {}
    for i in range(args.rounds):
        for side, src in (sides.items() if i % 2 == 0 else reversed(sides.items())):
            seconds, n = run_once(src, args.pipeline)
            times[side].append(seconds)
            batches[side] = n
            print(f"round {i + 1}: {side}: {seconds:.1f} s, {n} micro-batches", flush=True)
    med = {side: statistics.median(t) for side, t in times.items()}
    result = {"pipeline": str(args.pipeline.relative_to(ROOT)), "rounds": args.rounds, "cpus": os.cpu_count(),
              "python": platform.python_version(), "median_s": med, "micro_batches": batches,
              "after_over_before": med["after"] / med["before"]}
    print(json.dumps(result, indent=1))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "spark_once.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
