"""``quiet_stderr`` (Spark's chatter kept off stderr) loses none of edgewise's own lines: a process that prints
and exits at once, as ``edgewise spark`` does after its last micro-batch, still gets every line out. Found when
`make run-hub`'s log lacked the last micro-batch's line and ``done:`` of a run."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

PRINTS_AND_EXITS = """
import sys
from edgewise.engine.spark.quiet import quiet_stderr
with quiet_stderr():
    print("Using Spark's default log4j profile: chatter", file=sys.stderr)
    for n in range(3000):
        print(f"edgewise: line {n}", file=sys.stderr)
print("edgewise: after the block", file=sys.stderr)
"""


def test_every_line_printed_inside_reaches_stderr_before_the_process_exits() -> None:
    for _ in range(3):  # the loss was a race with the exit: give it chances
        done = subprocess.run([sys.executable, "-c", PRINTS_AND_EXITS], capture_output=True, text=True,
                              timeout=60, cwd=ROOT, env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""})
        lines = done.stderr.splitlines()
        assert done.returncode == 0, done.stderr[-2000:]
        assert [line for line in lines if line.startswith("edgewise: line")] == [
            f"edgewise: line {n}" for n in range(3000)]
        assert lines[-1] == "edgewise: after the block"
        assert not any("log4j" in line for line in lines)  # the chatter is still filtered
