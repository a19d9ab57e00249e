"""The embedded store: one SQLite file in WAL mode, safe to share between several worker processes.

Every read-modify-write is a BEGIN IMMEDIATE transaction: it takes the file's write lock before reading, so
two processes can never both read a balance and both spend it; a waiting writer retries for `busy_timeout`.
Within a process one writer connection is shared under an asyncio lock; reads use a second connection and
see the last committed state (WAL readers do not wait for writers).

A call waits at most `timeout` seconds for this process's writer and as long again for the file's lock (SQLite's
busy_timeout): another process holding the lock longer, or a file that cannot be opened, raises StoreUnavailable.
The SQLite call itself is never cancelled half-way (it runs on aiosqlite's thread, which would carry on alone).
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from itertools import chain
from typing import Any, TypeVar, cast

import aiosqlite

from handlers.errors import StoreUnavailable

from .base import DEFAULT_TIMEOUT, store_wait
from .migrations import migrate_sqlite, through
from .sqlbase import SQLStore
from .sqlcore import Body
from .values import iso

BUSY_TIMEOUT_MS = 5000  # while opening (WAL switch, migrations): startup may wait longer than a request
_PLACEHOLDER = re.compile(r"\$(\d+)")
_T = TypeVar("_T")


@lru_cache(maxsize=256)
def _sql(sql: str) -> str:
    return _PLACEHOLDER.sub(r"?\1", sql)


_VALUES = re.compile(r"(INSERT INTO \w+ \([^)]*\)) VALUES \(([^)]*)\)([^$]*)")
_MARK = re.compile(r"\s*\$(\d+)\s*")


@lru_cache(maxsize=64)
def _row_picks(sql: str) -> tuple[int, ...] | None:
    """Which of a row's values each mark of `INSERT INTO t (a, b) VALUES ($1, $2) <rest>` takes (0-based), or None
    for another shape (a mark after VALUES' row, as an upsert's SET may have, is another shape)."""
    found = _VALUES.fullmatch(sql)
    if found is None:
        return None
    picks = [_MARK.fullmatch(mark) for mark in found[2].split(",")]
    return tuple(int(p[1]) - 1 for p in picks if p) if all(picks) else None


@lru_cache(maxsize=256)
def _many_rows(sql: str, rows: int) -> str:
    """`sql` (a shape _row_picks takes) inserting `rows` rows: its VALUES row once per row, in `?` marks."""
    found = _VALUES.fullmatch(sql)
    assert found is not None
    head, marks, rest = found.groups()
    row = "(" + ", ".join("?" * len(marks.split(","))) + ")"
    return f"{head} VALUES {', '.join([row] * rows)}{rest}"


_PLAIN = frozenset({str, int, float, bool, bytes, type(None)})  # what sqlite3 binds as it is


def _bind(args: Sequence[Any]) -> Sequence[Any]:
    """Decimal -> its exact text, datetime -> ISO-8601 UTC text. Values sqlite3 binds as they are are checked in one
    pass of C: this runs on SQLite's thread, which holds the interpreter (and the event loop waits) while it runs
    Python, and most statements bind only those (the writer's batches are bound before, SQLiteStore.bound)."""
    if _PLAIN.issuperset(map(type, args)):
        return args
    return tuple(str(a) if isinstance(a, Decimal) else iso(a) if isinstance(a, datetime) else a for a in args)


async def _set_wal(db: aiosqlite.Connection) -> None:
    """Switch to WAL. Processes opening a new file together can get "database is locked" here at once (the
    switch does not wait on busy_timeout), so retry until the timeout; once a file is in WAL this is a no-op."""
    deadline = asyncio.get_running_loop().time() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            await db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.01)


class _Conn:
    """Statements on a sqlite3 connection, run on its own thread (aiosqlite's) by _in_thread: async calls that
    return at once, so that the transactions written once for SQLite and PostgreSQL (sqlbase.py) run unchanged."""

    __slots__ = ("_db",)

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        return self._db.execute(_sql(sql), _bind(args)).fetchone()

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        return self._db.execute(_sql(sql), _bind(args)).fetchall()

    async def execute(self, sql: str, *args: Any) -> int:
        return self._db.execute(_sql(sql), _bind(args)).rowcount

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """The rows of one INSERT ... VALUES go in as one statement of as many VALUES rows (up to SQLite's limit of
        marks a statement). sqlite3's executemany steps each row with the GIL released and takes it back after, so a
        batch of decision records handed the GIL to and from the event loop's thread hundreds of times (bench/README.md,
        "Decision records"). SQLite takes the rows of one statement in order, as it would take them one by one: the
        last of two with one key wins an upsert."""
        picks = _row_picks(sql)
        if picks is None:
            self._db.executemany(_sql(sql), [_bind(row) for row in rows])
            return
        most = max(1, self._db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // len(picks))
        for start in range(0, len(rows), most):
            chunk = rows[start:start + most]
            values = (list(chain.from_iterable(chunk)) if picks == tuple(range(len(picks))) else
                      [row[p] for row in chunk for p in picks])
            self._db.execute(_many_rows(sql, len(chunk)), _bind(values))


def _finished(step: Coroutine[Any, Any, _T]) -> _T:
    """The result of a coroutine that never waits: its awaits are _Conn's, which return at once."""
    try:
        step.send(None)
    except StopIteration as done:
        return cast(_T, done.value)
    step.close()
    raise RuntimeError("a SQLite store call awaited something other than its connection")


def _in_thread(db: sqlite3.Connection, body: Body[_T], transaction: bool) -> _T:
    """`body` on the connection's thread, from start to end: within BEGIN IMMEDIATE ... COMMIT (ROLLBACK on any
    exception) with `transaction`."""
    if not transaction:
        return _finished(body(_Conn(db)))
    db.execute("BEGIN IMMEDIATE")
    try:
        result = _finished(body(_Conn(db)))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return result


async def _on_thread(db: aiosqlite.Connection, body: Body[_T], transaction: bool = False) -> _T:
    """One round trip to the connection's thread for the whole of `body`, awaited to its end even when the caller
    is cancelled meanwhile (it runs on regardless). aiosqlite's public calls are a round trip per statement, row
    fetch and cursor close, and each waits for a turn of a busy event loop: a lease's sync took 10-15 of them, 0.2-1.5 s
    under load, while the requests that found its lease dry waited (bench/README.md, "Leases sized by one
    interval"). aiosqlite has no public call for a function of the connection: _execute and _conn are its own."""
    return await through(db._execute(_in_thread, db._conn, body, transaction))


class _Reads:
    """Single statements of committed data, each one round trip to the reading connection's thread."""

    __slots__ = ("_db",)

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        return await _on_thread(self._db, lambda conn: conn.fetchrow(sql, *args))

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        return await _on_thread(self._db, lambda conn: conn.fetch(sql, *args))


@contextmanager
def _busy_is_unavailable() -> Iterator[None]:
    """A database file another process holds locked is a store that cannot be reached now (503), not a crash."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if _is_busy(exc):
            raise StoreUnavailable(f"SQLite: {exc}") from None
        raise


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text or "unable to open" in text


class SQLiteStore(SQLStore):
    def __init__(self, path: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.path = path
        self.timeout = timeout
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()

    async def _connect(self) -> aiosqlite.Connection:
        db = await aiosqlite.connect(self.path, isolation_level=None)  # autocommit: BEGIN is explicit
        try:
            db.row_factory = sqlite3.Row
            await db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            await _set_wal(db)
            await db.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            await db.close()
            raise
        return db

    async def open(self, *, target: int | None = None) -> None:
        """Connect and migrate (up to schema version `target`, for tests; None = all)."""
        try:
            self._writer = await self._connect()
            self.migrated = tuple(await migrate_sqlite(self._writer, target))
            # An in-memory database exists once per connection: there it is read through the writer.
            self._reader = self._writer if self.path in ("", ":memory:") else await self._connect()
            for db in {id(c): c for c in (self._reader, self._writer)}.values():
                await db.execute(f"PRAGMA busy_timeout = {max(1, round(self.timeout * 1000))}")
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        for db in {id(c): c for c in (self._reader, self._writer) if c is not None}.values():
            await db.close()
        self._reader = self._writer = None

    async def ping(self) -> None:
        """Through the writer: readers still read a file another process holds locked, and nothing can be written."""
        await self._transaction(lambda conn: conn.fetchrow("SELECT 1"))

    def _connection(self, db: aiosqlite.Connection | None) -> aiosqlite.Connection:
        if db is None:
            raise RuntimeError("the store is not open")
        return db

    def bound(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(_bind(values))

    async def _transaction(self, body: Body[_T]) -> _T:
        writer = self._connection(self._writer)
        with _busy_is_unavailable():
            async with self._locked():
                return await _on_thread(writer, body, transaction=True)

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[_Reads]:
        reader = self._connection(self._reader)
        with _busy_is_unavailable():
            if reader is not self._writer:
                yield _Reads(reader)
                return
            async with self._locked():
                yield _Reads(reader)

    @asynccontextmanager
    async def _locked(self) -> AsyncIterator[None]:
        """This process's writer, waited for at most `timeout` (requests queue here while the file is locked)."""
        asked = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout):
                await self._lock.acquire()
        except TimeoutError:
            raise StoreUnavailable("SQLite: this process's writer stayed busy") from None
        store_wait().labels("write").observe(time.perf_counter() - asked)
        try:
            yield
        finally:
            self._lock.release()
