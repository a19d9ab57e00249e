"""Workspaces, relay keys and the audit log in SQL, on both backends: each change an administrator makes is one
transaction, which also writes its audit entry when it is given an actor (handlers/store/audit.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from . import audit as audit_rows
from .base import (
    Actor,
    AuditEntry,
    AuditQuery,
    Key,
    Limits,
    Refused,
    Workspace,
    WorkspaceRevoked,
    hash_secret,
    new_secret,
)
from .sqlcore import (
    KEY_MUTABLE,
    KEY_READ,
    SETTLED_SINCE,
    UPDATABLE,
    UPDATE_KEY,
    WS_COLS,
    Conn,
    SQLCore,
    sql_insert,
    sql_select,
    sql_update,
)
from .values import (
    apply_key_changes,
    as_money,
    key_row,
    new_id,
    period_floor,
    to_key,
    to_workspace,
    utc,
    utcnow,
    validate_limits,
    validate_scopes,
)


class SQLAccounts(SQLCore):
    # workspaces
    async def create_workspace(self, name: str, credit: Decimal = Decimal(0), *,
                               audit: Actor | None = None) -> Workspace:
        ws = Workspace(new_id("ws_"), name, as_money(credit), Decimal(0), Decimal(0), utcnow())

        async def create(tx: Conn) -> None:
            await tx.execute(sql_insert("workspaces", WS_COLS), *(getattr(ws, col) for col in WS_COLS))
            await self._audit_workspace(tx, audit, "workspace.create", None, ws)

        await self._transaction(create)
        return ws

    async def _audit_workspace(self, tx: Conn, actor: Actor | None, action: str, before: Workspace | None,
                               after: Workspace) -> None:
        if actor is not None:
            old = None if before is None else audit_rows.workspace_fields(before)
            await audit_rows.write(tx, audit_rows.entry(actor, action, after, after.id, old,
                                                        audit_rows.workspace_fields(after)))

    async def _audit_key(self, tx: Conn, actor: Actor | None, action: str, before: Key | None, after: Key) -> None:
        if actor is not None:
            old = None if before is None else audit_rows.key_fields(before)
            await audit_rows.write(tx, audit_rows.entry(actor, action, after, after.workspace_id, old,
                                                        audit_rows.key_fields(after)))

    async def get_workspace(self, workspace_id: str) -> Workspace | None:
        row = await self._one(sql_select("workspaces", WS_COLS, " WHERE id = $1"), workspace_id)
        return None if row is None else (await self._unleased([to_workspace(row)], "workspace_id"))[0]

    async def list_workspaces(self) -> list[Workspace]:
        found = [to_workspace(r) for r in await self._all(sql_select("workspaces", WS_COLS, " ORDER BY created_at, id"))]
        return await self._unleased(found, "workspace_id")

    async def rename_workspace(self, workspace_id: str, name: str, *, audit: Actor | None = None) -> Workspace | None:

        async def rename(tx: Conn) -> bool:
            ws = await self._locked_workspace(tx, workspace_id)
            if ws is None:
                return False
            await tx.execute("UPDATE workspaces SET name = $2 WHERE id = $1", workspace_id, name)
            await self._audit_workspace(tx, audit, "workspace.update", ws, replace(ws, name=name))
            return True

        return await self.get_workspace(workspace_id) if await self._transaction(rename) else None

    async def add_credit(self, workspace_id: str, amount: Decimal, *, audit: Actor | None = None) -> Workspace | None:
        """Add to the balance (a negative amount corrects it downwards, never below zero: Refused)."""
        amount = as_money(amount)

        async def credit(tx: Conn) -> Workspace | None:
            before = await self._locked_workspace(tx, workspace_id)
            if before is None:
                return None
            if before.revoked_at is not None:
                raise WorkspaceRevoked(workspace_id)
            if before.credit + amount < 0:
                raise Refused("credit", f"{amount} would take the credit below zero: {workspace_id} has {before.credit}")
            ws = replace(before, credit=before.credit + amount)
            await tx.execute("UPDATE workspaces SET credit = $2 WHERE id = $1", ws.id, ws.credit)
            await self._audit_workspace(tx, audit, "workspace.credit", before, ws)
            return ws

        return await self._transaction(credit)

    async def set_workspace_revoked(self, workspace_id: str, revoked: bool, *,
                                    audit: Actor | None = None) -> Workspace | None:

        async def revoke(tx: Conn) -> bool:
            before = await self._locked_workspace(tx, workspace_id)
            if before is None:
                return False
            at = (before.revoked_at or utcnow()) if revoked else None  # revoked again: the first time stays
            await tx.execute("UPDATE workspaces SET revoked_at = $2 WHERE id = $1", workspace_id, at)
            action = "workspace.revoke" if revoked else "workspace.restore"
            await self._audit_workspace(tx, audit, action, before, replace(before, revoked_at=at))
            return True

        return await self.get_workspace(workspace_id) if await self._transaction(revoke) else None

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
        audit: Actor | None = None,
    ) -> tuple[Key, str]:
        secret, now, limits = new_secret(), utcnow(), validate_limits(limits or Limits())
        key = Key(
            id=new_id("key_"), workspace_id=workspace_id, name=name, hint=secret[:10] + "…",
            scopes=validate_scopes(scopes), models=None if models is None else tuple(models), policy=policy,
            expires_at=None if expires_at is None else utc(expires_at), created_at=now, last_used_at=None,
            revoked_at=None, limits=limits, period_start=period_floor(limits.budget_period, now),
        )  # fmt: skip
        row = key_row(key) | {"secret_hash": hash_secret(secret)}

        async def create(tx: Conn) -> None:
            ws = await self._locked_workspace(tx, workspace_id)
            if ws is None:
                raise LookupError(f"no workspace {workspace_id}")
            if ws.revoked_at is not None:
                raise WorkspaceRevoked(workspace_id)
            await tx.execute(sql_insert("keys", tuple(row)), *row.values())
            await self._audit_key(tx, audit, "key.create", None, key)

        await self._transaction(create)
        return key, secret

    async def key_by_secret(self, secret: str) -> Key | None:
        digest = hash_secret(secret)
        row = await self._one(sql_select("keys", (*KEY_READ, "secret_hash"),
                                      " WHERE secret_hash = $1 OR previous_secret_hash = $1"), digest)
        if row is None:
            return None
        key = to_key(row)
        key.by_previous_secret = row["secret_hash"] != digest
        return key

    async def rotate_key(self, key_id: str, grace: timedelta, *,
                         audit: Actor | None = None) -> tuple[Key, str] | None:
        secret, now = new_secret(), utcnow()

        async def rotate(tx: Conn) -> bool:
            before = await self._locked_key(tx, key_id)
            if before is None:
                return False
            if before.workspace_revoked_at is not None:
                raise WorkspaceRevoked(before.workspace_id)
            row = await tx.fetchrow("SELECT secret_hash FROM keys WHERE id = $1", key_id)
            kept = grace > timedelta(0)
            after = replace(before, hint=secret[:10] + "…", rotated_at=now, previous_expires_at=now + grace if kept
                            else None)
            await tx.execute(sql_update("keys", ("secret_hash", "hint", "previous_secret_hash", "previous_expires_at",
                                              "rotated_at")),
                             key_id, hash_secret(secret), after.hint, row["secret_hash"] if kept else None,
                             after.previous_expires_at, now)
            await self._audit_key(tx, audit, "key.rotate", before, after)
            return True

        if not await self._transaction(rotate):
            return None
        key = await self.get_key(key_id)
        assert key is not None  # keys are never deleted
        return key, secret

    async def get_key(self, key_id: str) -> Key | None:
        row = await self._one(sql_select("keys", KEY_READ, " WHERE id = $1"), key_id)
        return None if row is None else (await self._unleased([to_key(row)], "key_id"))[0]

    async def list_keys(self, workspace_id: str | None = None) -> list[Key]:
        where, args = ("", ()) if workspace_id is None else (" WHERE workspace_id = $1", (workspace_id,))
        rows = await self._all(sql_select("keys", KEY_READ, where + " ORDER BY created_at, id"), *args)
        return await self._unleased([to_key(r) for r in rows], "key_id")

    async def update_key(self, key_id: str, *, audit: Actor | None = None, **changes: Any) -> Key | None:
        """Change name, scopes, models, policy, expires_at or limits (a Limits); other keywords: ValueError.

        When the budget period changes, the spend counted against it is recomputed from settled reservations.
        """
        if unknown := set(changes) - UPDATABLE:
            raise ValueError(f"cannot update {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(UPDATABLE))}")

        async def update(tx: Conn) -> Key | None:
            before = key = await self._locked_key(tx, key_id)
            if key is None:
                return None
            old_period, now = key.limits.budget_period, utcnow()
            key = apply_key_changes(key, changes, now)
            if key.limits.budget_period != old_period:
                key.period_start = period_floor(key.limits.budget_period, now)
                key.spend_period = key.spend_total
                if key.period_start is not None:
                    costs = await tx.fetch(SETTLED_SINCE, key.id, key.period_start)
                    key.spend_period = sum((Decimal(r["cost"]) for r in costs), Decimal(0))
            row = key_row(key)
            await tx.execute(UPDATE_KEY, key.id, *(row[c] for c in KEY_MUTABLE))
            await self._audit_key(tx, audit, "key.update", before, key)
            return key

        return await self._transaction(update)

    async def revoke_key(self, key_id: str, *, audit: Actor | None = None) -> Key | None:
        """Revoke now; revoking again keeps the first time."""

        async def revoke(tx: Conn) -> bool:
            before = await self._locked_key(tx, key_id)
            if before is None:
                return False
            if before.revoked_at is None:
                now = utcnow()
                await tx.execute("UPDATE keys SET revoked_at = $2 WHERE id = $1", key_id, now)
                await self._audit_key(tx, audit, "key.revoke", before, replace(before, revoked_at=now))
            return True

        return await self.get_key(key_id) if await self._transaction(revoke) else None

    async def touch_keys(self, last_used: dict[str, datetime]) -> None:
        """Record last-used times; a time never moves backwards. Keys are locked in id order (no deadlocks)."""
        if not last_used:
            return
        rows = [(key_id, utc(at)) for key_id, at in sorted(last_used.items())]
        sql = "UPDATE keys SET last_used_at = $2 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $2)"
        await self._transaction(lambda tx: tx.executemany(sql, rows))


    # the audit log (entries of the methods above are written in their transactions)
    async def record_audit(self, entry: AuditEntry) -> None:
        await self._transaction(lambda tx: audit_rows.write(tx, entry))

    async def audit_entry(self, entry_id: str) -> AuditEntry | None:
        row = await self._one(f"SELECT {', '.join(audit_rows.COLUMNS)} FROM audit_log WHERE id = $1", entry_id)
        return None if row is None else audit_rows.of_row(row)

    async def audit_entries(self, query: AuditQuery) -> list[AuditEntry]:
        sql, args = audit_rows.select(query)
        return [audit_rows.of_row(r) for r in await self._all(sql, *args)]

    async def prune_audit(self, older_than: datetime) -> int:
        return await self._transaction(lambda tx: tx.execute("DELETE FROM audit_log WHERE at < $1", utc(older_than)))

