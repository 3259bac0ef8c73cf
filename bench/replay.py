"""``replay`` at ``speed: max`` against the ``file`` source, on the same recording.

The bundled HSL recordings (13 files, 3,690 lines) are copied ``--copies`` times into a temporary directory, laid
out as ``--layout`` says:

- ``same-times``: the copies keep their receive times, so ``--copies`` files share every receive time (the merge's
  worst case);
- ``days-apart``: copy N is moved N days later, as recordings of different days are (besides the bundled files'
  own overlaps, one file's lines go out at a time);
- ``sequential``: every file moved to a day of its own, in name order, as a recorder that starts a new file each
  day writes them: the files do not overlap, so read one after another they are in receive order;
- ``one-file``: the ``sequential`` lines in one file: one stream.

In the last two the ``file`` source gives the same messages in the same order as the replay (checked before the
rounds): there the replay has nothing to merge. Each round reads the recording to the end twice in this process,
alternating: once with a ``file`` source (``format: hfp``, files one after the other) and once with a ``replay``
source (``speed: max``: the same lines merged across all files by receive time). Both start from a built source
with the same files and end at the last batch; nothing downstream. Reports lines/s and the ratio replay / file.

    .venv/bin/python bench/replay.py [--copies 20] [--rounds 5] [--layout same-times]

Timed, on a shared machine, the rounds of one run can differ by 20%; instructions are counted the same whatever else
the machine does (BENCHMARKS.md, replay): ``--once file``, ``--once replay`` and ``--once nothing`` (the copying
alone, to subtract) under ``PYTHONHASHSEED=0 valgrind --tool=callgrind``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from common import ratio_stats, timed, write_result  # noqa: E402

from edgewise.clock import SystemClock  # noqa: E402
from edgewise.config import BuildContext  # noqa: E402
from edgewise.events import Batch  # noqa: E402
from edgewise.sources.base import Source, SourceContext  # noqa: E402
from edgewise.sources.file import FileSource, FileSourceConfig  # noqa: E402
from edgewise.sources.recording import HFP_KEY_BYTES  # noqa: E402
from edgewise.sources.replay import ReplaySource, ReplaySourceConfig  # noqa: E402

HSL = ROOT / "data" / "hsl-hfp-apc-dumps"


LAYOUTS = ("same-times", "days-apart", "sequential", "one-file")


def copy_recordings(directory: Path, copies: int, layout: str = "same-times") -> int:
    """The bundled recordings ``copies`` times under ``directory``, laid out as ``layout`` says (the module's
    docstring); the number of lines that are not blank."""
    dumps = sorted(HSL.glob("*/hfp.dump"))
    lines, stream = 0, []
    for n in range(copies):
        for k, dump in enumerate(dumps):
            data = dump.read_bytes()
            if layout == "days-apart":
                data = _moved(data, timedelta(days=n))
            elif layout in ("sequential", "one-file"):  # file number n * 13 + k starts on day n * 13 + k
                first = datetime.fromisoformat(data[:HFP_KEY_BYTES].decode().strip())
                data = _moved(data, SEQUENTIAL_FROM + timedelta(days=n * len(dumps) + k) - first)
            lines += sum(1 for line in data.splitlines() if line.strip())
            if layout == "one-file":
                stream.append(data)
                continue
            target = directory / f"copy{n:03d}" / dump.parent.name / "hfp.dump"
            target.parent.mkdir(parents=True)
            target.write_bytes(data)
    if layout == "one-file":
        (directory / "one" / "file").mkdir(parents=True)
        (directory / "one" / "file" / "hfp.dump").write_bytes(b"".join(stream))
    return lines


SEQUENTIAL_FROM = datetime(2025, 1, 1, tzinfo=UTC)


def _moved(data: bytes, by: timedelta) -> bytes:
    return b"".join(_later(line, by) for line in data.splitlines(True)) if by else data


def _later(line: bytes, by: timedelta) -> bytes:
    """An HFP line with its receive time (the first field) moved by ``by``, written as HSL's recorders write it."""
    stamp, sep, rest = line.partition(b" ")
    if not sep:
        return line
    moved = datetime.fromisoformat(stamp.decode()) + by
    return moved.strftime("%Y-%m-%dT%H:%M:%S.%fZ").encode() + sep + rest


def sources(pattern: str, build: BuildContext) -> dict[str, Source]:
    """The two sources compared, built, over the same files."""
    return {"file": FileSource(FileSourceConfig(id="f", path=pattern, format="hfp"), build),
            "replay": ReplaySource(ReplaySourceConfig(id="f", path=pattern, speed="max", progress="off"), build)}


SAME_STREAM = ("sequential", "one-file")
"""Layouts where the ``file`` source gives the replay's stream: the same ids and payloads in the same order."""


def same_stream(built: dict[str, Source]) -> bool:
    """Whether the two sources give the same events in the same order (untimed, checked before the rounds)."""
    events = [[(i, p) for batch in batches(source) for i, p in zip(batch.ids(), batch.payloads, strict=True)]
              for source in built.values()]
    return events[0] == events[1]


def batches(source: Source) -> Iterator[Batch]:
    """The source's batches, read as both sources are read here (the default batch size)."""
    return source.read(SourceContext(SystemClock(), print, batch_size=1024))


def read_all(source: Source) -> int:
    return sum(len(batch) for batch in batches(source))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--layout", choices=LAYOUTS, default="same-times", help="how the copies are laid out "
                        "(above); default: %(default)s")
    parser.add_argument("--out", help="default: bench/results/replay.json (replay_<layout>.json for the others)")
    parser.add_argument("--once", choices=("file", "replay", "nothing"), help="read the recording once with this "
                        "source, untimed, and print the count (to count instructions: `nothing` is the copying "
                        "alone, to subtract)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        lines = copy_recordings(Path(tmp), args.copies, args.layout)
        pattern = str(Path(tmp) / "*" / "*" / "hfp.dump")
        build = BuildContext(".")
        if args.once:
            print(read_all(sources(pattern, build)[args.once]) if args.once != "nothing" else lines)
            return 0
        if args.layout in SAME_STREAM and not same_stream(sources(pattern, build)):
            raise SystemExit(f"--layout {args.layout}: the file source and the replay gave different streams")
        file_times, replay_times = [], []
        for r in range(args.rounds):
            built = sources(pattern, build)
            t_file, n_file = timed(read_all, built["file"])
            t_replay, n_replay = timed(read_all, built["replay"])
            if n_file != n_replay or n_file != lines:
                raise SystemExit(f"counts differ: {lines} lines, file {n_file}, replay {n_replay}")
            file_times.append(t_file)
            replay_times.append(t_replay)
            print(f"round {r + 1}: file {lines / t_file:,.0f} lines/s, replay {lines / t_replay:,.0f} lines/s, "
                  f"ratio {t_file / t_replay:.2f}", file=sys.stderr)
    result = {
        "benchmark": "replay-max-vs-file",
        "lines": lines,
        "files": 1 if args.layout == "one-file" else args.copies * len(list(HSL.glob("*/hfp.dump"))),
        "rounds": args.rounds,
        "copies": args.copies,
        "layout": args.layout,
        "file_lines_per_s_median": round(lines / statistics.median(file_times)),
        "replay_lines_per_s_median": round(lines / statistics.median(replay_times)),
        **ratio_stats(file_times, replay_times),
    }
    name = "replay.json" if args.layout == "same-times" else f"replay_{args.layout.replace('-', '_')}.json"
    write_result(args.out or str(ROOT / "bench" / "results" / name), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
