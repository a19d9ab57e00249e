"""Workspaces and keys, as the admin API and the CLI both manage them (one implementation, two doors)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from handlers.errors import ApiError, bad_request, not_found
from handlers.inference.catalog import Catalog
from handlers.store.base import SCOPES, Key, Limits, Store, Workspace

DEFAULT_SCOPES = ("inference", "models:read", "key:read", "explain:read")


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def workspace_json(ws: Workspace) -> dict[str, Any]:
    return {"id": ws.id, "object": "workspace", "name": ws.name, "credit": str(ws.credit),
            "reserved": str(ws.reserved), "spend_total": str(ws.spend_total), "created_at": _iso(ws.created_at)}


def limits_json(limits: Limits) -> dict[str, Any]:
    return {"budget": None if limits.budget is None else str(limits.budget), "budget_period": limits.budget_period,
            "rpm": limits.rpm, "tpm": limits.tpm}


def spend_json(key: Key) -> dict[str, Any]:
    return {"total": str(key.spend_total), "period": str(key.spend_period), "period_start": _iso(key.period_start),
            "reserved": str(key.reserved)}


def key_json(key: Key) -> dict[str, Any]:
    return {
        "id": key.id, "object": "key", "name": key.name, "hint": key.hint, "workspace_id": key.workspace_id,
        "scopes": list(key.scopes), "models": None if key.models is None else list(key.models),
        "policy": key.policy, "expires_at": _iso(key.expires_at), "created_at": _iso(key.created_at),
        "last_used_at": _iso(key.last_used_at), "revoked_at": _iso(key.revoked_at),
        "limits": limits_json(key.limits), "spend": spend_json(key),
    }


async def workspace(store: Store, workspace_id: str) -> Workspace:
    ws = await store.get_workspace(workspace_id)
    if ws is None:
        raise not_found(f"No workspace {workspace_id!r}.", code="workspace_not_found")
    return ws


def _key_found(found: Key | None, key_id: str) -> Key:
    if found is None:
        raise not_found(f"No key {key_id!r}.", code="key_not_found")
    return found


async def key(store: Store, key_id: str) -> Key:
    return _key_found(await store.get_key(key_id), key_id)


def scopes(values: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    if values is None:
        return DEFAULT_SCOPES
    unknown = [s for s in values if s not in SCOPES]
    if unknown:
        raise bad_request(f"Unknown scope(s) {', '.join(unknown)}; known: {', '.join(SCOPES)}.", param="scopes")
    return tuple(dict.fromkeys(values))  # in order, once each


def models(catalog: Catalog, values: list[str] | tuple[str, ...] | None) -> tuple[str, ...] | None:
    if values is None:
        return None
    for i, name in enumerate(values):
        if catalog.resolve(name) is None:
            raise not_found(f"No model or alias named {name!r} in the catalog.", "model_not_found", f"models.{i}")
    return tuple(dict.fromkeys(values))


def policy(policies: dict[str, Any], name: str | None) -> str | None:
    if name is not None and name not in policies:
        known = ", ".join(sorted(policies))
        raise not_found(f"No routing policy named {name!r}; known: {known}.", "policy_not_found", "policy")
    return name


def limits(raw: dict[str, Any] | None, current: Limits | None = None) -> Limits | None:
    """Limits from a request body; fields it leaves out keep their current values."""
    if raw is None:
        return current
    base = current or Limits()
    budget = raw.get("budget", base.budget)
    return Limits(
        budget=None if budget is None else Decimal(str(budget)),
        budget_period=raw.get("budget_period", base.budget_period),
        rpm=raw.get("rpm", base.rpm),
        tpm=raw.get("tpm", base.tpm),
    )


async def create_key(store: Store, catalog: Catalog, policies: dict[str, Any], fields: dict[str, Any],
                     default_workspace: str) -> tuple[Key, str]:
    ws = await workspace(store, fields.get("workspace_id") or default_workspace)
    return await store.create_key(
        ws.id, fields["name"], scopes(fields.get("scopes")), models=models(catalog, fields.get("models")),
        policy=policy(policies, fields.get("policy")), expires_at=fields.get("expires_at"),
        limits=limits(fields.get("limits")),
    )


async def update_key(store: Store, catalog: Catalog, policies: dict[str, Any], key_id: str,
                     fields: dict[str, Any]) -> Key:
    current = await key(store, key_id)
    changes: dict[str, Any] = {}
    checks = {"name": lambda v: v, "scopes": scopes, "models": lambda v: models(catalog, v),
              "policy": lambda v: policy(policies, v), "expires_at": lambda v: v,
              "limits": lambda v: limits(v, current.limits)}
    for field, check in checks.items():
        if field in fields:
            changes[field] = check(fields[field])
    if not changes:
        return current
    return _key_found(await store.update_key(key_id, **changes), key_id)


async def revoke_key(store: Store, key_id: str) -> Key:
    return _key_found(await store.revoke_key(key_id), key_id)


async def create_workspace(store: Store, fields: dict[str, Any]) -> Workspace:
    return await store.create_workspace(fields["name"], money(fields.get("credit") or "0", "credit"))


async def add_credit(store: Store, workspace_id: str, amount: str) -> Workspace:
    await workspace(store, workspace_id)
    ws = await store.add_credit(workspace_id, money(amount, "amount"))
    return ws or await workspace(store, workspace_id)


async def revoke_workspace(store: Store, workspace_id: str) -> tuple[Workspace, list[Key]]:
    """Revoke every key of the workspace; it stays, with its credit and history, for the record."""
    ws = await workspace(store, workspace_id)
    revoked = [await revoke_key(store, k.id) for k in await store.list_keys(workspace_id) if k.revoked_at is None]
    return ws, revoked


def money(text: str, param: str) -> Decimal:
    try:
        return Decimal(text)
    except ArithmeticError:
        raise ApiError(400, "invalid_request", f"{param} must be a decimal amount.", param=param) from None
