"""The Python file ``spark-submit`` runs: ``spark-submit [spark options] <this file> PIPELINE [edgewise options]``.

spark-submit takes a ``.py`` file or a JAR as the application; the ``edgewise`` console script is neither, and
spark-submit took it for a JAR (``Failed to get main class in JAR``). ``edgewise spark FILE --print-submit`` prints
the whole command, this file's path included (docs/deploy.md).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from edgewise.cli import main as cli

    return cli(["spark", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
