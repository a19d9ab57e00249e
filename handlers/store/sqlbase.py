"""What the SQLite and PostgreSQL stores share: every query, and the transactions that apply the money rules.

A backend only connects, opens transactions and binds values. What a budget or a balance allows is decided by the
rule each money call is given (handlers/metering/money.py), on rows read and locked here; this module writes its
result and keeps the rows (reservations, leases) in order. The SQL here is written once with $n
placeholders (the SQLite backend rewrites them to ?n); `lock` is " FOR UPDATE" on PostgreSQL and empty on
SQLite, whose BEGIN IMMEDIATE already locks the whole database. Every read-modify-write runs in `_tx()` and
locks rows in one order — reservation, key, workspace — so concurrent transactions cannot deadlock.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Protocol

from . import usage
from .base import (
    Books,
    DecisionQuery,
    FinishRule,
    HoldRule,
    Key,
    LeaseGrant,
    LeaseReport,
    LeaseRule,
    Limits,
    Refused,
    Store,
    Workspace,
    hash_secret,
    new_secret,
)
from .values import (
    apply_key_changes,
    as_money,
    as_time,
    key_row,
    new_id,
    period_floor,
    to_decision,
    to_key,
    to_workspace,
    utc,
    utcnow,
    validate_limits,
    validate_scopes,
)

UPDATABLE = frozenset({"name", "scopes", "models", "policy", "expires_at", "limits"})
WS_COLS = ("id", "name", "credit", "reserved", "spend_total", "created_at")
KEY_COLS = (
    "id", "workspace_id", "name", "hint", "scopes", "models", "policy", "expires_at", "created_at",
    "last_used_at", "revoked_at", "budget", "budget_period", "rpm", "tpm", "spend_total", "spend_period",
    "period_start", "reserved",
)  # fmt: skip
_KEY_FIXED = {"id", "workspace_id", "hint", "created_at"}


def _select(table: str, cols: Sequence[str], where: str = "") -> str:
    return f"SELECT {', '.join(cols)} FROM {table}{where}"


def _insert(table: str, cols: Sequence[str]) -> str:
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join(f'${i}' for i in range(1, len(cols) + 1))})"


def _marks(values: Sequence[Any], after: int = 0) -> str:
    """$n placeholders for `values`, numbered from after + 1."""
    return ", ".join(f"${i}" for i in range(after + 1, after + len(values) + 1))


def _update(table: str, cols: Sequence[str]) -> str:
    """UPDATE table SET col = $2, … WHERE id = $1."""
    sets = ", ".join(f"{col} = ${i}" for i, col in enumerate(cols, start=2))
    return f"UPDATE {table} SET {sets} WHERE id = $1"


_KEY_MUTABLE = tuple(c for c in KEY_COLS if c not in _KEY_FIXED)
_UPDATE_KEY = _update("keys", _KEY_MUTABLE)
_SETTLED_SINCE = ("SELECT cost FROM reservations WHERE key_id = $1 AND state <> 'held' AND cost IS NOT NULL"
                  " AND finished_at >= $2")  # settled, or a released lease's charges
_LEASES = "SELECT key_id, workspace_id, amount, in_flight FROM reservations WHERE state = 'held' AND lease = TRUE"
_LEASE_COLS = ("id", "key_id", "workspace_id", "amount", "state", "created_at", "lease", "cost", "in_flight", "owner")
_DECISION_COLS = ("id", "created_at", "workspace_id", "key_id", "model", "outcome", "record")
_SAVE_DECISION = (f"{_insert('decisions', _DECISION_COLS)} ON CONFLICT (id) DO UPDATE SET "
                  + ", ".join(f"{col} = excluded.{col}" for col in _DECISION_COLS[1:]))
_BEAT = ("INSERT INTO owners (id, heartbeat_at) VALUES ($1, $2)"
         " ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at")
# Held rows of other processes that stopped beating (or whose beat is gone), taken before they stopped.
_ORPHANS = ("SELECT r.id FROM reservations r LEFT JOIN owners o ON o.id = r.owner WHERE r.state = 'held'"
            " AND r.owner IS NOT NULL AND r.owner <> $2 AND (o.id IS NULL OR o.heartbeat_at < $1) AND r.created_at < $1")
_FORGET = ("DELETE FROM owners WHERE heartbeat_at < $1 AND id <> $2 AND NOT EXISTS"
           " (SELECT 1 FROM reservations r WHERE r.owner = owners.id AND r.state = 'held')")
# A lease is closed and reopened (same amount, new row) this often, so that its spending lands in settled rows
# (what a budget period's change sums) and no live lease ever looks like one a dead process left.
LEASE_ROTATE = timedelta(seconds=60)


class Conn(Protocol):
    """The four calls the shared code makes; rows are read by column name."""

    async def fetchrow(self, sql: str, *args: Any) -> Any: ...

    async def fetch(self, sql: str, *args: Any) -> list[Any]: ...

    async def execute(self, sql: str, *args: Any) -> int:
        """Run one statement; return the number of rows it changed."""

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...


class SQLStore(Store):
    lock: str = ""  # appended to SELECTs whose rows the transaction is about to change
    usage_lock: str = ""  # a statement that serializes rollup writers (SQLite's BEGIN IMMEDIATE already does)
    migrated: tuple[int, ...] = ()  # the schema versions the last open() applied

    @abc.abstractmethod
    def _tx(self) -> AbstractAsyncContextManager[Conn]:
        """A transaction that commits on success, rolls back on any exception."""

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
        row = await tx.fetchrow(_select("keys", KEY_COLS, " WHERE id = $1") + self.lock, key_id)
        return None if row is None else to_key(row)

    async def _locked_workspace(self, tx: Conn, workspace_id: str) -> Workspace | None:
        row = await tx.fetchrow(_select("workspaces", WS_COLS, " WHERE id = $1") + self.lock, workspace_id)
        return None if row is None else to_workspace(row)

    # workspaces
    async def create_workspace(self, name: str, credit: Decimal = Decimal(0)) -> Workspace:
        ws = Workspace(new_id("ws_"), name, as_money(credit), Decimal(0), Decimal(0), utcnow())
        async with self._tx() as tx:
            await tx.execute(_insert("workspaces", WS_COLS), *(getattr(ws, col) for col in WS_COLS))
        return ws

    async def _unleased(self, items: list[Any], by: str) -> list[Any]:
        """Workspaces or keys as reads show them: `reserved` is what requests in flight hold, so the part of a
        lease no request holds yet (the process's float) is not counted. Reads only; money logic sees it all."""
        if items:
            slack: dict[str, Decimal] = {}
            for row in await self._all(_LEASES):
                slack[row[by]] = slack.get(row[by], Decimal(0)) + Decimal(row["amount"]) - Decimal(row["in_flight"])
            for item in items:
                item.reserved -= max(Decimal(0), slack.get(item.id, Decimal(0)))
                if not item.reserved:  # 0.0000080 - 0.0000080 is 0E-7, which JSON would show as such
                    item.reserved = Decimal(0)
        return items

    async def get_workspace(self, workspace_id: str) -> Workspace | None:
        row = await self._one(_select("workspaces", WS_COLS, " WHERE id = $1"), workspace_id)
        return None if row is None else (await self._unleased([to_workspace(row)], "workspace_id"))[0]

    async def list_workspaces(self) -> list[Workspace]:
        found = [to_workspace(r) for r in await self._all(_select("workspaces", WS_COLS, " ORDER BY created_at, id"))]
        return await self._unleased(found, "workspace_id")

    async def rename_workspace(self, workspace_id: str, name: str) -> Workspace | None:
        async with self._tx() as tx:
            if not await tx.execute("UPDATE workspaces SET name = $2 WHERE id = $1", workspace_id, name):
                return None
        return await self.get_workspace(workspace_id)

    async def add_credit(self, workspace_id: str, amount: Decimal) -> Workspace | None:
        """Add to the balance (a negative amount corrects it downwards)."""
        amount = as_money(amount)
        async with self._tx() as tx:
            ws = await self._locked_workspace(tx, workspace_id)
            if ws is None:
                return None
            ws.credit += amount
            await tx.execute("UPDATE workspaces SET credit = $2 WHERE id = $1", ws.id, ws.credit)
        return ws

    # keys
    async def create_key(
        self,
        workspace_id: str,
        name: str,
        scopes: tuple[str, ...],
        *,
        models: tuple[str, ...] | None = None,
        policy: str | None = None,
        expires_at: datetime | None = None,
        limits: Limits | None = None,
    ) -> tuple[Key, str]:
        secret, now, limits = new_secret(), utcnow(), validate_limits(limits or Limits())
        key = Key(
            id=new_id("key_"), workspace_id=workspace_id, name=name, hint=secret[:10] + "…",
            scopes=validate_scopes(scopes), models=None if models is None else tuple(models), policy=policy,
            expires_at=None if expires_at is None else utc(expires_at), created_at=now, last_used_at=None,
            revoked_at=None, limits=limits, period_start=period_floor(limits.budget_period, now),
        )  # fmt: skip
        row = key_row(key) | {"secret_hash": hash_secret(secret)}
        async with self._tx() as tx:
            if await self._locked_workspace(tx, workspace_id) is None:
                raise LookupError(f"no workspace {workspace_id}")
            await tx.execute(_insert("keys", tuple(row)), *row.values())
        return key, secret

    async def key_by_secret(self, secret: str) -> Key | None:
        row = await self._one(_select("keys", KEY_COLS, " WHERE secret_hash = $1"), hash_secret(secret))
        return None if row is None else to_key(row)

    async def get_key(self, key_id: str) -> Key | None:
        row = await self._one(_select("keys", KEY_COLS, " WHERE id = $1"), key_id)
        return None if row is None else (await self._unleased([to_key(row)], "key_id"))[0]

    async def list_keys(self, workspace_id: str | None = None) -> list[Key]:
        where, args = ("", ()) if workspace_id is None else (" WHERE workspace_id = $1", (workspace_id,))
        rows = await self._all(_select("keys", KEY_COLS, where + " ORDER BY created_at, id"), *args)
        return await self._unleased([to_key(r) for r in rows], "key_id")

    async def update_key(self, key_id: str, **changes: Any) -> Key | None:
        """Change name, scopes, models, policy, expires_at or limits (a Limits); other keywords: ValueError.

        When the budget period changes, the spend counted against it is recomputed from settled reservations.
        """
        if unknown := set(changes) - UPDATABLE:
            raise ValueError(f"cannot update {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(UPDATABLE))}")
        async with self._tx() as tx:
            key = await self._locked_key(tx, key_id)
            if key is None:
                return None
            old_period, now = key.limits.budget_period, utcnow()
            key = apply_key_changes(key, changes, now)
            if key.limits.budget_period != old_period:
                key.period_start = period_floor(key.limits.budget_period, now)
                key.spend_period = key.spend_total
                if key.period_start is not None:
                    costs = await tx.fetch(_SETTLED_SINCE, key.id, key.period_start)
                    key.spend_period = sum((Decimal(r["cost"]) for r in costs), Decimal(0))
            row = key_row(key)
            await tx.execute(_UPDATE_KEY, key.id, *(row[c] for c in _KEY_MUTABLE))
        return key

    async def revoke_key(self, key_id: str) -> Key | None:
        """Revoke now; revoking again keeps the first time."""
        async with self._tx() as tx:
            await tx.execute("UPDATE keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL", key_id, utcnow())
        return await self.get_key(key_id)

    async def touch_keys(self, last_used: dict[str, datetime]) -> None:
        """Record last-used times; a time never moves backwards. Keys are locked in id order (no deadlocks)."""
        if not last_used:
            return
        rows = [(key_id, utc(at)) for key_id, at in sorted(last_used.items())]
        sql = "UPDATE keys SET last_used_at = $2 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $2)"
        async with self._tx() as tx:
            await tx.executemany(sql, rows)

    # metering: the rows are read (locked) and written here; the money rule passed in decides what they become
    async def _books(self, tx: Conn, key_id: str, held: Decimal = Decimal(0)) -> Books:
        """The key and its workspace, locked in that order (after the reservation's row, when there is one)."""
        key = await self._locked_key(tx, key_id)
        if key is None:
            raise LookupError(f"no key {key_id}")
        ws = await self._locked_workspace(tx, key.workspace_id)
        assert ws is not None  # a foreign key
        return Books(key, ws, held)

    async def _write_books(self, tx: Conn, books: Books) -> None:
        key, ws = books.key, books.workspace
        await tx.execute(
            _update("keys", ("reserved", "spend_total", "spend_period", "period_start")),
            key.id, key.reserved, key.spend_total, key.spend_period, key.period_start,
        )  # fmt: skip
        await tx.execute(
            _update("workspaces", ("reserved", "credit", "spend_total")), ws.id, ws.reserved, ws.credit, ws.spend_total
        )

    async def reserve(self, key_id: str, amount: Decimal, now: datetime, rule: HoldRule) -> str:
        """Hold `amount`; raises Refused, LookupError for an unknown key, ValueError for a negative amount."""
        amount, now = as_money(amount), utc(now)
        if amount < 0:
            raise ValueError(f"cannot reserve a negative amount ({amount})")
        reservation_id = new_id("rsv_", 12)
        async with self._tx() as tx:
            books = await self._books(tx, key_id)
            try:
                books = rule(books, amount, now)
            except Refused as refused:
                leases = await tx.fetch(_LEASES + " AND (key_id = $1 OR workspace_id = $2)", key_id, books.workspace.id)
                refused.leased = any(Decimal(r["amount"]) > Decimal(r["in_flight"]) for r in leases)
                raise
            await self._write_books(tx, books)
            await tx.execute(
                _insert("reservations", ("id", "key_id", "workspace_id", "amount", "state", "created_at", "owner")),
                reservation_id, key_id, books.workspace.id, books.held, "held", now, self.owner,
            )  # fmt: skip
        return reservation_id

    async def finish(self, reservation_id: str, cost: Decimal | None, rule: FinishRule) -> None:
        """Settle (cost) or release (None); LookupError for an unknown reservation, ValueError for a negative cost."""
        if cost is not None:
            cost = as_money(cost)
            if cost < 0:
                raise ValueError(f"a cost cannot be negative ({cost})")
        await self._finish(reservation_id, cost, rule)

    async def release_stale(self, older_than: datetime, rule: FinishRule) -> int:
        """Release holds made before `older_than` and never settled (their process died); return how many."""
        rows = await self._all("SELECT id FROM reservations WHERE state = 'held' AND created_at < $1", utc(older_than))
        return sum([await self._finish(row["id"], None, rule) for row in rows])

    async def _finish(self, reservation_id: str, cost: Decimal | None, rule: FinishRule) -> bool:
        """Settle (cost) or release (None) a held reservation; False when it was already finished. A hold released
        meanwhile as a dead process's (its process was cut off from the store) is still charged its cost."""
        async with self._tx() as tx:
            sql = "SELECT key_id, amount, state, cost FROM reservations WHERE id = $1" + self.lock
            rsv = await tx.fetchrow(sql, reservation_id)
            if rsv is None:
                raise LookupError(f"no reservation {reservation_id}")
            state = rsv["state"]
            if state == "settled" or (state == "released" and cost is None):
                return False
            held = Decimal(rsv["amount"]) if state == "held" else Decimal(0)
            books = rule(await self._books(tx, rsv["key_id"], held), cost)
            await self._write_books(tx, books)
            await tx.execute(  # a released lease keeps the cost its syncs already charged
                _update("reservations", ("state", "cost", "finished_at")),
                reservation_id, "released" if cost is None else "settled", rsv["cost"] if cost is None else cost,
                utcnow(),
            )  # fmt: skip
        return True

    async def sync_lease(self, report: LeaseReport, now: datetime, rule: LeaseRule,
                         records: Sequence[dict[str, Any]] = ()) -> LeaseGrant:
        now = utc(now)
        async with self._tx() as tx:
            if records and self.usage_lock:  # first, as save_decisions takes it: no two orders of locks
                await tx.execute(self.usage_lock)
            row = None
            if report.lease_id is not None:
                sql = "SELECT amount, state, cost, created_at FROM reservations WHERE id = $1" + self.lock
                row = await tx.fetchrow(sql, report.lease_id)
            held = Decimal(row["amount"]) if row is not None and row["state"] == "held" else Decimal(0)
            books, useful = rule(await self._books(tx, report.key_id, held), report, now)
            await self._write_books(tx, books)
            lease_id = await self._write_lease(tx, report, row, books, now)
            if records:
                await self._save_decisions(tx, records, frozenset())
        return LeaseGrant(lease_id, books.held, useful)

    async def heartbeat(self, now: datetime) -> None:
        async with self._tx() as tx:
            await tx.execute(_BEAT, self.owner, utc(now))

    async def release_orphans(self, dead_before: datetime, rule: FinishRule) -> int:
        dead_before = utc(dead_before)
        rows = await self._all(_ORPHANS, dead_before, self.owner)
        released = sum([await self._finish(row["id"], None, rule) for row in rows])
        async with self._tx() as tx:
            await tx.execute(_FORGET, dead_before, self.owner)
        return released

    async def retire(self) -> None:
        async with self._tx() as tx:
            await tx.execute("DELETE FROM owners WHERE id = $1", self.owner)

    async def _write_lease(self, tx: Conn, report: LeaseReport, row: Any, books: Books, now: datetime) -> str | None:
        """The lease's rows after a sync that left it holding `books.held`; returns its id (None: no lease)."""
        lease_id, amount, key_id, ws_id = report.lease_id, books.held, report.key_id, books.workspace.id
        if row is not None:  # settled when it closes, rotates, or was released (its process thought dead)
            held = row["state"] == "held"
            cost = Decimal(row["cost"] or 0) + report.spent
            if not held or amount == 0 or as_time(row["created_at"]) < now - LEASE_ROTATE:
                await tx.execute(_update("reservations", ("state", "cost", "amount", "finished_at")),
                                 lease_id, "settled" if held else row["state"], cost, Decimal(0), now)
                lease_id = None
            else:
                await tx.execute(_update("reservations", ("amount", "cost", "in_flight")),
                                 lease_id, amount, cost, report.in_flight)
        elif report.spent:  # its row was released as a dead process's (a store away for longer than a request
            # may live): what its requests spent still counts, in a row of its own
            await tx.execute(_insert("reservations", (*_LEASE_COLS, "finished_at")), new_id("rsv_", 12), key_id,
                             ws_id, Decimal(0), "settled", now, True, report.spent, Decimal(0), self.owner, now)
        if lease_id is None and amount > 0:
            lease_id = new_id("rsv_", 12)
            await tx.execute(_insert("reservations", _LEASE_COLS),
                             lease_id, key_id, ws_id, amount, "held", now, True, Decimal(0), report.in_flight,
                             self.owner)
        return lease_id

    # decision records
    async def save_decisions(self, records: list[dict[str, Any]], uncounted: frozenset[str] = frozenset()) -> None:
        """Insert records; saving a record whose id exists replaces it. A record written for the first time is added
        to the hourly usage rollups (unless its id is `uncounted`), in the same transaction."""
        if not records:
            return
        async with self._tx() as tx:
            if self.usage_lock:  # before reading which records exist: another writer's may not be committed yet
                await tx.execute(self.usage_lock)
            await self._save_decisions(tx, records, uncounted)

    async def _save_decisions(self, tx: Conn, records: Sequence[dict[str, Any]], uncounted: frozenset[str]) -> None:
        """Under `usage_lock`: the records upserted, those new here added to the usage rollups (but `uncounted`)."""
        rows = [to_decision(r) for r in records]
        ids = [r[0] for r in rows]
        seen = {r["id"] for r in await tx.fetch(f"SELECT id FROM decisions WHERE id IN ({_marks(ids)})", *ids)}
        await tx.executemany(_SAVE_DECISION, rows)
        added = usage.rollup([r for r in records if r["id"] not in seen and r["id"] not in uncounted])
        if added:
            await self._add_usage(tx, added)

    async def _add_usage(self, tx: Conn, added: dict[usage.Group, usage.Counts]) -> None:
        """Add to the rollups; the caller holds `usage_lock` (each writer adds to what it read)."""
        hours, keys = sorted({g[0] for g in added}), sorted({g[2] for g in added})
        sql = (_select("usage_hourly", usage.COLUMNS, f" WHERE hour IN ({_marks(hours)})") +
               f" AND key_id IN ({_marks(keys, len(hours))})")
        for row in await tx.fetch(sql, *hours, *keys):
            group, counts = usage.of_row(row)
            if group in added:
                added[group].add(counts)
        await tx.executemany(usage.UPSERT, [usage.row_values(g, c) for g, c in added.items()])

    async def usage(self, start: datetime, end: datetime, workspace_id: str | None = None,
                    key_id: str | None = None) -> list[tuple[usage.Group, usage.Counts]]:
        """The hourly rollups from `start` (inclusive) to `end` (exclusive), optionally of one workspace or key."""
        where, args = " WHERE hour >= $1 AND hour < $2", [utc(start), utc(end)]
        for col, value in (("workspace_id", workspace_id), ("key_id", key_id)):
            if value is not None:
                args.append(value)
                where += f" AND {col} = ${len(args)}"
        rows = await self._all(_select("usage_hourly", usage.COLUMNS, where + " ORDER BY hour"), *args)
        return [usage.of_row(r) for r in rows]

    async def get_decision(self, decision_id: str) -> dict[str, Any] | None:
        row = await self._one("SELECT record FROM decisions WHERE id = $1", decision_id)
        return None if row is None else json.loads(row["record"])

    async def list_decisions(self, query: DecisionQuery) -> list[dict[str, Any]]:
        where, args = _decision_filters(query)
        args.append(query.limit)
        sql = f"SELECT record FROM decisions{where} ORDER BY created_at DESC, id DESC LIMIT ${len(args)}"
        return [json.loads(row["record"]) for row in await self._all(sql, *args)]

    async def prune_decisions(self, older_than: datetime) -> int:
        async with self._tx() as tx:
            return await tx.execute("DELETE FROM decisions WHERE created_at < $1", utc(older_than))


def _decision_filters(query: DecisionQuery) -> tuple[str, list[Any]]:
    """The WHERE clause (or "") and its values for the records `query` selects."""
    conditions: list[str] = []
    args: list[Any] = []

    def mark(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    for col, value in (("workspace_id", query.workspace_id), ("key_id", query.key_id), ("model", query.model)):
        if value is not None:
            conditions.append(f"{col} = {mark(value)}")
    if query.outcome == "error":  # as usage counts errors: every outcome but ok
        conditions.append("(outcome IS NULL OR outcome <> 'ok')")
    elif query.outcome is not None:
        conditions.append(f"outcome = {mark(query.outcome)}")
    if query.start is not None:
        conditions.append(f"created_at >= {mark(utc(query.start))}")
    if query.end is not None:
        conditions.append(f"created_at < {mark(utc(query.end))}")
    if query.before is not None:
        at, last = mark(utc(query.before[0])), mark(query.before[1])
        conditions.append(f"(created_at < {at} OR (created_at = {at} AND id < {last}))")
    return (" WHERE " + " AND ".join(conditions) if conditions else ""), args
