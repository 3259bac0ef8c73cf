"""Entwine: signed, hash-chained event timelines (``docs/entwine.md``).

A timeline is a directory: ``timeline.json`` (its owner's Ed25519 public key) and ``entries.log``, one JSON line
per event: its position, the hash of the entry before it, the event's id and digest, anchors to other timelines'
heads, the entry's hash and the owner's signature of that hash. Anyone with the public key can check that no
entry was removed, changed or reordered (``verify``) and that a given event is in it (``prove``).
"""
