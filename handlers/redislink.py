"""One way to connect to Redis, for everything that shares state through it (rate limits, cooldowns); reached
through handlers.redisconn, which imports this module (and redis-py with it) on first use.

A worker serves up to `server.max_connections` requests at once and each holds a Redis connection only for one
call, so a bounded pool with a wait is enough: when every connection is in use a call queues for one (backpressure),
and only a wait past POOL_WAIT (the worker is overloaded, Redis is not away) ends in Busy. An outage is something
else: a refused or failed connection, or no answer in time. `Link` tells the two apart, says so once per outage,
and while Redis is away lets one call at a time find out whether it is back, so that requests fail fast meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

T = TypeVar("T")

POOL_SIZE = 100  # connections a process opens at most, on demand
POOL_WAIT = 10.0  # seconds a call may queue for a free connection
# Generous on purpose: an overloaded event loop reads a prompt answer late, and a timeout there would be taken for
# an outage (and fail open) exactly when the load is highest.
SOCKET_TIMEOUT = 5.0
CONNECT_TIMEOUT = 2.0


class Busy(RedisError):
    """Every connection of the pool stayed in use for the whole wait: this process is overloaded, Redis is not away."""


class Away(RedisError):
    """Redis is known to be away and another call is already finding out whether it is back."""


class _Pool(aioredis.BlockingConnectionPool):
    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().get_connection(*args, **kwargs)
        except RedisConnectionError as exc:
            # redis-py says "No connection available." for a wait that ran out, chained to the TimeoutError.
            if isinstance(exc.__cause__, TimeoutError):
                raise Busy(f"no free Redis connection within {self.timeout} s (pool of {self.max_connections})") from exc
            raise


def connect(url: str) -> aioredis.Redis:
    """A client on a pool of POOL_SIZE connections with a POOL_WAIT queue, SOCKET_TIMEOUT and CONNECT_TIMEOUT; the
    URL may override each (?max_connections=200&timeout=5&socket_timeout=1&socket_connect_timeout=1).

    One immediate retry when a pooled connection turns out dropped (a restart, a failover): it is reconnected at once,
    while an outage costs one failed attempt. A timeout is never retried: the command may have run (a rate-limit hit
    would count twice), and waiting twice as long helps no one.
    """
    pool = _Pool.from_url(
        url,
        max_connections=POOL_SIZE,
        timeout=POOL_WAIT,
        socket_timeout=SOCKET_TIMEOUT,
        socket_connect_timeout=CONNECT_TIMEOUT,
        retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
    )
    return aioredis.Redis.from_pool(pool)


class Link:
    """A Redis client and what this process knows of Redis' health, for one user (the rate limiter, the cooldowns).

    The first failure of an outage is logged as a warning, its end (a call that worked again) at info: once per
    outage, never per request. While Redis is away, one call at a time goes to it; the others raise Away at once
    instead of each waiting for a connection to fail.
    """

    def __init__(self, url: str, log: logging.Logger, what: str, meanwhile: str) -> None:
        self.redis = connect(url)
        self.down = False
        self._probing = False
        self._log, self._what, self._meanwhile = log, what, meanwhile

    async def run(self, call: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
        """call(redis)'s result; Busy when the pool stayed full, Away while another call probes an outage, and
        RedisError or OSError for a failure (which starts an outage)."""
        probe = self.down
        if probe:
            if self._probing:
                raise Away(f"Redis is away; {self._meanwhile}")
            self._probing = True
        try:
            result = await call(self.redis)
        except Busy:
            raise
        except (RedisError, OSError) as exc:
            if not self.down:
                self.down = True
                self._log.warning("%s: Redis unreachable (%s: %s); %s", self._what, type(exc).__name__, exc,
                                  self._meanwhile)
            raise
        finally:
            if probe:
                self._probing = False
        if probe:  # only a probe ends an outage: a call that began before it must not make the state flap
            self.down = False
            self._log.info("%s: Redis is reachable again", self._what)
        return result

    async def aclose(self) -> None:
        await self.redis.aclose()
