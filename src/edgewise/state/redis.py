"""``redis``: state shared by several daemons. Keys live under a prefix; CAS and transactions are Lua scripts, so
each runs atomically on the server (no WATCH round trips, no lost update between two writers)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from edgewise.errors import PluginError
from edgewise.state.base import UNSET, Prev, StateStore

# KEYS: expected keys, then written keys. ARGV: n_expect, n_write, then per expected key (present flag, value),
# then per written key (present flag, value). A flag of "0" means absent / delete.
_APPLY = """
local ne, nw = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = 1, ne do
  local cur = redis.call('GET', KEYS[i])
  local want_present, want = ARGV[1 + 2 * i], ARGV[2 + 2 * i]
  if want_present == '0' then
    if cur then return 0 end
  elseif cur ~= want then
    return 0
  end
end
for j = 1, nw do
  local key = KEYS[ne + j]
  local present, value = ARGV[2 + 2 * ne + 2 * j - 1], ARGV[2 + 2 * ne + 2 * j]
  if present == '0' then redis.call('DEL', key) else redis.call('SET', key, value) end
end
return 1
"""

_DELETE = """
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
if ARGV[1] == '1' and cur ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""


class RedisStore(StateStore):
    def __init__(self, url: str = "redis://127.0.0.1:6379/0", prefix: str = "edgewise:") -> None:
        try:
            import redis
        except ImportError:
            raise PluginError("the redis state store needs the redis client: pip install 'edgewise[redis]'") from None
        self.prefix = prefix
        self._client: Any = redis.Redis.from_url(url)
        self._apply = self._client.register_script(_APPLY)
        self._delete = self._client.register_script(_DELETE)

    def get(self, key: str) -> bytes | None:
        value = self._client.get(self.prefix + key)
        return None if value is None else bytes(value)

    def put(self, key: str, value: bytes, *, prev: Prev = UNSET) -> bool:
        if prev is UNSET:
            self._client.set(self.prefix + key, value)
            return True
        return self.apply({key: value}, {key: prev})

    def delete(self, key: str, *, prev: Prev = UNSET) -> bool:
        if prev is None:
            return False  # "delete if absent" never removes anything
        expected = b"" if prev is UNSET else prev
        return bool(self._delete(keys=[self.prefix + key], args=["0" if prev is UNSET else "1", expected]))

    def scan(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        pattern = _glob_escape(self.prefix + prefix) + "*"
        keys = sorted(self._client.scan_iter(match=pattern, count=1000))
        start = len(self.prefix)
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            for key, value in zip(chunk, self._client.mget(chunk), strict=True):
                if value is not None:
                    yield key.decode()[start:], bytes(value)

    def apply(self, writes: Mapping[str, bytes | None], expect: Mapping[str, bytes | None] | None = None) -> bool:
        expect = expect or {}
        keys = [self.prefix + k for k in expect] + [self.prefix + k for k in writes]
        args: list[Any] = [len(expect), len(writes)]
        for value in (*expect.values(), *writes.values()):
            args += ["0", b""] if value is None else ["1", value]
        return bool(self._apply(keys=keys, args=args))

    def close(self) -> None:
        self._client.close()


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
