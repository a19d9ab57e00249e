"""The PostgreSQL store: an asyncpg pool; NUMERIC money, timestamptz times, jsonb records.

Every read-modify-write is one transaction that reads the rows it will change with SELECT … FOR UPDATE, in
the fixed order reservation -> key -> workspace: a second transaction (any process, any pool) touching the
same key or workspace waits for the first to commit and then reads its result, so holds can never add up to
more than the budget or the credit allows.

Every call has `timeout` seconds, from taking a pooled connection to COMMIT: past it, or when the server cannot be
reached or drops the connection, it raises StoreUnavailable. A connection whose call timed out is terminated rather
than rolled back, since a server that does not answer would not answer a ROLLBACK either.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import asyncpg

from handlers.errors import StoreUnavailable

from .base import DEFAULT_TIMEOUT, store_wait
from .migrations import migrate_postgres
from .sqlbase import SQLStore
from .sqlcore import Body

_T = TypeVar("_T")


def _text(args: Sequence[Any]) -> Sequence[Any]:
    """PostgreSQL text cannot hold NUL, which a caller can put in a path (/v1/keys/%00). No id or name we store
    has one (the spec forbids control characters in names), so such a value can only find nothing."""
    if any(isinstance(a, str) and "\x00" in a for a in args):
        return [a.replace("\x00", "\ufffd") if isinstance(a, str) else a for a in args]
    return args


_PIECE = 20  # rows the server runs in one go: pieces of 50 left a p99 of 1.58 ms at one connection
_QUIET = 0.005  # seconds a piece may take, the loop's turn included, for the next to be a piece too (2 ms: p99 1.5)

# What says the server is away (refused, reset, shut down, dropped the connection), not that a query is wrong.
_UNREACHABLE = (OSError, TimeoutError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError,
                asyncpg.exceptions.OperatorInterventionError)


def _unavailable(exc: BaseException) -> StoreUnavailable:
    reason = "no answer in time" if isinstance(exc, TimeoutError) else type(exc).__name__
    return StoreUnavailable(f"PostgreSQL: {reason}")


class _Conn:
    __slots__ = ("_conn",)

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        return await self._conn.fetchrow(sql, *_text(args))

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        return await self._conn.fetch(sql, *_text(args))

    async def execute(self, sql: str, *args: Any) -> int:
        status = await self._conn.execute(sql, *_text(args))  # "UPDATE 1", "INSERT 0 1", "DELETE 3"
        count = status.rpartition(" ")[2]
        return int(count) if count.isdigit() else 0

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """In pieces of _PIECE rows, each awaited, while the event loop comes back to each within _QUIET; the rest at once
        after a piece that took longer. Given a batch of hundreds of rows at once, the server ran them in one burst of a
        few milliseconds, which on a 2-core machine took a core from the loop, the caller and the upstream: a p99 at
        one connection of 2.5-2.8 ms, 1.2-1.35 in pieces. A busy loop comes back to a piece only after a turn of
        several milliseconds, and always in pieces, its writer fell behind (a lease's sync waited for the records
        before it, priced requests for the lease: p99 at 32 connections 37-75 ms against 16-17); there one burst is one
        more wait among many (bench/README.md, "A PostgreSQL batch in pieces"). Still one transaction."""
        loop, start, piece = asyncio.get_running_loop(), 0, _PIECE
        while start < len(rows):
            began = loop.time()
            await self._conn.executemany(sql, [_text(r) for r in rows[start:start + piece]])
            start += piece
            if loop.time() - began > _QUIET:
                piece = len(rows)


class PostgresStore(SQLStore):
    lock = " FOR UPDATE"
    usage_lock = "SELECT pg_advisory_xact_lock(7365706) "  # "spw", usage rollups: one writer at a time

    def __init__(self, url: str, min_size: int = 1, max_size: int = 10, timeout: float = DEFAULT_TIMEOUT,
                 read_size: int = 4) -> None:
        self.url = url
        self.min_size = min_size
        self.max_size = max_size
        self.read_size = read_size
        self.timeout = timeout
        self._pool: asyncpg.Pool | None = None  # transactions: holds, settlements, the writer, admin changes
        self._reads: asyncpg.Pool | None = None  # reads of their own, so key lookups never wait behind a transaction

    async def open(self, *, target: int | None = None) -> None:
        """Connect and migrate (up to schema version `target`, for tests; None = all)."""
        try:
            self._pool = await asyncpg.create_pool(self.url, min_size=self.min_size, max_size=self.max_size)
            async with self._pool.acquire() as conn:
                self.migrated = tuple(await migrate_postgres(conn, target))
            self._reads = await asyncpg.create_pool(self.url, min_size=1, max_size=self.read_size)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        for pool in (self._reads, self._pool):
            if pool is not None:
                await pool.close()
        self._pool = self._reads = None

    async def ping(self) -> None:
        async with self._read() as conn:
            await conn.fetchrow("SELECT 1")

    async def _transaction(self, body: Body[_T]) -> _T:
        async with self._connection(self._pool, transaction=True) as conn:
            return await body(conn)

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[_Conn]:
        async with self._connection(self._reads, transaction=False) as conn:
            yield conn

    @asynccontextmanager
    async def _connection(self, pool: asyncpg.Pool | None, *, transaction: bool) -> AsyncIterator[_Conn]:
        """A pooled connection (in a transaction that commits when the block ends) for at most `timeout` seconds."""
        if pool is None:
            raise RuntimeError("the store is not open")
        loop = asyncio.get_running_loop()
        asked = loop.time()
        deadline = asked + self.timeout
        try:
            async with asyncio.timeout_at(deadline):
                conn = await pool.acquire()
        except _UNREACHABLE as exc:
            raise _unavailable(exc) from None
        store_wait().labels("write" if transaction else "read").observe(loop.time() - asked)
        try:
            tx = conn.transaction() if transaction else None
            try:
                async with asyncio.timeout_at(deadline):
                    if tx is not None:
                        await tx.start()
                    yield _Conn(conn)
                    if tx is not None:
                        await tx.commit()
            except _UNREACHABLE as exc:
                conn.terminate()  # neither a ROLLBACK nor the pool's reset could be answered
                raise _unavailable(exc) from None
            except BaseException:
                if tx is not None and not conn.is_closed():
                    try:
                        async with asyncio.timeout(self.timeout):
                            await tx.rollback()
                    except BaseException as failed:  # the error being raised is the caller's, below
                        conn.terminate()
                        if not isinstance(failed, Exception):
                            raise
                raise
        finally:
            try:
                await pool.release(conn, timeout=self.timeout)
            except _UNREACHABLE:
                # Its reset got no answer in time (a busy loop, at scale): asyncpg closes that connection and the
                # pool opens another. The work is done, or failed for its own reason: neither becomes a 500.
                pass
