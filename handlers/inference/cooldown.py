"""The circuit breakers, one per deployment and one per upstream: what keeps failing is skipped for a while, then
comes back by itself; what its upstream asked to wait for is skipped for that wait.

A deployment is one model name on one upstream (routing.py). Its own failures (timeouts, 5xx, a 429 that names no
wait) count toward its breaker; a wait the upstream named (a 429, 529 or 5xx with Retry-After, retry-after-ms or a
rate-limit reset) cools that deployment at once, for exactly that wait. Failures that say the whole upstream is out
of reach (a refused connection, DNS, TLS) or refuses the gateway's credentials (401/403) count toward the upstream's
breaker, which skips every deployment on it. So one model failing never takes its neighbours on the upstream down.

Each breaker is a key (`deployment_key`, `upstream_key`). In one process the counts live in memory. With Redis
configured (limits.redis_url) every worker and replica shares them: a failure anywhere counts everywhere, and a
cooldown set by one replica is seen by all within `_REFRESH` seconds, with the same end and the same reason. A Redis
outage turns the shared breaker off (nothing is skipped); it is never a reason to refuse.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from handlers import redisconn

log = logging.getLogger("specway.cooldown")
_REFRESH = 0.5  # seconds a replica trusts what it last read from Redis

State = Literal["open", "cooling"]  # open: its breaker tripped; cooling: its upstream asked for a wait

# KEYS: failures counter, cooldown marker. ARGV: failures, window ms, cooldown ms, marker. 1 when this failure trips it.
_FAILED = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if n >= tonumber(ARGV[1]) then
  redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[3])
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""
# KEYS: cooldown marker. ARGV: wait ms, marker. A wait never shortens a longer cooldown already set.
_COOL = """
local left = redis.call('PTTL', KEYS[1])
if left < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1]) end
return 0
"""


def upstream_key(upstream: str) -> str:
    return f"upstream:{upstream}"


def deployment_key(deployment: str) -> str:
    return f"deployment:{deployment}"


@dataclass(frozen=True, slots=True)
class Cooling:
    """One breaker that is skipping its deployment or upstream: why, and until when."""

    state: State
    until: float  # on the breaker's clock (monotonic)
    until_wall: float  # the same moment as a Unix time, for people: the same in every replica
    why: str

    def until_text(self) -> str:
        """The end, to the second (rounded up), as RFC 3339 UTC."""
        return datetime.fromtimestamp(-(-self.until_wall // 1), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def marker(self) -> str:
        return f"{round(self.until_wall * 1000)} {self.state} {self.why}"


def _from_marker(marker: str, now: float, now_wall: float) -> Cooling | None:
    wall_ms, state, why = (marker.split(" ", 2) + ["", ""])[:3]
    if not wall_ms.isdigit() or state not in ("open", "cooling"):
        return None
    until_wall = int(wall_ms) / 1000
    return Cooling(state, now + (until_wall - now_wall), until_wall, why)  # type: ignore[arg-type]


class Cooldowns:
    def __init__(self, failures: int = 3, window: float = 60.0, seconds: float = 30.0,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.failures = failures
        self.window = window
        self.seconds = seconds
        self._clock = clock
        self._wall = wall
        self._recent: dict[str, deque[float]] = {}
        self._cooling: dict[str, Cooling] = {}

    def tune(self, failures: int, window: float, seconds: float) -> None:
        """New breaker settings (a reload); what is cooling now stays cooling."""
        self.failures, self.window, self.seconds = failures, window, seconds

    async def refresh(self, keys: Iterable[str]) -> None:
        """Bring what state() reads up to date (shared state only)."""

    def _new(self, state: State, seconds: float, why: str) -> Cooling:
        return Cooling(state, self._clock() + seconds, self._wall() + seconds, why)

    async def failed(self, key: str, what: str) -> Cooling | None:
        """Count a failure of `key` (`what` failed, in words); the cooldown it starts when it trips the breaker."""
        if self.seconds <= 0:
            return None
        now = self._clock()
        recent = self._recent.setdefault(key, deque())
        recent.append(now)
        while recent and recent[0] < now - self.window:
            recent.popleft()
        if len(recent) < self.failures:
            return None
        recent.clear()
        self._cooling[key] = cooling = self._new("open", self.seconds, self._tripped(what))
        return cooling

    def _tripped(self, what: str) -> str:
        return f"{self.failures} failure{'s' if self.failures > 1 else ''} within {self.window:g} s, the last: {what}"

    async def cool(self, key: str, seconds: float, why: str) -> Cooling | None:
        """Skip `key` for the `seconds` its upstream asked to wait (never less than a cooldown already running);
        None when cooldowns are off."""
        if self.seconds <= 0 or seconds <= 0:
            return None
        current = self.state(key)
        cooling = self._new("cooling", seconds, why)
        if current is not None and current.until >= cooling.until:
            return current
        self._cooling[key] = cooling
        return cooling

    async def succeeded(self, key: str) -> None:
        self._recent.pop(key, None)

    def state(self, key: str) -> Cooling | None:
        """The cooldown `key` is in, or None when it may be tried."""
        cooling = self._cooling.get(key)
        if cooling is None:
            return None
        if cooling.until <= self._clock():
            del self._cooling[key]
            return None
        return cooling

    def blocking(self, upstream: str, deployment: str) -> tuple[str, Cooling] | None:
        """What skips `deployment` (on `upstream`) now, in words, and its cooldown: its upstream's breaker first,
        else its own."""
        for whose, key in ((f"upstream {upstream}", upstream_key(upstream)),
                           (f"deployment {deployment}", deployment_key(deployment))):
            cooling = self.state(key)
            if cooling is not None:
                how = "rate limited" if cooling.state == "cooling" else "in cooldown"
                return f"{whose} is {how} until {cooling.until_text()} ({cooling.why})", cooling
        return None

    def waiting(self, seconds: float, why: str) -> Cooling:
        """A wait of `seconds` that is no breaker's (a quota refilling), as a cooldown callers are told of."""
        return self._new("cooling", seconds, why)

    def left(self, cooling: Cooling) -> float:
        """Seconds left of `cooling` (0 once over)."""
        return max(0.0, cooling.until - self._clock())

    def remaining(self, key: str) -> float:
        """Seconds left in the cooldown of `key`; 0 when it may be tried."""
        cooling = self.state(key)
        return 0.0 if cooling is None else cooling.until - self._clock()

    async def aclose(self) -> None:
        return None


class SharedCooldowns(Cooldowns):
    """The counts in Redis (see redisconn for its pool and outages). When Redis is away or the pool is busy, a
    failure still counts in this process and the last cooldowns read stay in force; nothing waits on it twice."""

    def __init__(self, url: str, failures: int = 3, window: float = 60.0, seconds: float = 30.0,
                 prefix: str = "specway:cd:") -> None:
        super().__init__(failures, window, seconds)
        self._link = redisconn.Link(url, log, "cooldowns", "no deployment is skipped meanwhile")
        self._failed = self._link.redis.register_script(_FAILED)
        self._cool = self._link.redis.register_script(_COOL)
        self._prefix = prefix
        self._read_at: dict[str, float] = {}
        self._failing: set[str] = set()  # keys this process saw fail: only they need a reset on success

    async def refresh(self, keys: Iterable[str]) -> None:
        now = self._clock()
        stale = sorted(k for k in set(keys) if now - self._read_at.get(k, -_REFRESH) >= _REFRESH)
        if not stale or self.seconds <= 0:
            return
        for k in stale:  # before the call: requests arriving meanwhile use what was last read, not a read of their own
            self._read_at[k] = now

        async def read(redis: Any) -> list[Any]:
            return list(await redis.mget([self._prefix + "until:" + k for k in stale]))

        try:
            markers = await self._link.run(read)
        except (redisconn.RedisError, OSError):
            return
        now_wall = self._wall()
        for k, marker in zip(stale, markers, strict=True):
            text = marker.decode() if isinstance(marker, bytes) else marker
            cooling = _from_marker(text, now, now_wall) if text else None
            if cooling is not None and cooling.until > now:
                self._cooling[k] = cooling
            else:
                self._cooling.pop(k, None)

    async def failed(self, key: str, what: str) -> Cooling | None:
        if self.seconds <= 0:
            return None
        self._failing.add(key)
        cooling = self._new("open", self.seconds, self._tripped(what))
        keys = [self._prefix + "fails:" + key, self._prefix + "until:" + key]
        args = [self.failures, int(self.window * 1000), int(self.seconds * 1000), cooling.marker()]
        try:
            tripped = bool(await self._link.run(lambda _: self._failed(keys=keys, args=args)))
        except (redisconn.RedisError, OSError):
            return await super().failed(key, what)  # Redis away or busy: this process still protects itself
        if not tripped:
            return None
        self._cooling[key] = cooling
        return cooling

    async def cool(self, key: str, seconds: float, why: str) -> Cooling | None:
        cooling = await super().cool(key, seconds, why)  # in force here at once, whatever Redis does
        if cooling is None:
            return None
        keys, args = [self._prefix + "until:" + key], [max(1, round(seconds * 1000)), cooling.marker()]
        try:
            await self._link.run(lambda _: self._cool(keys=keys, args=args))
        except (redisconn.RedisError, OSError):
            pass
        return cooling

    async def succeeded(self, key: str) -> None:
        if key in self._failing:
            self._failing.discard(key)
            counter = self._prefix + "fails:" + key
            try:
                await self._link.run(lambda redis: redis.delete(counter))
            except (redisconn.RedisError, OSError):
                pass  # the count expires with its window anyway

    async def aclose(self) -> None:
        await self._link.aclose()
