"""Shared by the store tests (tests/test_store_*.py). One suite, two backends: every store test runs on SQLite and on
PostgreSQL, each time on a fresh database.

PostgreSQL: SPECWAY_TEST_PG_URL is the admin connection (default postgresql://postgres@127.0.0.1:5432/postgres);
each test creates `specway_test_<random>` there and drops it afterwards. Unreachable: skip, or fail when CI=true.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from handlers.store import PostgresStore, SQLiteStore
from handlers.store.sqlbase import SQLStore
from tests.conftest import unavailable

ADMIN_URL = os.environ.get("SPECWAY_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
NOW = datetime.now(UTC)
# Rollover tests run in the future: a key's first period starts at its creation.
NEXT_YEAR = NOW.year + 1


@dataclass
class Backend:
    kind: str
    url: str  # a file path for SQLite

    def new_store(self) -> SQLStore:
        return SQLiteStore(self.url) if self.kind == "sqlite" else PostgresStore(self.url)

    async def query(self, sql: str) -> list[tuple[Any, ...]]:
        """Run one literal statement on a connection of its own (no store code involved)."""
        if self.kind == "sqlite":
            with sqlite3.connect(self.url) as db:
                return db.execute(sql).fetchall()
        conn = await asyncpg.connect(self.url)
        try:
            return [tuple(r) for r in await conn.fetch(sql)]
        finally:
            await conn.close()

    async def cells(self) -> list[tuple[str, Any]]:
        """(table, value) for every cell of every table."""
        if self.kind == "sqlite":
            tables = [r[0] for r in await self.query("SELECT name FROM sqlite_master WHERE type = 'table'")]
        else:
            sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            tables = [r[0] for r in await self.query(sql)]
        return [(t, v) for t in tables for row in await self.query(f"SELECT * FROM {t}") for v in row]


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


async def _admin() -> asyncpg.Connection:
    try:
        return await asyncpg.connect(ADMIN_URL, timeout=5)
    except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
        where = urlsplit(ADMIN_URL)
        message = f"PostgreSQL at {where.hostname}:{where.port or 5432} unreachable: {type(exc).__name__}"
        unavailable(message)


_OLD_HASH = hashlib.sha256(b"sk-sw-old").hexdigest()
# A database as the first Specway left it (schema version 1), with a key whose secret is "sk-sw-old".
V1_ROWS = [
    (
        "INSERT INTO workspaces (id, name, credit, reserved, spend_total, created_at) "
        "VALUES ('ws_00000000000000aa', 'kept', '7.25', '0', '0', '2024-01-01T00:00:00.000000+00:00')"
    ),
    (
        "INSERT INTO keys (id, workspace_id, name, secret_hash, hint, scopes, created_at) "
        f"VALUES ('key_00000000000000aa', 'ws_00000000000000aa', 'old', '{_OLD_HASH}', 'sk-sw-old…', "
        """'["inference"]', '2024-01-01T00:00:00.000000+00:00')"""
    ),
]


# Each fixture is fixture_<name>, registered as <name>: a test module imports it, and its tests ask for <name>.


@pytest.fixture(params=["sqlite", "postgresql"], name="backend")
async def fixture_backend(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[Backend]:
    if request.param == "sqlite":
        yield Backend("sqlite", str(tmp_path / "store.db"))
        return
    admin = await _admin()
    name = f"specway_test_{secrets.token_hex(6)}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield Backend("postgresql", _with_database(ADMIN_URL, name))
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@pytest.fixture(name="store")
async def fixture_store(backend: Backend) -> AsyncIterator[SQLStore]:
    opened = backend.new_store()
    await opened.open()
    yield opened
    await opened.close()


async def in_two_processes(target: Any, *args: Any, timeout: float = 120) -> list[Any]:
    """Run target(*args, start, results) in two spawned processes that start together (start is a Barrier); each
    puts one result on the queue. Returns both results once both processes exited cleanly."""
    import asyncio
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")
    start, results = spawn.Barrier(2), spawn.Queue()
    workers = [spawn.Process(target=target, args=(*args, start, results)) for _ in range(2)]
    for worker in workers:
        worker.start()
    got = [await asyncio.to_thread(results.get, timeout=timeout) for _ in workers]
    for worker in workers:
        await asyncio.to_thread(worker.join, 10)
        assert worker.exitcode == 0
    return got
