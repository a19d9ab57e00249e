"""One way to connect to Redis, for everything that shares state through it (rate limits, cooldowns)."""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff


def connect(url: str) -> aioredis.Redis:
    """Defaults the URL may override (?max_connections=100&socket_timeout=0.2): at most 50 connections a process,
    a call waits up to 1 s for a free one, and connecting or answering may take 1 s before it fails.

    One immediate retry: a pooled connection that Redis dropped (restart, failover) is reconnected at once, while
    an outage costs one failed attempt, not redis-py's default ten with backoff.
    """
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=50,
        timeout=1.0,
        socket_timeout=1.0,
        socket_connect_timeout=1.0,
        retry=Retry(NoBackoff(), 1),
    )
    return aioredis.Redis.from_pool(pool)
