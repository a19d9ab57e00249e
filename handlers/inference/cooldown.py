"""The circuit breaker: an upstream that keeps failing is skipped for a while, then comes back by itself.

In one process the counts live in memory. With Redis configured (limits.redis_url) every worker and replica shares
them: a failure anywhere counts everywhere, and a cooldown set by one replica is seen by all within
`_REFRESH` seconds. A Redis outage turns the shared breaker off (nothing is skipped); it is never a reason to refuse.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from redis.exceptions import RedisError

from handlers import redisconn

log = logging.getLogger("specway.cooldown")
_REFRESH = 0.5  # seconds a replica trusts what it last read from Redis

# KEYS: failures counter, cooldown marker. ARGV: failures, window ms, cooldown ms. 1 when this failure trips it.
_FAILED = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if n >= tonumber(ARGV[1]) then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""


class Cooldowns:
    def __init__(self, failures: int = 3, window: float = 60.0, seconds: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.failures = failures
        self.window = window
        self.seconds = seconds
        self._clock = clock
        self._recent: dict[str, deque[float]] = {}
        self._until: dict[str, float] = {}

    async def refresh(self, upstreams: Iterable[str]) -> None:
        """Bring what remaining() reads up to date (shared state only)."""

    async def failed(self, upstream: str) -> bool:
        """Count a failure; True when it puts the upstream in cooldown."""
        if self.seconds <= 0:
            return False
        now = self._clock()
        recent = self._recent.setdefault(upstream, deque())
        recent.append(now)
        while recent and recent[0] < now - self.window:
            recent.popleft()
        if len(recent) >= self.failures:
            self._until[upstream] = now + self.seconds
            recent.clear()
            return True
        return False

    async def succeeded(self, upstream: str) -> None:
        self._recent.pop(upstream, None)

    def remaining(self, upstream: str) -> float:
        """Seconds left in the upstream's cooldown; 0 when it may be tried."""
        until = self._until.get(upstream)
        if until is None:
            return 0.0
        left = until - self._clock()
        if left <= 0:
            del self._until[upstream]
            return 0.0
        return left

    async def aclose(self) -> None:
        return None


class SharedCooldowns(Cooldowns):
    """The counts in Redis (see redisconn for its pool and outages). When Redis is away or the pool is busy, a
    failure still counts in this process and the last cooldowns read stay in force; nothing waits on it twice."""

    def __init__(self, url: str, failures: int = 3, window: float = 60.0, seconds: float = 30.0,
                 prefix: str = "specway:cd:") -> None:
        super().__init__(failures, window, seconds)
        self._link = redisconn.Link(url, log, "cooldowns", "no upstream is skipped meanwhile")
        self._failed = self._link.redis.register_script(_FAILED)
        self._prefix = prefix
        self._read_at: dict[str, float] = {}
        self._failing: set[str] = set()  # upstreams this process saw fail: only they need a reset on success

    async def refresh(self, upstreams: Iterable[str]) -> None:
        now = self._clock()
        stale = sorted(u for u in set(upstreams) if now - self._read_at.get(u, -_REFRESH) >= _REFRESH)
        if not stale or self.seconds <= 0:
            return
        for u in stale:  # before the call: requests arriving meanwhile use what was last read, not a read of their own
            self._read_at[u] = now

        async def read(redis: Any) -> list[int]:
            async with redis.pipeline(transaction=False) as pipe:
                for u in stale:
                    pipe.pttl(self._prefix + "until:" + u)
                return list(await pipe.execute())

        try:
            ttls = await self._link.run(read)
        except (RedisError, OSError):
            return
        for u, ttl in zip(stale, ttls, strict=True):
            if ttl > 0:
                self._until[u] = now + ttl / 1000
            else:
                self._until.pop(u, None)

    async def failed(self, upstream: str) -> bool:
        if self.seconds <= 0:
            return False
        self._failing.add(upstream)
        keys = [self._prefix + "fails:" + upstream, self._prefix + "until:" + upstream]
        args = [self.failures, int(self.window * 1000), int(self.seconds * 1000)]
        try:
            tripped = bool(await self._link.run(lambda _: self._failed(keys=keys, args=args)))
        except (RedisError, OSError):
            return await super().failed(upstream)  # Redis away or busy: this process still protects itself
        if tripped:
            self._until[upstream] = self._clock() + self.seconds
        return tripped

    async def succeeded(self, upstream: str) -> None:
        if upstream in self._failing:
            self._failing.discard(upstream)
            key = self._prefix + "fails:" + upstream
            try:
                await self._link.run(lambda redis: redis.delete(key))
            except (RedisError, OSError):
                pass  # the count expires with its window anyway

    async def aclose(self) -> None:
        await self._link.aclose()
