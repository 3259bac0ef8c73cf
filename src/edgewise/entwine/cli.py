"""``edgewise keygen``, ``edgewise verify`` and ``edgewise prove``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from edgewise.cli import EXIT_CONFIG, EXIT_FAILED, EXIT_OK


def add_parsers(sub: Any) -> None:
    keygen = sub.add_parser(
        "keygen", help="make an Ed25519 key for an entwine timeline and print its public key",
        description="Write a new Ed25519 private key to KEYFILE (PKCS#8 PEM, readable by you only; an existing file "
        "is never overwritten) and print the public key (64 hex digits): give it to whoever verifies the timeline.")
    keygen.add_argument("keyfile", metavar="KEYFILE")
    keygen.set_defaults(handler=cmd_keygen)

    verify = sub.add_parser(
        "verify", help="check an entwine timeline (or an inclusion proof): chain, signatures, anchors",
        description="Check every entry of TIMELINE: positions in order from 0, each entry's hash over its content "
        "and the hash before it, each signature under the owner's key, and each anchor against the anchored "
        "timeline where its directory can be read. With --proof, check one inclusion proof (from `edgewise prove`) "
        "without the timeline. Exit code: 0 everything holds, 1 names the first bad position (or what is wrong "
        "with the proof), 2 bad arguments.")
    verify.add_argument("timeline", nargs="?", metavar="TIMELINE", help="the timeline's directory")
    verify.add_argument("--pubkey", metavar="KEY",
                        help="the owner's public key (hex, or a file holding it) to check against; default: the "
                        "key the timeline names (which proves consistency, not who signed: pass the key you trust)")
    verify.add_argument("--proof", metavar="PROOF", help="an inclusion proof file (- for stdin) instead of a timeline")
    verify.add_argument("--event", metavar="EVENT",
                        help="with --proof: the event (a JSON file) the proof should be for")
    verify.add_argument("--anchored", action="append", default=[], metavar="DIR",
                        help="another timeline's directory, for anchors whose recorded place moved (repeatable)")
    verify.set_defaults(handler=cmd_verify)

    prove = sub.add_parser(
        "prove", help="print an inclusion proof of one event in an entwine timeline",
        description="Print (JSON, on stdout) the proof that event EVENT_ID is in TIMELINE: its signed entry and "
        "the owner's public key. `edgewise verify --proof FILE [--pubkey KEY] [--event EVENT.json]` checks it "
        "without the timeline.")
    prove.add_argument("timeline", metavar="TIMELINE")
    prove.add_argument("event_id", metavar="EVENT_ID")
    prove.set_defaults(handler=cmd_prove)


def cmd_keygen(args: argparse.Namespace) -> int:
    from edgewise.entwine.keys import generate

    public = generate(args.keyfile)
    print(public)
    print(f"edgewise: private key written to {args.keyfile} (mode 0600); the line above is its public key",
          file=sys.stderr)
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    if args.proof:
        return _verify_proof(args)
    if not args.timeline:
        print("edgewise: verify needs a TIMELINE directory or --proof FILE", file=sys.stderr)
        return EXIT_CONFIG
    from edgewise.entwine.timeline import read_meta, verify

    anchored = {read_meta(d)["public_key"]: d for d in args.anchored}
    report = verify(args.timeline, args.pubkey, anchored)
    if report.bad is not None:
        pos, why = report.bad
        print(f"edgewise: timeline {args.timeline}: position {pos} is bad: {why} "
              f"({report.entries} entries before it hold)")
        return EXIT_FAILED
    unchecked = (f"; anchors to {len(report.anchors_unchecked)} timelines not checked (not found: pass "
                 "--anchored DIR)") if report.anchors_unchecked else ""
    torn = "; the last line is an append a crash cut short (not an entry)" if report.torn_tail else ""
    print(f"edgewise: timeline {args.timeline}: {report.entries} entries hold, signed by {report.public_key}; "
          f"{report.anchors_checked} anchors checked{unchecked}{torn}")
    return EXIT_OK


def _verify_proof(args: argparse.Namespace) -> int:
    from edgewise.entwine.timeline import check_proof
    from edgewise.jsonio import load_json_file

    proof = load_json_file(args.proof)
    event = load_json_file(args.event) if args.event else None
    problem = check_proof(proof, args.pubkey, event)
    if problem:
        print(f"edgewise: the proof does not hold: {problem}")
        return EXIT_FAILED
    entry = proof["entry"]
    print(f"edgewise: the proof holds: event {entry['event']!r} is at position {entry['pos']} of the timeline "
          f"of {proof['public_key']}" + ("" if args.pubkey else " (the key the proof names: pass --pubkey to "
                                         "check it is the one you trust)"))
    return EXIT_OK


def cmd_prove(args: argparse.Namespace) -> int:
    from edgewise.entwine.timeline import prove

    sys.stdout.buffer.write(orjson.dumps(prove(args.timeline, args.event_id), option=orjson.OPT_INDENT_2) + b"\n")
    return EXIT_OK

