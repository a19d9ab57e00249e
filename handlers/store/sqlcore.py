"""What the SQLite and PostgreSQL stores share at the bottom: the connection calls, the SQL text helpers, the columns of
workspaces and keys, and reading them back.

The SQL is written once with $n placeholders (the SQLite backend rewrites them to ?n); `lock` is " FOR UPDATE" on
PostgreSQL and empty on SQLite, whose BEGIN IMMEDIATE already locks the whole database. Every read-modify-write
runs in `_transaction()` and locks rows in one order — reservation, key, workspace — so concurrent transactions cannot
deadlock. On top of this: sqlaccounts.py (workspaces, keys, the audit log), then sqlbase.py (money, decisions).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from decimal import Decimal
from typing import Any, Protocol, TypeVar

from .base import (
    Key,
    Store,
    Workspace,
)
from .values import (
    to_key,
    to_workspace,
)

UPDATABLE = frozenset({"name", "scopes", "models", "policy", "expires_at", "limits"})
WS_COLS = ("id", "name", "credit", "reserved", "spend_total", "created_at", "revoked_at")
KEY_COLS = (
    "id", "workspace_id", "name", "hint", "scopes", "models", "policy", "expires_at", "created_at",
    "last_used_at", "revoked_at", "budget", "budget_period", "rpm", "tpm", "spend_total", "spend_period",
    "period_start", "reserved", "rotated_at", "previous_expires_at",
)  # fmt: skip
_KEY_FIXED = {"id", "workspace_id", "hint", "created_at", "rotated_at", "previous_expires_at"}  # rotate_key's
# A key is read with its workspace's state (a scalar subquery: FOR UPDATE locks the key's row only), so that every
# process's key cache learns of a revoked workspace as it learns of a revoked key, within server.key_cache_seconds.
KEY_READ = (*KEY_COLS, "(SELECT w.revoked_at FROM workspaces w WHERE w.id = keys.workspace_id) AS workspace_revoked_at")


def sql_select(table: str, cols: Sequence[str], where: str = "") -> str:
    return f"SELECT {', '.join(cols)} FROM {table}{where}"


def sql_insert(table: str, cols: Sequence[str]) -> str:
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join(f'${i}' for i in range(1, len(cols) + 1))})"


def sql_marks(values: Sequence[Any], after: int = 0) -> str:
    """$n placeholders for `values`, numbered from after + 1."""
    return ", ".join(f"${i}" for i in range(after + 1, after + len(values) + 1))


def sql_update(table: str, cols: Sequence[str]) -> str:
    """UPDATE table SET col = $2, … WHERE id = $1."""
    sets = ", ".join(f"{col} = ${i}" for i, col in enumerate(cols, start=2))
    return f"UPDATE {table} SET {sets} WHERE id = $1"


KEY_MUTABLE = tuple(c for c in KEY_COLS if c not in _KEY_FIXED)
UPDATE_KEY = sql_update("keys", KEY_MUTABLE)
SETTLED_SINCE = ("SELECT cost FROM reservations WHERE key_id = $1 AND state <> 'held' AND cost IS NOT NULL"
                  " AND finished_at >= $2")  # settled, or a released lease's charges
LEASES = "SELECT key_id, workspace_id, amount, in_flight FROM reservations WHERE state = 'held' AND lease = TRUE"




class Conn(Protocol):
    """The four calls the shared code makes; rows are read by column name."""

    async def fetchrow(self, sql: str, *args: Any) -> Any: ...

    async def fetch(self, sql: str, *args: Any) -> list[Any]: ...

    async def execute(self, sql: str, *args: Any) -> int:
        """Run one statement; return the number of rows it changed."""

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

_T = TypeVar("_T")
Body = Callable[[Conn], Coroutine[Any, Any, _T]]


class SQLCore(Store):
    lock: str = ""  # appended to SELECTs whose rows the transaction is about to change
    usage_lock: str = ""  # a statement that serializes rollup writers (SQLite's BEGIN IMMEDIATE already does)
    migrated: tuple[int, ...] = ()  # the schema versions the last open() applied

    @abc.abstractmethod
    async def _transaction(self, body: Body[_T]) -> _T:
        """`body(tx)` in a transaction that commits when it returns and rolls back on any exception; its result.
        The body awaits nothing but `tx`'s calls: SQLite runs it whole on its connection's thread."""

    @abc.abstractmethod
    def _read(self) -> AbstractAsyncContextManager[Conn]:
        """A connection for single-statement reads of committed data."""

    async def _one(self, sql: str, *args: Any) -> Any:
        async with self._read() as conn:
            return await conn.fetchrow(sql, *args)

    async def _all(self, sql: str, *args: Any) -> list[Any]:
        async with self._read() as conn:
            return await conn.fetch(sql, *args)

    async def _locked_key(self, tx: Conn, key_id: str) -> Key | None:
        row = await tx.fetchrow(sql_select("keys", KEY_READ, " WHERE id = $1") + self.lock, key_id)
        return None if row is None else to_key(row)

    async def _locked_workspace(self, tx: Conn, workspace_id: str) -> Workspace | None:
        row = await tx.fetchrow(sql_select("workspaces", WS_COLS, " WHERE id = $1") + self.lock, workspace_id)
        return None if row is None else to_workspace(row)

    async def _unleased(self, items: list[Any], by: str) -> list[Any]:
        """Workspaces or keys as reads show them: `reserved` is what requests in flight hold, so the part of a
        lease no request holds yet (the process's float) is not counted. Reads only; money logic sees it all."""
        if items:
            slack: dict[str, Decimal] = {}
            for row in await self._all(LEASES):
                slack[row[by]] = slack.get(row[by], Decimal(0)) + Decimal(row["amount"]) - Decimal(row["in_flight"])
            for item in items:
                item.reserved -= max(Decimal(0), slack.get(item.id, Decimal(0)))
                if not item.reserved:  # 0.0000080 - 0.0000080 is 0E-7, which JSON would show as such
                    item.reserved = Decimal(0)
        return items

