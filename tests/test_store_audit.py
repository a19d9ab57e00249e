"""The audit log in the store, on SQLite and PostgreSQL: written in each change's transaction, read newest first."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal as D

import pytest

from handlers.store.base import Actor, AuditQuery, WorkspaceRevoked
from handlers.store.sqlbase import SQLStore
from tests.store_support import (
    NOW,
    fixture_backend,  # noqa: F401  (a fixture)
    fixture_store,  # noqa: F401  (a fixture)
)

BY = Actor("key_00000000000000aa")


async def test_changes_are_recorded_with_their_fields_and_paged(store: SQLStore) -> None:
    ws = await store.create_workspace("w", D(1), audit=BY)
    key, _ = await store.create_key(ws.id, "k", ("inference",), audit=BY)
    await store.update_key(key.id, models=("a",), audit=BY)
    await store.add_credit(ws.id, D("-0.5"), audit=Actor(None))
    await store.set_workspace_revoked(ws.id, True, audit=BY)
    with pytest.raises(WorkspaceRevoked):
        await store.add_credit(ws.id, D(1), audit=BY)  # refused: nothing recorded
    await store.rename_workspace(ws.id, "w", audit=BY)  # the same name: nothing recorded
    await store.create_workspace("quiet")  # no actor: nothing recorded
    found = await store.audit_entries(AuditQuery())
    assert [e.action for e in found] == ["workspace.revoke", "workspace.credit", "key.update", "key.create",
                                         "workspace.create"]
    assert [e.actor_key_id for e in found] == [BY.key_id, None, BY.key_id, BY.key_id, BY.key_id]
    assert found[1].changes == {"credit": {"before": "1", "after": "0.5"}}
    assert found[2].changes == {"models": {"before": None, "after": ["a"]}} and found[2].workspace_id == ws.id
    assert found[0].at.tzinfo is not None and found[0].at >= found[-1].at

    first = await store.audit_entries(AuditQuery(limit=2))
    rest = await store.audit_entries(AuditQuery(before=(first[-1].at, first[-1].id)))
    assert [e.id for e in first + rest] == [e.id for e in found]
    assert [e.action for e in await store.audit_entries(AuditQuery(target_id=key.id))] == ["key.update", "key.create"]
    assert len(await store.audit_entries(AuditQuery(actor_key_id=BY.key_id, action="workspace.create"))) == 1
    assert await store.audit_entries(AuditQuery(since=NOW + timedelta(days=1))) == []
    assert await store.prune_audit(NOW - timedelta(days=1)) == 0
    assert await store.prune_audit(NOW + timedelta(days=1)) == 5
