"""A per-source request rate limit: a token bucket that refuses (429 with ``Retry-After``) instead of queueing.

``rate`` requests a second on average, up to ``burst`` at once. Used from the event loop's thread only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self.tokens = float(burst)
        self.at = clock()

    def take(self) -> float:
        """Take one request's token: 0.0 when granted, else the seconds until one is free (nothing taken)."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


def retry_after(seconds: float) -> str:
    """The ``Retry-After`` value (whole seconds, at least 1) for a wait."""
    return str(max(1, math.ceil(seconds)))
