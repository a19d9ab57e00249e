"""Redis for what shares state through it (rate limits, cooldowns): handlers/redislink.py's names, imported on first
use. redis-py loads much with it (its cluster client, OpenTelemetry's SDK), and a gateway without `limits.redis_url`
never needs it: `redisconn.Link(...)` imports it, `except redisconn.RedisError` only once an exception is raised."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from handlers.redislink import Away, Busy, Link, RedisError, connect

__all__ = ["Away", "Busy", "Link", "RedisError", "connect"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from handlers import redislink

    return getattr(redislink, name)
