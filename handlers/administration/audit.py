"""The audit log as the API and the CLI read it (`GET /v1/audit`, `specway audit`), and the one door for changes the
store does not make itself.

The store writes an entry in the transaction of each administration change it is given an actor for
(handlers/store/audit.py); `record` is for a change made elsewhere: the configuration reload
(`POST /v1/admin/reload`) records itself with

    await audit.record(store, actor, "config.reload", ("config", path), before, after)

where `before` and `after` are what the reload changed, as JSON values (never a secret).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from generated import errors as codes
from handlers.administration.tenancy import Authority
from handlers.errors import ApiError, bad_request
from handlers.observability.usage import parse_time
from handlers.store import audit as rows
from handlers.store.base import AuditEntry, AuditQuery, Store

if TYPE_CHECKING:
    from generated import models as api

DEFAULT_LIMIT = 100


async def record(store: Store, actor: Authority, action: str, target: tuple[str, str], before: dict[str, Any] | None,
                 after: dict[str, Any] | None, workspace_id: str | None = None) -> None:
    """Write the entry of a change made outside the store's administration methods (nothing when nothing changed)."""
    found = rows.entry(actor.audit, action, target, workspace_id, before, after)
    if found is not None:
        await store.record_audit(found)


def entry_out(found: AuditEntry) -> api.AuditEntry:
    from generated import models

    return models.AuditEntry.model_validate({
        "id": found.id, "object": "audit.entry", "at": found.at.astimezone(UTC).isoformat(),
        "actor_key_id": found.actor_key_id, "action": found.action, "target_type": found.target_type,
        "target_id": found.target_id, "workspace_id": found.workspace_id, "changes": found.changes,
    })


def list_out(found: list[AuditEntry], cursor: str | None) -> api.AuditList:
    from generated import models

    return models.AuditList(object="list", data=[entry_out(e) for e in found], has_more=cursor is not None,
                         next_cursor=cursor)


async def page(store: Store, actor: Authority, *, limit: int | None = None, cursor: str | None = None,
               workspace_id: str | None = None, key_id: str | None = None, action: str | None = None,
               target_id: str | None = None, since: str | None = None,
               until: str | None = None) -> tuple[list[AuditEntry], str | None]:
    """A page of the entries the actor may read, newest first, and the cursor of the next page (the id of the page's
    last entry; None on the last page): a workspace administrator's own workspace only (another workspace named is
    an empty page, as an unknown one is). An empty id is no filter. The API's models are made of it by list_out
    (the CLI's table needs none)."""
    size = limit or DEFAULT_LIMIT
    workspace_id, key_id, action, target_id = (v or None for v in (workspace_id, key_id, action, target_id))
    if action is not None and action not in rows.ACTIONS:
        raise bad_request(f"action: {action!r} is not one of {', '.join(rows.ACTIONS)}.", param="action")
    if workspace_id is not None and not actor.sees(workspace_id):
        return [], None
    query = AuditQuery(limit=size + 1, before=await _after(store, actor, cursor),
                       workspace_id=workspace_id or actor.workspace_id, actor_key_id=key_id, action=action,
                       target_id=target_id, since=parse_time("since", since), until=parse_time("until", until))
    found = await store.audit_entries(query)
    shown = found[:size]
    return shown, shown[-1].id if len(found) > size else None


async def _after(store: Store, actor: Authority, cursor: str | None) -> tuple[datetime, str] | None:
    """Where the page a cursor names starts: after that entry, which the actor must be able to read."""
    if not cursor:
        return None
    found = await store.audit_entry(cursor)
    hidden = found is not None and (actor.workspace_id is not None and found.workspace_id != actor.workspace_id)
    if found is None or hidden:
        raise ApiError(codes.CURSOR_NOT_FOUND, f"cursor: no audit entry {cursor!r} for this key (pruned since, or "
                       "not a next_cursor of an earlier page).", param="cursor")
    return found.at, found.id
