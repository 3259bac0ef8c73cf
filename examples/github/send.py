"""Post recorded GitHub deliveries to an edge daemon as GitHub would: one webhook request each, to
/v1/webhooks/<source>, with X-GitHub-Event, X-GitHub-Delivery and X-Hub-Signature-256 (HMAC-SHA256 of the body
under the secret in GITHUB_WEBHOOK_SECRET, as the daemon's `signature: github` source checks it).

    export GITHUB_WEBHOOK_SECRET=edgewise-example-secret     # the example's test secret: any value both sides share
    edgewise serve examples/github/pipeline.yaml --port 8080 &
    python examples/github/send.py http://127.0.0.1:8080 examples/github/deliveries.ndjson

Exit 0 when the daemon accepted every delivery (202), 1 otherwise (each refusal is printed).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import sys

import httpx
import orjson


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("daemon", help="the daemon's address, e.g. http://127.0.0.1:8080")
    parser.add_argument("deliveries",
                        help='NDJSON of {"event", "delivery", "body"} (examples/github/deliveries.ndjson)')
    parser.add_argument("--source", default="github", help="the daemon's webhook source (default github)")
    args = parser.parse_args(argv)
    secret = os.environ.get("GITHUB_WEBHOOK_SECRET")
    if not secret:
        print("send.py: set GITHUB_WEBHOOK_SECRET to the secret the daemon was started with", file=sys.stderr)
        return 2
    refused = sent = 0
    with open(args.deliveries, "rb") as f, httpx.Client(base_url=args.daemon, timeout=30) as client:
        for line in f:
            if not line.strip():
                continue
            delivery = orjson.loads(line)
            body = orjson.dumps(delivery["body"])
            signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
            reply = client.post(f"/v1/webhooks/{args.source}", content=body, headers={
                "content-type": "application/json", "X-GitHub-Event": delivery["event"],
                "X-GitHub-Delivery": delivery["delivery"], "X-Hub-Signature-256": signature})
            sent += 1
            if reply.status_code != 202:
                refused += 1
                print(f"send.py: {delivery['delivery']}: {reply.status_code} {reply.text.strip()}", file=sys.stderr)
    print(f"send.py: {sent - refused} of {sent} deliveries accepted")
    return 0 if refused == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
