"""Write examples/github/deliveries.ndjson: the bundled Octokit example payloads (data/github-webhooks-octokit,
unmodified) as the deliveries edgewise's webhook source makes of them, `{"event", "delivery", "body"}` with the
event type GitHub names in X-GitHub-Event and a delivery id made from the file's name. `edgewise run
examples/github/pipeline.yaml examples/github/deliveries.ndjson` runs the example on them; examples/github/send.py
posts them to a daemon as GitHub would. tests/test_github_example.py checks the file is what this writes.

    python tools/github_deliveries.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "github-webhooks-octokit"
OUT = ROOT / "examples" / "github" / "deliveries.ndjson"
EVENTS = ("push", "status", "check_run", "check_suite", "deployment", "deployment_status")
"""In this order: pushes, then the checks of their commits, then deployments (as a day of a repository goes)."""


def deliveries_text() -> str:
    lines = []
    for event in EVENTS:
        for path in sorted((DATA / event).glob("*.json")):
            body = json.loads(path.read_text())
            delivery = f"octokit-{event}-{path.name.removesuffix('.json').replace('.', '-')}"
            lines.append(json.dumps({"event": event, "delivery": delivery, "body": body}, ensure_ascii=False,
                                    separators=(",", ":")))
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check that the file is current (exit 1 if not)")
    args = parser.parse_args()
    text = deliveries_text()
    if args.check:
        current = OUT.exists() and OUT.read_text() == text
        print(f"{OUT.relative_to(ROOT)}: {'current' if current else 'out of date: run tools/github_deliveries.py'}")
        return 0 if current else 1
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)} ({text.count(chr(10))} deliveries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
