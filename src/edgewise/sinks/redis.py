"""``redis``: events appended to a Redis stream (``XADD``; ``pip install 'edgewise[redis]'``).

Each entry has the fields ``id``, ``source``, ``event_time_us`` and ``payload`` (JSON). An event id already
written within ``dedupe_ttl`` is skipped (a marker key set with ``SET NX`` in the same Lua script as the
``XADD``), so a batch retried after a failure or a restart does not add entries twice. ``maxlen`` trims the
stream approximately (``MAXLEN ~``).
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar, Literal

from edgewise.config import BuildContext
from edgewise.config.models import SinkConfig
from edgewise.declare import Field
from edgewise.durations import Duration
from edgewise.errors import PluginError
from edgewise.events import Batch
from edgewise.sinks.base import RetryableSinkError, Sink, SinkContext
from edgewise.sinks.table import rows

# KEYS[1] stream, ARGV: marker prefix, ttl s, maxlen (0: none), then (id, source, time, payload) per event
_APPEND = """
local added = 0
for i = 4, #ARGV, 4 do
  if redis.call('SET', ARGV[1] .. ARGV[i], '1', 'NX', 'EX', ARGV[2]) then
    if tonumber(ARGV[3]) > 0 then
      redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'id', ARGV[i], 'source', ARGV[i+1],
                 'event_time_us', ARGV[i+2], 'payload', ARGV[i+3])
    else
      redis.call('XADD', KEYS[1], '*', 'id', ARGV[i], 'source', ARGV[i+1], 'event_time_us', ARGV[i+2],
                 'payload', ARGV[i+3])
    end
    added = added + 1
  end
end
return added
"""


class RedisSinkConfig(SinkConfig):
    type: Literal["redis"] = "redis"
    url: str = Field(default="redis://127.0.0.1:6379/0", description="redis:// or rediss:// URL")
    stream: str = Field(min_length=1, description="the stream key")
    maxlen: int = Field(default=0, ge=0, description="trim the stream to about this many entries (0: never)")
    dedupe_ttl: Duration = Field(default=86_400_000_000, description="how long an event id is remembered, to skip "
                                 "repeats")


class RedisSink(Sink):
    kind: ClassVar[str] = "redis"
    Config = RedisSinkConfig
    config: RedisSinkConfig

    def __init__(self, config: RedisSinkConfig, ctx: BuildContext) -> None:
        super().__init__(config, ctx)
        try:
            self.redis: Any = importlib.import_module("redis")
        except ImportError:
            raise PluginError("the redis sink needs redis-py: pip install 'edgewise[redis]'") from None
        self._client: Any = None
        self._script: Any = None

    def open(self, ctx: SinkContext) -> None:
        self._client = self.redis.Redis.from_url(self.config.url, socket_timeout=10, socket_connect_timeout=5)
        self._script = self._client.register_script(_APPEND)

    def write(self, batch: Batch) -> None:
        c = self.config
        args: list[Any] = [f"{c.stream}:seen:", max(1, c.dedupe_ttl // 1_000_000), c.maxlen]
        for row in rows(batch):
            args.extend(row)
        try:
            self._script(keys=[c.stream], args=args)
        except self.redis.RedisError as exc:
            raise RetryableSinkError(f"redis {c.url}: {exc}") from None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
