"""The audit log's rows: what an administration change records, and the SQL both backends share.

An entry is written in the transaction of the change it records, so a change and its entry never come apart. It
holds the fields the change set, before and after, as JSON: a workspace's name, credit and state; a key's settings
and states. Never a secret, a secret's hash or its hint.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Protocol

from .base import Actor, AuditEntry, AuditQuery, Key, Workspace
from .values import as_time, iso, new_id, utcnow

# Every action an entry can name (the spec's AuditEntry.action enum lists the same).
ACTIONS = ("workspace.create", "workspace.update", "workspace.credit", "workspace.revoke", "workspace.restore",
           "key.create", "key.update", "key.revoke", "key.rotate", "config.reload")
COLUMNS = ("id", "at", "actor_key_id", "action", "target_type", "target_id", "workspace_id", "changes")
INSERT = f"INSERT INTO audit_log ({', '.join(COLUMNS)}) VALUES ({', '.join(f'${i}' for i in range(1, 9))})"


class _Conn(Protocol):
    async def execute(self, sql: str, *args: Any) -> int: ...


def _time(value: datetime | None) -> str | None:
    return None if value is None else iso(value)


def workspace_fields(ws: Workspace) -> dict[str, Any]:
    return {"name": ws.name, "credit": str(ws.credit), "state": "active" if ws.revoked_at is None else "revoked",
            "revoked_at": _time(ws.revoked_at)}


def key_fields(key: Key) -> dict[str, Any]:
    """A key's settings and states; not its secret's hint, nor its spend (money moves, it is not administered)."""
    lim = key.limits
    return {
        "name": key.name, "scopes": list(key.scopes), "models": None if key.models is None else list(key.models),
        "policy": key.policy, "expires_at": _time(key.expires_at),
        "limits": {"budget": None if lim.budget is None else str(lim.budget), "budget_period": lim.budget_period,
                   "rpm": lim.rpm, "tpm": lim.tpm},
        "revoked_at": _time(key.revoked_at), "rotated_at": _time(key.rotated_at),
        "previous_secret_expires_at": _time(key.previous_expires_at),
    }  # fmt: skip


def changes(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The fields that differ, each with its value before and after (None for a thing created or gone)."""
    old, new = before or {}, after or {}
    return {field: {"before": old.get(field), "after": new.get(field)}
            for field in dict.fromkeys([*old, *new]) if old.get(field) != new.get(field)}


def entry(actor: Actor, action: str, target: Workspace | Key | tuple[str, str], workspace_id: str | None,
          before: dict[str, Any] | None, after: dict[str, Any] | None) -> AuditEntry | None:
    """The entry for a change, or None when nothing changed. `target` is a workspace, a key or (type, id)."""
    assert action in ACTIONS, action
    changed = changes(before, after)
    if not changed:
        return None
    kind, target_id = (("workspace", target.id) if isinstance(target, Workspace) else
                       ("key", target.id) if isinstance(target, Key) else target)
    return AuditEntry(id=new_id("aud_"), at=utcnow(), actor_key_id=actor.key_id, action=action, target_type=kind,
                      target_id=target_id, workspace_id=workspace_id, changes=changed)


async def write(tx: _Conn, found: AuditEntry | None) -> None:
    if found is not None:
        await tx.execute(INSERT, found.id, found.at, found.actor_key_id, found.action, found.target_type,
                         found.target_id, found.workspace_id, json.dumps(found.changes, separators=(",", ":")))


def select(query: AuditQuery) -> tuple[str, list[Any]]:
    """The SELECT for a query: newest first, at most `query.limit` entries."""
    where: list[str] = []
    args: list[Any] = []

    def arg(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    for column in ("workspace_id", "actor_key_id", "action", "target_id"):
        value = getattr(query, column)
        if value is not None:
            where.append(f"{column} = {arg(value)}")
    if query.since is not None:
        where.append(f"at >= {arg(query.since)}")
    if query.until is not None:
        where.append(f"at < {arg(query.until)}")
    if query.before is not None:
        at, last_id = query.before
        where.append(f"(at < {arg(at)} OR (at = {arg(at)} AND id < {arg(last_id)}))")
    sql = f"SELECT {', '.join(COLUMNS)} FROM audit_log"
    sql += (" WHERE " + " AND ".join(where) if where else "") + f" ORDER BY at DESC, id DESC LIMIT {arg(query.limit)}"
    return sql, args


def of_row(row: Any) -> AuditEntry:
    raw = row["changes"]
    return AuditEntry(id=row["id"], at=as_time(row["at"]), actor_key_id=row["actor_key_id"],  # type: ignore[arg-type]
                      action=row["action"], target_type=row["target_type"], target_id=row["target_id"],
                      workspace_id=row["workspace_id"], changes=json.loads(raw) if isinstance(raw, str) else raw)
