"""``replay`` at ``speed: max`` against the ``file`` source, on the same recording.

The bundled HSL recordings (13 files, 3,690 lines) are copied ``--copies`` times into a temporary directory. The
copies keep their receive times (the merge's worst case, every receive time shared by ``--copies`` files), or with
``--days-apart`` copy N is moved N days later, as recordings of different days are (the merge's common case:
besides the bundled files' own overlaps, one file's lines go out at a time). Each
round reads them to the end twice in this process, alternating: once with a ``file`` source (``format: hfp``,
files one after the other) and once with a ``replay`` source (``speed: max``: the same lines merged across all
files by receive time). Both start from a built source with the same files and
end at the last batch; nothing downstream. Reports lines/s and the ratio replay / file.

    .venv/bin/python bench/replay.py [--copies 20] [--rounds 5] [--days-apart]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from common import ratio_stats, timed, write_result  # noqa: E402

from edgewise.clock import SystemClock  # noqa: E402
from edgewise.config import BuildContext  # noqa: E402
from edgewise.sources.base import Source, SourceContext  # noqa: E402
from edgewise.sources.file import FileSource, FileSourceConfig  # noqa: E402
from edgewise.sources.replay import ReplaySource, ReplaySourceConfig  # noqa: E402

HSL = ROOT / "data" / "hsl-hfp-apc-dumps"


def copy_recordings(directory: Path, copies: int, days_apart: bool = False) -> int:
    lines = 0
    for n in range(copies):
        for dump in sorted(HSL.glob("*/hfp.dump")):
            target = directory / f"copy{n:03d}" / dump.parent.name / "hfp.dump"
            target.parent.mkdir(parents=True)
            data = dump.read_bytes()
            target.write_bytes(b"".join(_later(line, n) for line in data.splitlines(True)) if days_apart else data)
            lines += sum(1 for line in data.splitlines() if line.strip())
    return lines


def _later(line: bytes, days: int) -> bytes:
    """An HFP line with its receive time (the first field) ``days`` later, written as HSL's recorders write it."""
    stamp, sep, rest = line.partition(b" ")
    if not days or not sep:
        return line
    moved = datetime.fromisoformat(stamp.decode()) + timedelta(days=days)
    return moved.strftime("%Y-%m-%dT%H:%M:%S.%fZ").encode() + sep + rest


def read_all(source: Source) -> int:
    ctx = SourceContext(SystemClock(), print, batch_size=1024)
    return sum(len(batch) for batch in source.read(ctx))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--days-apart", action="store_true", help="copy N N days later (else: same receive times)")
    parser.add_argument("--out", help="default: bench/results/replay.json (replay_days_apart.json)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        lines = copy_recordings(Path(tmp), args.copies, args.days_apart)
        pattern = str(Path(tmp) / "*" / "*" / "hfp.dump")
        build = BuildContext(".")
        file_times, replay_times = [], []
        for r in range(args.rounds):
            file_source = FileSource(FileSourceConfig(id="f", path=pattern, format="hfp"), build)
            replay_source = ReplaySource(ReplaySourceConfig(id="f", path=pattern, speed="max", progress="off"), build)
            t_file, n_file = timed(read_all, file_source)
            t_replay, n_replay = timed(read_all, replay_source)
            if n_file != n_replay or n_file != lines:
                raise SystemExit(f"counts differ: {lines} lines, file {n_file}, replay {n_replay}")
            file_times.append(t_file)
            replay_times.append(t_replay)
            print(f"round {r + 1}: file {lines / t_file:,.0f} lines/s, replay {lines / t_replay:,.0f} lines/s, "
                  f"ratio {t_file / t_replay:.2f}", file=sys.stderr)
    result = {
        "benchmark": "replay-max-vs-file",
        "lines": lines,
        "files": args.copies * len(list(HSL.glob("*/hfp.dump"))),
        "rounds": args.rounds,
        "copies": "days apart" if args.days_apart else "same receive times",
        "file_lines_per_s_median": round(lines / statistics.median(file_times)),
        "replay_lines_per_s_median": round(lines / statistics.median(replay_times)),
        **ratio_stats(file_times, replay_times),
    }
    name = "replay_days_apart.json" if args.days_apart else "replay.json"
    write_result(args.out or str(ROOT / "bench" / "results" / name), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
