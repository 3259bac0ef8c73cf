"""What a stateful micro-batch spends committing its RocksDB state: snapshot commits (Spark's default) against
changelog commits (edgewise's default since issue 17), read from Spark's own metrics, not timed from outside.

The YSB windowed pipeline (10 s tumbling count per campaign) runs ``edgewise spark --once`` over a spool of
``--events`` events in ``--segments`` files, ``--max-files-per-trigger`` files a micro-batch, so the window's state
store is committed once per micro-batch. Spark's event log gives, per stateful stage, the state operator's "time
to commit changes" and the stage's duration; the two modes alternate, each a fresh process, and every run must
write the same number of results.

    .venv/bin/python bench/spark_state_commit.py [--events 400000] [--segments 40] [--files 4] [--rounds 2]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from spark_ysb import count_lines, write_spool  # noqa: E402
from spark_ysb_start import pipeline_file  # noqa: E402

CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


def stateful_stages(event_log_dir: Path) -> list[tuple[int, int]]:
    """(commit ms, stage ms) of each stage that committed a state store, from the run's event log."""
    (log,) = event_log_dir.glob("*/events_*")
    stages = []
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event["Event"] != "SparkListenerStageCompleted":
            continue
        info = event["Stage Info"]
        metrics = {a.get("Name"): a.get("Value") for a in info["Accumulables"]}
        if "time to commit changes" in metrics:
            stages.append((int(metrics["time to commit changes"]), info["Completion Time"] - info["Submission Time"]))
    return stages


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--segments", type=int, default=40)
    parser.add_argument("--files", type=int, default=4, help="spool files per micro-batch")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "spark_state_commit.json"))
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    modes = {"snapshot": "false", "changelog": "true"}
    commits: dict[str, list[int]] = {mode: [] for mode in modes}
    stage_ms: dict[str, list[int]] = {mode: [] for mode in modes}
    run_ms: dict[str, list[int]] = {mode: [] for mode in modes}  # a run's stateful stages, all together
    with tempfile.TemporaryDirectory(prefix="edgewise-state-commit-") as tmp:
        base = Path(tmp)
        write_spool(base / "spool", args.events, args.segments)
        for r in range(args.rounds):
            for mode in (list(modes) if r % 2 == 0 else list(modes)[::-1]):
                work = base / f"{mode}-{r}"
                (work / "events").mkdir(parents=True)
                pipeline = pipeline_file("windowed", base / "spool", work / "out", work)
                done = subprocess.run(
                    [sys.executable, "-m", "edgewise", "spark", str(pipeline), "--once", "--quiet", "--master",
                     "local[2]", "--checkpoint", str(work / "ck"), "--max-files-per-trigger", str(args.files),
                     "--conf", f"{CHANGELOG}={modes[mode]}", "--conf", "spark.eventLog.enabled=true",
                     "--conf", "spark.eventLog.compress=false", "--conf", f"spark.eventLog.dir={work / 'events'}"],
                    env=env, capture_output=True, text=True, cwd=ROOT)
                if done.returncode != 0:
                    raise SystemExit(f"{mode} failed:\n{done.stderr[-3000:]}")
                stages = stateful_stages(work / "events")
                commits[mode] += [c for c, _ in stages]
                stage_ms[mode] += [s for _, s in stages]
                run_ms[mode].append(sum(s for _, s in stages))
                print(f"round {r + 1} {mode}: {len(stages)} stateful stages, commits {sum(c for c, _ in stages)} ms, "
                      f"stages {sum(s for _, s in stages)} ms, {count_lines(work / 'out')} results", file=sys.stderr)
    result = {
        "benchmark": "spark-state-commit", "events": args.events, "segments": args.segments,
        "files_per_micro_batch": args.files, "rounds": args.rounds,
        **{mode: {"stateful_stages": len(commits[mode]),
                  "commit_ms_median": statistics.median(commits[mode]),
                  "stage_ms_median": statistics.median(stage_ms[mode]),
                  "stateful_stages_ms_per_run_median": statistics.median(run_ms[mode])} for mode in modes},
        "python": platform.python_version(), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    }
    result["commit_time_ratio_changelog_over_snapshot"] = round(
        result["changelog"]["commit_ms_median"] / result["snapshot"]["commit_ms_median"], 3)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
