"""The key cache: a burst of requests with one key reads the store once, not once each."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from handlers.administration.auth import KeyCache
from handlers.store import SQLiteStore
from handlers.store.base import Key


class CountingStore(SQLiteStore):
    """A store whose key reads are counted, and slow enough for a burst to pile up behind one."""

    reads = 0

    async def key_by_secret(self, secret: str) -> Key | None:
        self.reads += 1
        await asyncio.sleep(0.05)
        return await super().key_by_secret(secret)


@pytest.fixture(name="store")
async def fixture_store(tmp_path: Path) -> AsyncIterator[CountingStore]:
    opened = CountingStore(str(tmp_path / "keys.db"))
    await opened.open()
    yield opened
    await opened.close()


async def _key(store: CountingStore) -> tuple[Key, str]:
    ws = await store.create_workspace("team")
    return await store.create_key(ws.id, "k", ("inference",))


async def test_a_burst_with_one_key_reads_the_store_once(store: CountingStore) -> None:
    key, secret = await _key(store)
    cache = KeyCache(store, ttl=60)
    found = await asyncio.gather(*(cache.lookup(secret) for _ in range(500)))
    assert {k.id if k else None for k in found} == {key.id} and store.reads == 1
    assert await asyncio.gather(*(cache.lookup("sk-sw-unknown") for _ in range(50))) == [None] * 50
    assert store.reads == 2  # an unknown key too: one read for the burst, and nothing cached after it
    assert await cache.lookup("sk-sw-unknown") is None and store.reads == 3


async def test_a_caller_that_leaves_does_not_cancel_the_read_of_the_others(store: CountingStore) -> None:
    key, secret = await _key(store)
    cache = KeyCache(store, ttl=60)
    first = asyncio.ensure_future(cache.lookup(secret))
    second = asyncio.ensure_future(cache.lookup(secret))
    await asyncio.sleep(0.01)
    first.cancel()
    found = await second
    assert found is not None and found.id == key.id and store.reads == 1
