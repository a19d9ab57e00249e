"""Per-key rate limits (requests and tokens per minute) by GCRA, the generic cell rate algorithm.

A bucket's state is (stamp_ms, debt): how far it was drawn down at stamp_ms, in units of ms x limit. One unit of
cost adds PERIOD_MS, the bucket is empty at PERIOD_MS x limit, and the debt drains by `limit` a millisecond. This is
GCRA with the theoretical arrival time stamp + debt / limit, kept in integers so that it is exact for every limit
(a float TAT lets rounding refuse the 60th request of 60). A limit change keeps the units used, not the fraction.

MemoryLimiter serves one process. RedisLimiter is shared by every worker and replica: one Lua script a call, on the
Redis server's clock, so hosts whose clocks disagree still agree on every bucket.
"""

from __future__ import annotations

import abc
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from generated import errors as codes
from generated.config import LimitsSettings
from handlers import redisconn
from handlers.errors import ApiError

log = logging.getLogger("specway.ratelimit")

PERIOD_MS = 60_000
# Keeps every number in the Lua script below 2**53, where Lua's doubles are exact integers.
MAX_LIMIT = 10**10

Op = Literal["hit", "peek", "refund"]


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    limit: int
    remaining: int  # after this hit (0 when refused)
    reset_seconds: float  # until the window is fully replenished
    retry_after: float | None  # seconds until this hit would be allowed (None when allowed)


def _check(limit: int, cost: int) -> None:
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"rate limit must be 1..{MAX_LIMIT} per minute, not {limit}")
    if cost < 0:
        raise ValueError(f"cost must not be negative, not {cost}")


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _verdict(limit: int, raw: Sequence[int]) -> Verdict:
    """A verdict from (allowed, remaining, reset_ms, retry_ms or -1), the shape both backends compute."""
    allowed, remaining, reset_ms, retry_ms = (int(x) for x in raw)
    retry = retry_ms / 1000 if retry_ms >= 0 else None
    return Verdict(bool(allowed), limit, remaining, reset_ms / 1000, retry)


def _drain(stamp: int, debt: int, limit: int, now: int) -> int:
    return max(debt - max(now - stamp, 0) * limit, 0)


def _decide(debt: int, limit: int, cost: int, commit: bool) -> tuple[int, tuple[int, int, int, int]]:
    """The debt after a hit of `cost` (consumed only if `commit`) and its raw verdict. The Lua script mirrors this."""
    cap, inc = PERIOD_MS * limit, PERIOD_MS * cost
    full_ms = _ceil_div(debt, limit)
    if cost > limit:  # can never pass: point at the time the bucket is full rather than "never"
        return debt, (0, 0, full_ms, min(max(full_ms, 1), PERIOD_MS))
    if debt + inc > cap:
        return debt, (0, 0, full_ms, _ceil_div(debt + inc - cap, limit))
    if commit:
        debt += inc
    return debt, (1, (cap - debt) // PERIOD_MS, _ceil_div(debt, limit), -1)


class Limiter(abc.ABC):
    async def hit(self, bucket: str, limit: int, cost: int = 1) -> Verdict:
        """Consume `cost` of a per-minute `limit`; a refused hit consumes nothing."""
        _check(limit, cost)
        return await self._run("hit", bucket, limit, cost)

    async def refund(self, bucket: str, limit: int, cost: int) -> None:
        """Give back unused cost (tokens estimated too high); the bucket never fills beyond `limit`."""
        _check(limit, cost)
        if cost:
            await self._run("refund", bucket, limit, cost)

    async def peek(self, bucket: str, limit: int, cost: int = 1) -> Verdict:
        """Read without consuming: would a hit of `cost` pass, and how much is left."""
        _check(limit, cost)
        return await self._run("peek", bucket, limit, cost)

    @abc.abstractmethod
    async def _run(self, op: Op, bucket: str, limit: int, cost: int) -> Verdict: ...

    @abc.abstractmethod
    async def ping(self) -> None: ...

    @abc.abstractmethod
    async def aclose(self) -> None: ...


class MemoryLimiter(Limiter):
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[str, tuple[int, int, int]] = {}  # bucket -> (stamp_ms, debt, drained_at_ms)
        self._writes, self._sweep_at = 0, 1024

    async def _run(self, op: Op, bucket: str, limit: int, cost: int) -> Verdict:
        now = math.floor(self._clock() * 1000)
        stamp, debt, _ = self._buckets.get(bucket, (now, 0, now))
        debt = _drain(stamp, debt, limit, now)
        if op == "refund":
            debt = max(debt - cost * PERIOD_MS, 0)
            self._store(bucket, debt, limit, now)
            cost = 1
        after, raw = _decide(debt, limit, cost, commit=op == "hit")
        if after != debt:
            self._store(bucket, after, limit, now)
        return _verdict(limit, raw)

    def _store(self, bucket: str, debt: int, limit: int, now: int) -> None:
        if debt:
            self._buckets[bucket] = (now, debt, now + _ceil_div(debt, limit))
        else:
            self._buckets.pop(bucket, None)
        self._writes += 1
        if self._writes >= self._sweep_at:  # sweeping n buckets after n writes: amortised O(1) a write
            for key in [k for k, (_, _, drained_at) in self._buckets.items() if drained_at <= now]:
                del self._buckets[key]
            self._writes, self._sweep_at = 0, max(len(self._buckets), 1024)

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        self._buckets.clear()


# KEYS[1]: the bucket; ARGV: op ("hit", "peek" or "refund"), limit, cost. Returns {allowed, remaining, reset_ms,
# retry_ms or -1}. Mirrors _drain and _decide; string.format("%d") because tostring keeps only 14 digits.
_LUA = """
local key, op = KEYS[1], ARGV[1]
local limit, cost, period = tonumber(ARGV[2]), tonumber(ARGV[3]), 60000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local debt = 0
local saved = redis.call('GET', key)
if saved then
  local stamp, d = string.match(saved, '^(%d+) (%d+)$')
  debt = math.max(tonumber(d) - math.max(now - tonumber(stamp), 0) * limit, 0)
end
local function store(d)
  if d > 0 then
    redis.call('SET', key, string.format('%d %d', now, d), 'PX', math.ceil(d / limit) + 1000)
  else
    redis.call('DEL', key)
  end
end
if op == 'refund' then
  debt = math.max(debt - cost * period, 0)
  store(debt)
  cost = 1
end
local cap, inc = period * limit, cost * period
local full_ms = math.ceil(debt / limit)
if cost > limit then
  return {0, 0, full_ms, math.min(math.max(full_ms, 1), period)}
end
if debt + inc > cap then
  return {0, 0, full_ms, math.ceil((debt + inc - cap) / limit)}
end
if op == 'hit' then
  debt = debt + inc
  store(debt)
end
return {1, math.floor((cap - debt) / period), math.ceil(debt / limit), -1}
"""


class RedisLimiter(Limiter):
    """Shared by every worker and replica; see redisconn for the pool, its timeouts and how an outage is told apart
    from load. Under load a hit queues for a connection, and past the pool's wait it is refused with 503 (the
    gateway is overloaded): failing open then would let a key past its limit exactly when it is busiest."""

    def __init__(self, url: str, *, prefix: str = "specway:rl:",
                 on_error: Literal["open", "closed"] = LimitsSettings().on_redis_error) -> None:
        self._link = redisconn.Link(url, log, "rate limiter", f"failing {on_error}")
        self._redis = self._link.redis
        self._script = self._redis.register_script(_LUA)  # EVALSHA, falling back to SCRIPT LOAD on NOSCRIPT
        self._prefix = prefix
        self._on_error = on_error

    async def _run(self, op: Op, bucket: str, limit: int, cost: int) -> Verdict:
        keys, args = [self._prefix + bucket], [op, limit, cost]
        try:
            raw = await self._link.run(lambda _: self._script(keys=keys, args=args))
        except redisconn.Busy:
            if op == "refund":  # best effort, as while Redis is away
                return _verdict(limit, (1, 0, 0, -1))
            raise _overloaded() from None
        except (redisconn.RedisError, OSError):
            return self._fallback(limit, cost)
        return _verdict(limit, raw)

    def _fallback(self, limit: int, cost: int) -> Verdict:
        if self._on_error == "open":
            return Verdict(True, limit, max(limit - cost, 0), 0.0, None)
        return Verdict(False, limit, 0, 1.0, 1.0)

    async def ping(self) -> None:
        await self._redis.ping()

    async def aclose(self) -> None:
        await self._link.aclose()


def _overloaded() -> ApiError:
    return ApiError(codes.OVERLOADED, "The gateway is overloaded right now; retry shortly.",
                    headers=retry_headers(1.0))


def _duration(seconds: float) -> str:
    """OpenAI's (Go's) duration format to the millisecond: "0s", "120ms", "1.5s", "6m0s", "1h0m0s"."""
    ms = max(round(seconds * 1000), 0)
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    minutes, ms = divmod(ms, 60_000)
    hours, minutes = divmod(minutes, 60)
    secs = f"{ms // 1000}.{ms % 1000:03d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{secs}"
    return f"{minutes}m{secs}" if minutes else secs


def headers(kind: Literal["requests", "tokens"], verdict: Verdict) -> dict[str, str]:
    return {
        f"x-ratelimit-limit-{kind}": str(verdict.limit),
        f"x-ratelimit-remaining-{kind}": str(verdict.remaining),
        f"x-ratelimit-reset-{kind}": _duration(verdict.reset_seconds),
    }


def retry_headers(retry_after: float) -> dict[str, str]:
    """Never 0 (an invitation to retry at once) nor beyond a minute (SDKs ignore larger values)."""
    ms = math.ceil(round(retry_after * 1000, 6))
    return {"Retry-After": str(min(max(math.ceil(ms / 1000), 1), 60)), "retry-after-ms": str(min(max(ms, 1), 60_000))}
