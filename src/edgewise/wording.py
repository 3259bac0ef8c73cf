"""How edgewise counts things in what it prints: "1 event", "2 events", never "1 events"."""

from __future__ import annotations

_IRREGULAR = {"entry": "entries", "body": "bodies"}


def count(n: int, noun: str, *, thousands: bool = False) -> str:
    """``n`` and the noun in the number it needs: ``count(1, "event")`` is ``1 event``, ``count(0, "event")``
    ``0 events``; ``thousands`` writes 12,794."""
    number = f"{n:,}" if thousands else str(n)
    return f"{number} {noun if n == 1 else _IRREGULAR.get(noun, noun + 's')}"
