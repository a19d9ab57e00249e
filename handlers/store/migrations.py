"""Versioned schema migrations: migrations/<dialect>/NNNN_name.sql, applied in order, each exactly once.

Every startup runs `migrate_*`: it takes a database-wide lock (BEGIN IMMEDIATE on SQLite, a transaction-scoped
advisory lock on PostgreSQL), reads `schema_version`, and applies what is missing in that same transaction, so
several processes starting together apply each file once and a failed file leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiosqlite

if TYPE_CHECKING:
    import asyncpg

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
PG_LOCK_ID = 0x53_70_65_63_77_61_79  # "Specway": the advisory lock every PostgreSQL startup queues on
_FILE = re.compile(r"^(\d{4})_([A-Za-z0-9_]+)\.sql$")
_VERSION_TABLE = "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL, {at})"
_RECORD = "INSERT INTO schema_version (version, name) VALUES ({}, {})"


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def load(dialect: str) -> list[Migration]:
    """The dialect's migrations in order; versions must run 1, 2, 3… without gaps."""
    found = []
    for path in sorted((MIGRATIONS_DIR / dialect).glob("*.sql")):
        match = _FILE.match(path.name)
        if match is None:
            raise RuntimeError(f"migration file {path.name} is not named NNNN_name.sql")
        found.append(Migration(int(match[1]), match[2], path.read_text(encoding="utf-8")))
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"{dialect} migrations are not numbered 1..{len(found)} without gaps")
    return found


def pending(dialect: str, applied: set[int], target: int | None) -> list[Migration]:
    return [m for m in load(dialect) if m.version not in applied and (target is None or m.version <= target)]


def sqlite_statements(script: str) -> list[str]:
    """Split a script into statements (executescript would commit the open transaction first)."""
    statements, current = [], ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    if current.strip() and not all(ln.strip().startswith("--") for ln in current.splitlines() if ln.strip()):
        raise RuntimeError(f"unterminated SQL statement in migration: {current.strip()[:80]}")
    return statements


@asynccontextmanager
async def immediate(db: aiosqlite.Connection) -> AsyncIterator[aiosqlite.Connection]:
    """A BEGIN IMMEDIATE transaction on an autocommit connection: the file's write lock is taken before the
    first read (waiting up to busy_timeout), so nothing read can change before COMMIT."""
    try:
        await through(db.execute("BEGIN IMMEDIATE"))
    except asyncio.CancelledError:
        if db.in_transaction:  # the BEGIN ran on after the caller left: give the transaction back
            await through(db.execute("ROLLBACK"))
        raise
    try:
        yield db
        await through(db.execute("COMMIT"))
    except BaseException:
        if db.in_transaction:
            await through(db.execute("ROLLBACK"))
        raise


async def through(call: Awaitable[Any]) -> Any:
    """An aiosqlite call awaited to its end even when the caller is cancelled meanwhile: the statement runs on
    aiosqlite's thread regardless, and only once it has ended is the connection's transaction state known (a BEGIN
    left behind by a cancelled caller made every later transaction fail with "cannot start a transaction within a
    transaction")."""
    task = asyncio.ensure_future(call)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        raise


async def migrate_sqlite(db: aiosqlite.Connection, target: int | None = None) -> list[int]:
    """Apply pending migrations (up to `target`) on a connection in autocommit mode; return the versions applied."""
    async with immediate(db):
        await db.execute(_VERSION_TABLE.format(at="applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP"))
        applied = {row[0] for row in await db.execute_fetchall("SELECT version FROM schema_version")}
        todo = pending("sqlite", applied, target)
        for migration in todo:
            for statement in sqlite_statements(migration.sql):
                await db.execute(statement)
            await db.execute(_RECORD.format("?", "?"), (migration.version, migration.name))
    return [m.version for m in todo]


async def migrate_postgres(conn: asyncpg.Connection, target: int | None = None) -> list[int]:
    """Apply pending migrations (up to `target`); return the versions applied."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", PG_LOCK_ID)
        await conn.execute(_VERSION_TABLE.format(at="applied_at timestamptz NOT NULL DEFAULT now()"))
        applied = {row["version"] for row in await conn.fetch("SELECT version FROM schema_version")}
        todo = pending("postgresql", applied, target)
        for migration in todo:
            await conn.execute(migration.sql)
            await conn.execute(_RECORD.format("$1", "$2"), migration.version, migration.name)
    return [m.version for m in todo]
