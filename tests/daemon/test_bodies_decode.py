"""Decoding queued NDJSON bodies: the one-call way (the lines joined into an array) gives what decoding line by
line gives, for every body the server accepts, blank lines and CRLF included."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewise.daemon.bodies import decode_body, parse_events

SCALARS = (st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.text()
           | st.floats(allow_nan=False, allow_infinity=False))
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(), inner, max_size=3), max_leaves=8)
OBJECTS = st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=4)
SEPARATORS = st.sampled_from([b"\n", b"\r\n", b"\n\n", b"\n \n", b"\n\r\n", b" \n\t"])


@settings(max_examples=300)
@given(st.lists(st.tuples(OBJECTS, SEPARATORS), min_size=1, max_size=8), st.sampled_from([b"", b"\n", b"  \n"]))
def test_ndjson_bodies_decode_as_line_by_line(lines, lead) -> None:
    body = lead + b"".join(orjson.dumps(obj) + sep for obj, sep in lines)
    parsed = parse_events(body, "application/x-ndjson", 10_000)  # what the server accepts and queues
    assert decode_body(parsed.kind, parsed.body, None) == [obj for obj, _ in lines]
    assert parsed.count == len(lines)
