"""Relay-key authentication: a hash, an indexed read, and a short in-process cache.

A key revoked or expired in the store stops working within `server.key_cache_seconds` (default 5 s):
cached entries are trusted only that long. Unknown keys are never cached, so a new key works at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from handlers.errors import ApiError
from handlers.periodic import Periodic
from handlers.store.base import Key, Store, hash_secret

_TOUCH_EVERY = 5.0  # seconds between batched last-used writes


@dataclass(frozen=True, slots=True)
class Principal:
    key: Key

    @property
    def workspace_id(self) -> str:
        return self.key.workspace_id


def secret_from_headers(authorization: str | None, x_api_key: str | None) -> str | None:
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    if x_api_key and x_api_key.strip():
        return x_api_key.strip()
    return None


class KeyCache:
    def __init__(self, store: Store, ttl: float) -> None:
        self._store = store
        self._ttl = ttl
        self._entries: dict[str, tuple[Key, float]] = {}
        self._touched: dict[str, datetime] = {}
        self._toucher = Periodic(self.flush, _TOUCH_EVERY, "record keys' last use")

    async def lookup(self, secret: str) -> Key | None:
        digest = hash_secret(secret)
        now = time.monotonic()
        hit = self._entries.get(digest)
        if hit is not None and hit[1] > now:
            key = hit[0]
        else:
            key = await self._store.key_by_secret(secret)
            if key is None:
                self._entries.pop(digest, None)
                return None
            if self._ttl > 0:
                self._entries[digest] = (key, now + self._ttl)
        self._touched[key.id] = datetime.now(UTC)
        return key

    async def authenticate(self, secret: str | None, scope: str) -> Principal:
        if not secret:
            raise ApiError(
                401, "invalid_api_key", "No relay key: send it as 'Authorization: Bearer <key>' or in 'x-api-key'."
            )
        key = await self.lookup(secret)
        if key is None or not key.active(datetime.now(UTC)):
            raise ApiError(401, "invalid_api_key", "The relay key is not valid: unknown, revoked or expired.")
        if scope not in key.scopes:
            raise ApiError(403, "insufficient_scope", f"This key lacks the '{scope}' scope needed here.")
        return Principal(key)

    def forget(self, key_id: str) -> None:
        """Drop a key from this process's cache at once (used after revoking or changing it here)."""
        self._entries = {d: e for d, e in self._entries.items() if e[0].id != key_id}

    def start(self) -> None:
        self._toucher.start()

    async def stop(self) -> None:
        await self._toucher.stop()

    async def flush(self) -> None:
        if self._touched:
            touched, self._touched = self._touched, {}
            await self._store.touch_keys(touched)
