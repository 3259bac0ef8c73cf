"""Start-up: CPU seconds of `edgewise run` (the installed command) on a one-line input, from process start to
exit, beside a bare Python that imports orjson and decodes the same line (the floor any Python tool pays),
alternating run by run.

Both run with bytecode caches written (as an installed package has them): a first run of each writes them and is
not counted. So does edgewise's cache of parsed expressions (``expr/tree_cache.py``: a run whose expressions were
parsed before does not import sqlglot), kept in a directory of this benchmark's own; a third side runs edgewise
with that cache switched off (``EDGEWISE_LOAD_CACHE=off``), as every run of a new pipeline file starts. The
target (issue 42) is a median of at most 0.25 CPU s for edgewise.

With ``--other COMMAND`` another install's ``edgewise`` command (an older commit's, in a venv of its own) runs as
one more side, with the load cache kept, rotated run by run with the others: two versions compared on the same
minutes of a machine whose speed moves (each side's median, and the per-round ratio of the two).

    .venv/bin/python bench/startup.py [--runs 21] [--other PATH/bin/edgewise] [--out bench/results/startup.json]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import ROOT, write_result

TARGET_CPU_S = 0.25
PIPELINE = """version: 1
sources:
  - {id: in, type: file, path: one.ndjson}
pipelines:
  - id: p
    steps:
      - filter: {id: f, where: "a = 1"}
"""


def cpu_of(command: list[str], cwd: str, env: dict[str, str]) -> float:
    """User + system CPU seconds of one run of ``command`` (its children included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "startup.json"))
    parser.add_argument("--other", help="another install's edgewise command, run as one more side")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    # the console script a user runs, of the environment this runs in (`make install` installs this tree there)
    script = Path(sys.executable).parent / "edgewise"
    if not script.exists():
        raise SystemExit(f"no edgewise command beside {sys.executable}: run `make install` first")
    edgewise = [str(script), "run", "pipeline.yaml"]
    bare = [sys.executable, "-c", "import orjson, sys; sys.stdout.write(repr(orjson.loads(open('one.ndjson').read())))"]
    times: dict[str, list[float]] = {"edgewise": [], "edgewise_load_cache_off": [], "bare_python": []}
    with tempfile.TemporaryDirectory() as directory:
        Path(directory, "pipeline.yaml").write_text(PIPELINE)
        Path(directory, "one.ndjson").write_text('{"a": 1}\n')
        env["EDGEWISE_CACHE_DIR"] = str(Path(directory, "cache"))
        uncached_env = {**env, "EDGEWISE_LOAD_CACHE": "off"}
        sides = [("edgewise", edgewise, env), ("edgewise_load_cache_off", edgewise, uncached_env),
                 ("bare_python", bare, env)]
        if args.other:
            times["other"] = []
            other_env = {**env, "EDGEWISE_CACHE_DIR": str(Path(directory, "other-cache"))}
            sides.append(("other", [args.other, "run", "pipeline.yaml"], other_env))
        for _, command, side_env in sides:  # writes the bytecode caches (and the expression cache)
            cpu_of(command, directory, side_env)
        for i in range(args.runs):
            for name, command, side_env in sides[i % len(sides):] + sides[:i % len(sides)]:
                times[name].append(cpu_of(command, directory, side_env))
    median = {k: round(statistics.median(v), 3) for k, v in times.items()}
    other = {}
    if args.other:
        ratios = [o / e for o, e in zip(times["other"], times["edgewise"], strict=True)]
        other = {"other": args.other, "other_over_edgewise_per_round_median": round(statistics.median(ratios), 3)}
    write_result(args.out, {
        "benchmark": "start-up: CPU s from process start to exit, edgewise run on a one-line file vs a bare Python",
        "command": " ".join(["bench/startup.py", *sys.argv[1:]]),
        "runs": args.runs,
        "cpu_s_median": median,
        "cpu_s_min_max": {k: [round(min(v), 3), round(max(v), 3)] for k, v in times.items()},
        "edgewise_over_bare_python_s": round(median["edgewise"] - median["bare_python"], 3),
        "bare_pythons": {k: round(median[k] / median["bare_python"], 1) for k in times if k != "bare_python"},
        "met": {f"edgewise <= {TARGET_CPU_S} CPU s": median["edgewise"] <= TARGET_CPU_S},
        **other,
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
