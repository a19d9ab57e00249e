"""The store's workspaces and keys, on SQLite and PostgreSQL (fixtures in tests/store_support.py)."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal as D

import pytest

from handlers.store import Store
from handlers.store.base import SECRET_PREFIX, Limits, WorkspaceRevoked
from tests.store_support import (
    NEXT_YEAR,
    NOW,
    Backend,
    fixture_backend,  # noqa: F401  (a fixture)
    fixture_store,  # noqa: F401  (a fixture)
)


async def test_workspaces(store: Store) -> None:
    a = await store.create_workspace("alpha")
    b = await store.create_workspace("beta", D("12.50"))
    assert re.fullmatch(r"ws_[0-9a-f]{16}", a.id)
    assert (a.credit, a.reserved, a.spend_total, b.credit) == (D(0), D(0), D(0), D("12.50"))
    assert a.created_at.tzinfo is not None and a.created_at.utcoffset() == timedelta(0)
    assert await store.get_workspace(a.id) == a
    assert await store.get_workspace("ws_missing") is None
    assert [w.id for w in await store.list_workspaces()] == [a.id, b.id]
    renamed = await store.rename_workspace(a.id, "alpha 2")
    assert renamed is not None and renamed.name == "alpha 2" and (await store.get_workspace(a.id)) == renamed
    assert await store.rename_workspace("ws_missing", "x") is None
    await store.add_credit(a.id, D("0.1"))
    credited = await store.add_credit(a.id, D("0.2"))
    assert credited is not None and credited.credit == D("0.3") == (await store.get_workspace(a.id)).credit
    assert await store.add_credit("ws_missing", D(1)) is None
    with pytest.raises(TypeError):
        await store.add_credit(a.id, 0.1)  # type: ignore[arg-type]


async def test_create_and_find_keys(store: Store) -> None:
    ws = await store.create_workspace("w")
    other = await store.create_workspace("other")
    key, secret = await store.create_key(ws.id, "ci", ("inference", "models:read"), models=("gpt-x",), policy="cheap")
    other_key, _ = await store.create_key(other.id, "o", ("admin",))
    assert re.fullmatch(r"key_[0-9a-f]{16}", key.id)
    assert secret.startswith(SECRET_PREFIX) and len(secret) > 40
    assert key.hint == secret[:10] + "…"
    assert (key.scopes, key.models, key.policy, key.limits) == (
        ("inference", "models:read"),
        ("gpt-x",),
        "cheap",
        Limits(),
    )
    assert await store.key_by_secret(secret) == key == await store.get_key(key.id)
    assert await store.key_by_secret(secret[:-1] + ("A" if secret[-1] != "A" else "B")) is None
    assert await store.key_by_secret("") is None
    assert await store.get_key("key_missing") is None
    assert [k.id for k in await store.list_keys(ws.id)] == [key.id]
    assert [k.id for k in await store.list_keys()] == [key.id, other_key.id]
    with pytest.raises(LookupError):
        await store.create_key("ws_missing", "x", ("inference",))
    with pytest.raises(ValueError, match="unknown scopes"):
        await store.create_key(ws.id, "x", ("everything",))


async def test_secret_is_not_stored_in_clear(store: Store, backend: Backend) -> None:
    ws = await store.create_workspace("w")
    _, secret = await store.create_key(ws.id, "k", ("inference",))
    cells = [str(value) for _, value in await backend.cells()]
    body = secret[len(SECRET_PREFIX) :]
    assert not [c for c in cells if secret in c or body in c]
    assert hashlib.sha256(secret.encode()).hexdigest() in cells


async def test_update_key_each_field(store: Store) -> None:
    ws = await store.create_workspace("w")
    key, secret = await store.create_key(ws.id, "k", ("inference",))
    paris = timezone(timedelta(hours=1))
    later = datetime(NEXT_YEAR, 6, 1, 13, 0, tzinfo=paris)
    limits = Limits(D("2.50"), "monthly", rpm=60, tpm=10_000)
    for field, value, expected in [
        ("name", "renamed", "renamed"),
        ("scopes", ["inference", "key:read"], ("inference", "key:read")),
        ("models", ["m1", "m2"], ("m1", "m2")),
        ("models", None, None),
        ("policy", "fast", "fast"),
        ("expires_at", later, later),
        ("limits", limits, limits),
    ]:
        updated = await store.update_key(key.id, **{field: value})
        assert updated is not None and getattr(updated, field) == expected, field
        assert await store.get_key(key.id) == updated == await store.key_by_secret(secret)
    stored = await store.get_key(key.id)
    assert stored is not None and stored.expires_at is not None and stored.expires_at.tzinfo == UTC
    assert stored.period_start == NOW.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    with pytest.raises(ValueError, match="cannot update secret_hash"):
        await store.update_key(key.id, secret_hash="x")
    with pytest.raises(ValueError):
        await store.update_key(key.id, limits=Limits(budget_period="weekly"))  # type: ignore[arg-type]
    assert await store.update_key("key_missing", name="x") is None


async def test_revoke_and_expiry(store: Store) -> None:
    ws = await store.create_workspace("w")
    key, _ = await store.create_key(ws.id, "k", ("inference",), expires_at=NOW + timedelta(hours=1))
    assert key.active(NOW) and not key.active(NOW + timedelta(hours=2))
    revoked = await store.revoke_key(key.id)
    assert revoked is not None and revoked.revoked_at is not None and not revoked.active(NOW)
    again = await store.revoke_key(key.id)
    assert again is not None and again.revoked_at == revoked.revoked_at
    assert await store.revoke_key("key_missing") is None


async def test_a_revoked_workspace_is_a_state_until_restored(store: Store) -> None:
    ws = await store.create_workspace("leaving", D(5))
    kept, kept_secret = await store.create_key(ws.id, "kept", ("inference",))
    alone, alone_secret = await store.create_key(ws.id, "revoked alone", ("inference",))
    await store.revoke_key(alone.id)
    revoked = await store.set_workspace_revoked(ws.id, True)
    assert revoked is not None and revoked.revoked_at is not None and revoked.credit == D(5)
    assert [w.revoked_at for w in await store.list_workspaces()] == [revoked.revoked_at]
    again = await store.set_workspace_revoked(ws.id, True)
    assert again is not None and again.revoked_at == revoked.revoked_at  # the first time is kept
    found = await store.key_by_secret(kept_secret)
    assert found is not None and found.revoked_at is None and found.workspace_revoked_at == revoked.revoked_at
    assert not found.active(NOW) and [k.workspace_revoked_at for k in await store.list_keys(ws.id)] == [
        revoked.revoked_at] * 2
    with pytest.raises(WorkspaceRevoked):
        await store.create_key(ws.id, "new", ("inference",))
    with pytest.raises(WorkspaceRevoked):
        await store.add_credit(ws.id, D(1))
    assert [k.name for k in await store.list_keys(ws.id)] == ["kept", "revoked alone"]
    assert (await store.get_workspace(ws.id)).credit == D(5)  # type: ignore[union-attr]

    restored = await store.set_workspace_revoked(ws.id, False)
    assert restored is not None and restored.revoked_at is None
    assert (await store.key_by_secret(kept_secret)).active(NOW)  # type: ignore[union-attr]
    assert not (await store.key_by_secret(alone_secret)).active(NOW)  # type: ignore[union-attr]  # its own
    assert (await store.add_credit(ws.id, D(1))).credit == D(6)  # type: ignore[union-attr]
    assert await store.set_workspace_revoked("ws_missing", True) is None
    assert kept.workspace_revoked_at is None


async def test_rotation_keeps_the_key_and_its_previous_secret_for_the_grace(store: Store) -> None:
    ws = await store.create_workspace("w")
    key, old = await store.create_key(ws.id, "svc", ("inference",), limits=Limits(budget=D(5), rpm=30))
    await store.update_key(key.id, name="svc 2")
    rotated = await store.rotate_key(key.id, timedelta(hours=24))
    assert rotated is not None
    after, new = rotated
    assert new != old and new.startswith(SECRET_PREFIX) and after.hint == new[:10] + "…"
    assert (after.id, after.name, after.limits, after.spend_total) == (key.id, "svc 2", key.limits, key.spend_total)
    assert after.rotated_at is not None and after.previous_expires_at == after.rotated_at + timedelta(hours=24)
    by_new, by_old = await store.key_by_secret(new), await store.key_by_secret(old)
    assert by_new is not None and by_old is not None and by_new.id == by_old.id == key.id
    assert (by_new.by_previous_secret, by_old.by_previous_secret) == (False, True)
    assert by_old.active(NOW) and by_old.rotating(NOW)
    assert not by_old.active(after.previous_expires_at) and by_new.active(after.previous_expires_at)
    await store.update_key(key.id, scopes=("inference", "key:read"))  # a later change keeps the grace
    assert (await store.key_by_secret(old)).previous_expires_at == after.previous_expires_at  # type: ignore[union-attr]

    again = await store.rotate_key(key.id, timedelta(0))  # a second rotation, without grace: both old ones end
    assert again is not None
    assert await store.key_by_secret(old) is None
    assert await store.key_by_secret(new) is None  # without a grace, no previous secret is kept
    assert (await store.key_by_secret(again[1])).active(NOW)  # type: ignore[union-attr]
    assert await store.rotate_key("key_missing", timedelta(0)) is None
    await store.set_workspace_revoked(ws.id, True)
    with pytest.raises(WorkspaceRevoked):
        await store.rotate_key(key.id, timedelta(0))


async def test_only_hashes_of_rotated_secrets_are_stored(store: Store, backend: Backend) -> None:
    ws = await store.create_workspace("w")
    key, old = await store.create_key(ws.id, "svc", ("inference",))
    _, new = await store.rotate_key(key.id, timedelta(hours=1))  # type: ignore[misc]
    cells = [str(v) for _, v in await backend.cells()]
    assert not any(old in c or new in c for c in cells)
    assert hashlib.sha256(old.encode()).hexdigest() in cells and hashlib.sha256(new.encode()).hexdigest() in cells


async def test_touch_keys(store: Store) -> None:
    ws = await store.create_workspace("w")
    a, _ = await store.create_key(ws.id, "a", ("inference",))
    b, _ = await store.create_key(ws.id, "b", ("inference",))
    t1, t2 = NOW + timedelta(seconds=1), NOW + timedelta(seconds=2)
    await store.touch_keys({})
    await store.touch_keys({a.id: t2, b.id: t1, "key_missing": t1})
    await store.touch_keys({a.id: t1})  # older: ignored
    assert [(await store.get_key(k.id)).last_used_at for k in (a, b)] == [t2, t1]  # type: ignore[union-attr]
