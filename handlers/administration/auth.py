"""Relay-key authentication: a hash, an indexed read, and a short in-process cache.

A key revoked or expired in the store, or whose workspace is revoked (the lookup reads the workspace's state with the
key), stops working within `server.key_cache_seconds`: cached entries are trusted only that long. Unknown keys are
never cached, so a new key works at once.

While the store cannot be reached (StoreUnavailable), a key this process has seen keeps working from its last
cached entry, stale or not, for as long as the store is away; a key revoked or changed through this process was
dropped from the cache (forget) and is not served. An unknown key then gets 503 store_unavailable: whether it
exists cannot be known, so it is neither refused (401) nor let in.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from generated import errors as codes
from handlers.administration.tenancy import holds, lacks_message
from handlers.errors import ApiError, StoreUnavailable
from handlers.periodic import Periodic
from handlers.store.base import Key, Outage, Store, hash_secret

_TOUCH_EVERY = 5.0  # seconds between batched last-used writes

log = logging.getLogger("specway")


@dataclass(frozen=True, slots=True)
class Principal:
    key: Key

    @property
    def workspace_id(self) -> str:
        return self.key.workspace_id


# Where a relay key may be, as the spec's security schemes say: ("bearer", header), ("header", name), ("query", name).
Credentials = tuple[tuple[str, str], ...]
DEFAULT_CREDENTIALS: Credentials = (("bearer", "authorization"), ("header", "x-api-key"))  # the root's schemes


def secret_from_headers(authorization: str | None, x_api_key: str | None) -> str | None:
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    if x_api_key and x_api_key.strip():
        return x_api_key.strip()
    return None


def secret_from(credentials: Credentials, headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The relay key from the first place of `credentials` that holds one (a query key is never logged: the request
    log and the traces carry the route and the path, never the query)."""
    for where, name in credentials:
        if where == "bearer":
            found = secret_from_headers(headers.get(name), None)
        else:
            value = (headers if where == "header" else query).get(name)
            found = value.strip() if value and value.strip() else None
        if found:
            return found
    return None


class KeyCache:
    def __init__(self, store: Store, ttl: float) -> None:
        self._store = store
        self._ttl = ttl
        # hash -> (key, fresh until): kept after it is stale, to serve while the store is away
        self._entries: dict[str, tuple[Key, float]] = {}
        self._loading: dict[str, asyncio.Future[Key | None]] = {}  # hash -> the store read in flight for it
        self._touched: dict[str, datetime] = {}
        self._toucher = Periodic(self.flush, _TOUCH_EVERY, "record keys' last use")
        self._lookups = Outage("key lookups", "keys seen before are served from this process's cache", log)
        self._touches = Outage("keys' last use", "it stays pending and is retried", log)

    async def lookup(self, secret: str) -> Key | None:
        digest = hash_secret(secret)
        hit = self._entries.get(digest)
        if hit is not None and hit[1] > time.monotonic():
            key = hit[0]
        else:
            found = await self._fetch(digest, secret)
            if found is None:
                return None
            key = found
        self._touched[key.id] = datetime.now(UTC)
        return key

    async def _fetch(self, digest: str, secret: str) -> Key | None:
        """The store's word on a key not fresh here: one read per key at a time, whoever asks (a burst of requests
        with one key waits for one read, not a queue of them that outlasts the store's timeout)."""
        task = self._loading.get(digest)
        if task is None:
            task = self._loading[digest] = asyncio.ensure_future(self._load(digest, secret))
            task.add_done_callback(lambda done: self._loading.pop(digest, None) if self._loading.get(digest) is done
                                   else None)
        return await asyncio.shield(task)  # a caller that leaves does not cancel the others' read

    async def _load(self, digest: str, secret: str) -> Key | None:
        hit = self._entries.get(digest)
        try:
            found = await self._store.key_by_secret(secret)
        except StoreUnavailable as away:
            if hit is None:
                raise
            self._lookups.down(away.reason)
            return hit[0]  # stale: the store is away, and this process knows of no revocation
        self._lookups.up()
        if found is None:
            self._entries.pop(digest, None)
            return None
        self._entries[digest] = (found, time.monotonic() + self._ttl)
        return found

    async def authenticate(self, secret: str | None, scope: str) -> Principal:
        if not secret:
            raise ApiError(
                codes.INVALID_API_KEY, "No relay key: send it as 'Authorization: Bearer <key>' or in 'x-api-key' "
                "('x-goog-api-key' or ?key= on the Gemini paths)."
            )
        key = await self.lookup(secret)
        if key is not None and key.revoked_at is None and key.workspace_revoked_at is not None:
            raise ApiError(codes.INVALID_API_KEY, "The relay key's workspace is revoked.")
        if key is None or not key.active(datetime.now(UTC)):
            raise ApiError(codes.INVALID_API_KEY, "The relay key is not valid: unknown, revoked or expired.")
        if not holds(key.scopes, scope):
            raise ApiError(codes.INSUFFICIENT_SCOPE, lacks_message(scope))
        return Principal(key)

    def forget(self, key_id: str) -> None:
        """Drop a key from this process's cache at once (used after revoking or changing it here)."""
        self._entries = {d: e for d, e in self._entries.items() if e[0].id != key_id}

    def forget_workspace(self, workspace_id: str) -> None:
        """Drop every key of a workspace at once (after revoking or restoring it here)."""
        self._entries = {d: e for d, e in self._entries.items() if e[0].workspace_id != workspace_id}

    def start(self) -> None:
        self._toucher.start()

    async def stop(self) -> None:
        await self._toucher.stop()

    async def flush(self) -> None:
        if not self._touched:
            return
        touched, self._touched = self._touched, {}
        try:
            await self._store.touch_keys(touched)
        except BaseException as exc:
            for key_id, at in touched.items():  # kept for the next flush; a later use wins
                if key_id not in self._touched or self._touched[key_id] < at:
                    self._touched[key_id] = at
            if isinstance(exc, StoreUnavailable):
                self._touches.down(exc.reason)
                return
            raise
        self._touches.up()
