"""What the SQLite and PostgreSQL stores share on top of workspaces and keys (sqlaccounts.py): the transactions that
apply the money rules, the owners' heartbeats, the decision records and their usage rollups.

A backend only connects, opens transactions and binds values. What a budget or a balance allows is decided by the
rule each money call is given (handlers/metering/money.py), on rows read and locked here; this module writes its
result and keeps the rows (reservations, leases) in order, locking them in one order — reservation, key,
workspace — so concurrent transactions cannot deadlock (sqlcore.py says how the SQL is written once for both).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from handlers.periodic import in_slices

from . import usage
from .base import (
    Books,
    DecisionQuery,
    FinishRule,
    HoldRule,
    LeaseGrant,
    LeaseReport,
    LeaseRule,
    Refused,
)
from .sqlaccounts import SQLAccounts
from .sqlcore import LEASES, Conn, sql_insert, sql_marks, sql_select, sql_update
from .values import (
    as_money,
    as_time,
    new_id,
    to_decision,
    utc,
    utcnow,
)

_LEASE_COLS = ("id", "key_id", "workspace_id", "amount", "state", "created_at", "lease", "cost", "in_flight", "owner")
_DECISION_COLS = ("id", "created_at", "workspace_id", "key_id", "model", "outcome", "record")
_SAVE_DECISION = (f"{sql_insert('decisions', _DECISION_COLS)} ON CONFLICT (id) DO UPDATE SET "
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


class SQLStore(SQLAccounts):
    """Every store call in SQL: SQLAccounts' workspaces and keys, and here the money and the decision records."""

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
            sql_update("keys", ("reserved", "spend_total", "spend_period", "period_start")),
            key.id, key.reserved, key.spend_total, key.spend_period, key.period_start,
        )  # fmt: skip
        await tx.execute(
            sql_update("workspaces", ("reserved", "credit", "spend_total")), ws.id, ws.reserved, ws.credit, ws.spend_total
        )

    async def reserve(self, key_id: str, amount: Decimal, now: datetime, rule: HoldRule) -> str:
        """Hold `amount`; raises Refused, LookupError for an unknown key, ValueError for a negative amount."""
        amount, now = as_money(amount), utc(now)
        if amount < 0:
            raise ValueError(f"cannot reserve a negative amount ({amount})")
        reservation_id = new_id("rsv_", 12)

        async def hold(tx: Conn) -> str:
            books = await self._books(tx, key_id)
            try:
                books = rule(books, amount, now)
            except Refused as refused:
                leases = await tx.fetch(LEASES + " AND (key_id = $1 OR workspace_id = $2)", key_id, books.workspace.id)
                refused.leased = any(Decimal(r["amount"]) > Decimal(r["in_flight"]) for r in leases)
                raise
            await self._write_books(tx, books)
            await tx.execute(
                sql_insert("reservations", ("id", "key_id", "workspace_id", "amount", "state", "created_at", "owner")),
                reservation_id, key_id, books.workspace.id, books.held, "held", now, self.owner,
            )  # fmt: skip
            return reservation_id

        return await self._transaction(hold)

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

        async def finish(tx: Conn) -> bool:
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
                sql_update("reservations", ("state", "cost", "finished_at")),
                reservation_id, "released" if cost is None else "settled", rsv["cost"] if cost is None else cost,
                utcnow(),
            )  # fmt: skip
            return True

        return await self._transaction(finish)

    async def sync_lease(self, report: LeaseReport, now: datetime, rule: LeaseRule,
                         records: Sequence[dict[str, Any]] = ()) -> LeaseGrant:
        now, batch = utc(now), await self._decisions(records, frozenset())  # made before the transaction: it is short

        async def sync(tx: Conn) -> LeaseGrant:
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
                await self._save_decisions(tx, batch)
            return LeaseGrant(lease_id, books.held, useful)

        return await self._transaction(sync)

    async def heartbeat(self, now: datetime) -> None:
        await self._transaction(lambda tx: tx.execute(_BEAT, self.owner, utc(now)))

    async def release_orphans(self, dead_before: datetime, rule: FinishRule) -> int:
        dead_before = utc(dead_before)
        rows = await self._all(_ORPHANS, dead_before, self.owner)
        released = sum([await self._finish(row["id"], None, rule) for row in rows])
        await self._transaction(lambda tx: tx.execute(_FORGET, dead_before, self.owner))
        return released

    async def retire(self) -> None:
        await self._transaction(lambda tx: tx.execute("DELETE FROM owners WHERE id = $1", self.owner))

    async def _write_lease(self, tx: Conn, report: LeaseReport, row: Any, books: Books, now: datetime) -> str | None:
        """The lease's rows after a sync that left it holding `books.held`; returns its id (None: no lease)."""
        lease_id, amount, key_id, ws_id = report.lease_id, books.held, report.key_id, books.workspace.id
        if row is not None:  # settled when it closes, rotates, or was released (its process thought dead)
            held = row["state"] == "held"
            cost = Decimal(row["cost"] or 0) + report.spent
            if not held or amount == 0 or as_time(row["created_at"]) < now - LEASE_ROTATE:
                await tx.execute(sql_update("reservations", ("state", "cost", "amount", "finished_at")),
                                 lease_id, "settled" if held else row["state"], cost, Decimal(0), now)
                lease_id = None
            else:
                await tx.execute(sql_update("reservations", ("amount", "cost", "in_flight")),
                                 lease_id, amount, cost, report.in_flight)
        elif report.spent:  # its row was released as a dead process's (a store away for longer than a request
            # may live): what its requests spent still counts, in a row of its own
            await tx.execute(sql_insert("reservations", (*_LEASE_COLS, "finished_at")), new_id("rsv_", 12), key_id,
                             ws_id, Decimal(0), "settled", now, True, report.spent, Decimal(0), self.owner, now)
        if lease_id is None and amount > 0:
            lease_id = new_id("rsv_", 12)
            await tx.execute(sql_insert("reservations", _LEASE_COLS),
                             lease_id, key_id, ws_id, amount, "held", now, True, Decimal(0), report.in_flight,
                             self.owner)
        return lease_id

    # decision records
    async def save_decisions(self, records: list[dict[str, Any]], uncounted: frozenset[str] = frozenset()) -> None:
        """Insert records; saving a record whose id exists replaces it. A record written for the first time is added
        to the hourly usage rollups (unless its id is `uncounted`), in the same transaction."""
        if not records:
            return
        batch = await self._decisions(records, uncounted)

        async def save(tx: Conn) -> None:
            if self.usage_lock:  # before reading which records exist: another writer's may not be committed yet
                await tx.execute(self.usage_lock)
            await self._save_decisions(tx, batch)

        await self._transaction(save)

    async def _decisions(self, records: Sequence[dict[str, Any]], uncounted: frozenset[str]) -> _Decisions:
        """What a transaction writes of `records`, made before it, on the event loop in slices: SQLite's thread holds
        the interpreter while it runs Python, and the event loop waited for it (bench/README.md, "A decision batch
        made before its transaction")."""
        rows = await in_slices(self._decision_row, records)
        return _Decisions(rows, uncounted, _added(rows, uncounted))

    def _decision_row(self, record: dict[str, Any]) -> _DecisionRow:
        """A record's columns in `decisions` (its JSON among them), bound as the backend takes them, and what it adds
        to the usage rollups."""
        return self.bound(to_decision(record)), usage.of_record(record)

    def bound(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        """Values as this backend binds them (PostgreSQL's driver takes Python's own)."""
        return values

    async def _save_decisions(self, tx: Conn, batch: _Decisions) -> None:
        """Under `usage_lock`: the records upserted, those new here added to the usage rollups (but the batch's
        uncounted)."""
        ids = [columns[0] for columns, _ in batch.rows]
        seen = {r["id"] for r in await tx.fetch(f"SELECT id FROM decisions WHERE id IN ({sql_marks(ids)})", *ids)}
        await tx.executemany(_SAVE_DECISION, [columns for columns, _ in batch.rows])
        added = _added(batch.rows, batch.uncounted | seen) if seen else batch.added
        if added:
            await self._add_usage(tx, added)

    async def _add_usage(self, tx: Conn, added: dict[usage.Group, usage.Counts]) -> None:
        """Add to the rollups; the caller holds `usage_lock` (each writer adds to what it read). `added` is left as it
        is (a batch's, made before its transaction)."""
        hours, keys = sorted({g[0] for g in added}), sorted({g[2] for g in added})
        sql = (sql_select("usage_hourly", usage.COLUMNS, f" WHERE hour IN ({sql_marks(hours)})") +
               f" AND key_id IN ({sql_marks(keys, len(hours))})")
        totals = dict(added)
        for row in await tx.fetch(sql, *hours, *keys):
            group, counts = usage.of_row(row)
            if group in added:
                counts.add(added[group])
                totals[group] = counts
        await tx.executemany(usage.UPSERT, [usage.row_values(g, c) for g, c in totals.items()])

    async def usage(self, start: datetime, end: datetime, workspace_id: str | None = None,
                    key_id: str | None = None) -> list[tuple[usage.Group, usage.Counts]]:
        """The hourly rollups from `start` (inclusive) to `end` (exclusive), optionally of one workspace or key."""
        where, args = " WHERE hour >= $1 AND hour < $2", [utc(start), utc(end)]
        for col, value in (("workspace_id", workspace_id), ("key_id", key_id)):
            if value is not None:
                args.append(value)
                where += f" AND {col} = ${len(args)}"
        rows = await self._all(sql_select("usage_hourly", usage.COLUMNS, where + " ORDER BY hour"), *args)
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
        return await self._transaction(lambda tx: tx.execute("DELETE FROM decisions WHERE created_at < $1",
                                                             utc(older_than)))



_DecisionRow = tuple[tuple[Any, ...], tuple[usage.Group, usage.Counts] | None]


@dataclass(frozen=True, slots=True)
class _Decisions:
    rows: list[_DecisionRow]
    uncounted: frozenset[str]
    added: dict[usage.Group, usage.Counts]  # what the rows add to the rollups when none of them was written before


def _added(rows: Sequence[_DecisionRow], skip: frozenset[str]) -> dict[usage.Group, usage.Counts]:
    """The rows' usage by rollup, but the records in `skip`."""
    added: dict[usage.Group, usage.Counts] = {}
    for (decision_id, *_), counted in rows:
        if counted is not None and decision_id not in skip:
            added.setdefault(counted[0], usage.Counts()).add(counted[1])
    return added


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
