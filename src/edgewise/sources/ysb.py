"""The Yahoo Streaming Benchmark workload: ad events and their campaign table, seeded and reproducible.

Events look like the original benchmark's (``user_id``, ``page_id``, ``ad_id``, ``ad_type``, ``event_type``,
``event_time`` in epoch milliseconds as text, ``ip_address``), about 240 bytes each as JSON. Each ad belongs to one
campaign (``campaigns`` x ``ads_per_campaign`` ads).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator

AD_TYPES = ("banner", "modal", "sponsored-search", "mail", "mobile")
EVENT_TYPES = ("view", "click", "purchase")


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


class YsbWorkload:
    def __init__(self, seed: int = 1, campaigns: int = 100, ads_per_campaign: int = 10, users: int = 100,
                 pages: int = 100, start_ms: int = 1_700_000_000_000, events_per_second: int = 10_000) -> None:
        rng = random.Random(seed)  # noqa: S311  # reproducible workloads, not security
        self.campaign_ids = [_uuid(rng) for _ in range(campaigns)]
        self.ads = [(_uuid(rng), self.campaign_ids[i // ads_per_campaign])
                    for i in range(campaigns * ads_per_campaign)]
        self.users = [_uuid(rng) for _ in range(users)]
        self.pages = [_uuid(rng) for _ in range(pages)]
        self.seed = seed
        self.start_ms = start_ms
        self.events_per_second = events_per_second

    def campaign_table(self) -> list[dict[str, str]]:
        """Rows ``{ad_id, campaign_id}``: the table the stateless YSB part joins with."""
        return [{"ad_id": ad, "campaign_id": campaign} for ad, campaign in self.ads]

    def events(self, count: int) -> Iterator[dict[str, str]]:
        rng = random.Random(self.seed * 7919 + 1)  # noqa: S311  # reproducible workloads
        ads, users, pages = [a for a, _ in self.ads], self.users, self.pages
        step = 1000 / self.events_per_second
        for i in range(count):
            yield {
                "user_id": rng.choice(users),
                "page_id": rng.choice(pages),
                "ad_id": rng.choice(ads),
                "ad_type": rng.choice(AD_TYPES),
                "event_type": rng.choice(EVENT_TYPES),
                "event_time": str(self.start_ms + int(i * step)),
                "ip_address": "1.2.3.4",
            }
