"""Workspaces and keys, as the admin API and the CLI both manage them (one implementation, two doors).

Both doors pass in the generated request models (KeyCreate, KeyUpdate, WorkspaceCreate, ...) and get back the
generated response models (Key, KeyCreated, Workspace). The API passes the calling key's Authority too (who may
administer what: handlers/administration/tenancy.py); the CLI leaves it at OPERATOR.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from generated import errors as codes
from generated import models as api
from generated.scopes import DEFAULT_SCOPES
from handlers.administration.tenancy import OPERATOR, Authority
from handlers.errors import ApiError, bad_request, not_found
from handlers.store.base import Key, Limits, Refused, Store, Workspace, WorkspaceRevoked
from handlers.store.values import money_text, utc

if TYPE_CHECKING:
    from handlers.inference.catalog import Catalog


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def workspace_out(ws: Workspace) -> api.Workspace:
    """A stored workspace as the API shows it."""
    return api.Workspace(id=ws.id, object="workspace", name=ws.name,
                         state="active" if ws.revoked_at is None else "revoked", credit=money_text(ws.credit),
                         reserved=money_text(ws.reserved), spend_total=money_text(ws.spend_total),
                         created_at=_iso(ws.created_at), revoked_at=_iso(ws.revoked_at))


def _limits_out(limits: Limits) -> api.KeyLimits:
    return api.KeyLimits(budget=None if limits.budget is None else money_text(limits.budget),
                         budget_period=limits.budget_period, rpm=limits.rpm, tpm=limits.tpm)


def _spend_out(key: Key) -> api.KeySpend:
    return api.KeySpend(total=money_text(key.spend_total), period=money_text(key.spend_period),
                        period_start=_iso(key.period_start), reserved=money_text(key.reserved))


def rotation_out(key: Key) -> api.KeyRotation | None:
    """The rotation in its grace period, if one is."""
    if key.rotated_at is None or not key.rotating(datetime.now(UTC)):
        return None
    return api.KeyRotation(rotated_at=_iso(key.rotated_at), previous_secret_expires_at=_iso(key.previous_expires_at))


def key_out(key: Key) -> api.Key:
    """A stored key as the API shows it (never its secret)."""
    return api.Key(
        id=key.id, object="key", name=key.name, hint=key.hint, workspace_id=key.workspace_id,
        scopes=list(key.scopes), models=None if key.models is None else list(key.models),
        policy=key.policy, expires_at=_iso(key.expires_at), created_at=_iso(key.created_at),
        last_used_at=_iso(key.last_used_at), revoked_at=_iso(key.revoked_at),
        limits=_limits_out(key.limits), spend=_spend_out(key), rotation=rotation_out(key),
    )


async def workspace(store: Store, workspace_id: str, actor: Authority = OPERATOR) -> Workspace:
    """The workspace, or 404; one the actor does not administer is answered as if it did not exist."""
    ws = await store.get_workspace(workspace_id) if actor.sees(workspace_id) else None
    if ws is None:
        raise not_found(f"No workspace {workspace_id!r}.", codes.WORKSPACE_NOT_FOUND)
    return ws


def _key_found(found: Key | None, key_id: str, actor: Authority = OPERATOR) -> Key:
    if found is None or not actor.sees(found.workspace_id):
        raise not_found(f"No key {key_id!r}.", codes.KEY_NOT_FOUND)
    return found


async def key(store: Store, key_id: str, actor: Authority = OPERATOR) -> Key:
    return _key_found(await store.get_key(key_id), key_id, actor)


async def list_workspaces(store: Store, actor: Authority = OPERATOR) -> list[Workspace]:
    if actor.workspace_id is None:
        return await store.list_workspaces()
    own = await store.get_workspace(actor.workspace_id)
    return [] if own is None else [own]


async def list_keys(store: Store, workspace_id: str | None, actor: Authority = OPERATOR) -> list[Key]:
    """The keys the actor administers, of one workspace if given (another's or an unknown one: none)."""
    if workspace_id is not None and not actor.sees(workspace_id):
        return []
    return await store.list_keys(actor.workspace_id if workspace_id is None else workspace_id)


def scopes(values: list[api.Scope], actor: Authority = OPERATOR) -> tuple[str, ...]:
    actor.check_grants((s.root for s in values), "scopes")
    return tuple(dict.fromkeys(s.root for s in values))  # in order, once each


def _new_key_scopes(body: api.KeyCreate, actor: Authority) -> tuple[str, ...]:
    if "scopes" in body.model_fields_set:
        return scopes(body.scopes, actor)
    return tuple(s for s in DEFAULT_SCOPES if actor.may_grant(s))  # the defaults the actor holds


def models(catalog: Catalog, values: list[str] | None) -> tuple[str, ...] | None:
    if values is None:
        return None
    for i, name in enumerate(values):
        if catalog.resolve(name) is None:
            raise not_found(f"No model or alias named {name!r} in the catalog.", codes.MODEL_NOT_FOUND, f"models.{i}")
    return tuple(dict.fromkeys(values))


def policy(policies: Mapping[str, object], name: str | None) -> str | None:
    if name is not None and name not in policies:
        known = ", ".join(sorted(policies))
        raise not_found(f"No routing policy named {name!r}; known: {known}.", codes.POLICY_NOT_FOUND, "policy")
    return name


def limits(given: api.KeyLimitsInput | None, current: Limits | None = None) -> Limits | None:
    """Limits from a request body; fields it leaves out keep their current values."""
    if given is None:
        return current
    raw = given.model_dump(exclude_unset=True)
    base = current or Limits()
    budget = raw.get("budget", base.budget)
    return Limits(
        budget=None if budget is None else Decimal(str(budget)),
        budget_period=raw.get("budget_period", base.budget_period),
        rpm=raw.get("rpm", base.rpm),
        tpm=raw.get("tpm", base.tpm),
    )


def _expiry(at: datetime | None) -> datetime | None:
    """A key's expires_at in UTC (without an offset: UTC already), refused by name when it is no time once in UTC
    (0001-01-01T00:30:00+01:00)."""
    if at is None:
        return None
    try:
        return utc(at)
    except OverflowError:
        raise bad_request(f"expires_at: {at.isoformat()} is before the year 1 or after 9999 in UTC.",
                          param="expires_at") from None


async def create_key(store: Store, catalog: Catalog, policies: Mapping[str, object], body: api.KeyCreate,
                     default_workspace: str, actor: Authority = OPERATOR) -> api.KeyCreated:
    ws = await workspace(store, body.workspace_id or default_workspace, actor)
    with _unless_revoked(ws.id, "new keys"):
        key, secret = await store.create_key(
            ws.id, body.name, _new_key_scopes(body, actor), models=models(catalog, body.models),
            policy=policy(policies, body.policy), expires_at=_expiry(body.expires_at), limits=limits(body.limits),
            audit=actor.audit,
        )
    return api.KeyCreated(**key_out(key).model_dump(), secret=secret)


@contextmanager
def _unless_revoked(workspace_id: str, what: str) -> Iterator[None]:
    """The store's refusal of a change to a revoked workspace, as the API answers it."""
    try:
        yield
    except WorkspaceRevoked:
        raise ApiError(codes.WORKSPACE_REVOKED, f"Workspace {workspace_id!r} is revoked: it takes no {what} until it "
                       "is restored (POST /v1/workspaces/{id}/restore, or `specway workspaces restore`).") from None


async def update_key(store: Store, catalog: Catalog, policies: Mapping[str, object], key_id: str,
                     body: api.KeyUpdate, actor: Authority = OPERATOR) -> api.Key:
    """Change only the fields the body gives."""
    current = await key(store, key_id, actor)
    actor.check_manages(current)
    actor.check_not_self(key_id, body.model_fields_set)
    checks: dict[str, Callable[[], Any]] = {
        "name": lambda: body.name, "scopes": lambda: scopes(body.scopes, actor),
        "models": lambda: models(catalog, body.models),
        "policy": lambda: policy(policies, body.policy), "expires_at": lambda: _expiry(body.expires_at),
        "limits": lambda: limits(body.limits, current.limits),
    }
    changes = {field: check() for field, check in checks.items() if field in body.model_fields_set}
    if changes:
        current = _key_found(await store.update_key(key_id, audit=actor.audit, **changes), key_id)
    return key_out(current)


async def revoke_key(store: Store, key_id: str, actor: Authority = OPERATOR) -> api.Key:
    if actor.caller is not None:
        target = await key(store, key_id, actor)
        actor.check_manages(target)
        actor.check_not_self(key_id)
    return key_out(_key_found(await store.revoke_key(key_id, audit=actor.audit), key_id))


async def rotate_key(store: Store, key_id: str, body: api.KeyRotate, actor: Authority = OPERATOR) -> api.KeyCreated:
    """A new secret for the key; the current one stays valid for the body's grace period."""
    current = await key(store, key_id, actor)
    actor.check_manages(current)
    actor.check_not_self(key_id, ("secret",))
    with _unless_revoked(current.workspace_id, "rotated keys"):
        rotated = await store.rotate_key(key_id, timedelta(seconds=body.grace_seconds), audit=actor.audit)
    found, secret = rotated or (None, "")
    return api.KeyCreated(**key_out(_key_found(found, key_id)).model_dump(), secret=secret)


async def create_workspace(store: Store, body: api.WorkspaceCreate, actor: Authority = OPERATOR) -> api.Workspace:
    credit = money(body.credit.root if body.credit else "0", "credit")
    return workspace_out(await store.create_workspace(body.name, credit, audit=actor.audit))


async def rename_workspace(store: Store, workspace_id: str, body: api.WorkspaceUpdate,
                           actor: Authority = OPERATOR) -> api.Workspace:
    await workspace(store, workspace_id, actor)
    ws = await store.rename_workspace(workspace_id, body.name, audit=actor.audit)
    return workspace_out(ws or await workspace(store, workspace_id))


async def add_credit(store: Store, workspace_id: str, body: api.CreditAdd, actor: Authority = OPERATOR) -> api.Workspace:
    await workspace(store, workspace_id)
    amount = money(body.amount.root, "amount")
    with _unless_revoked(workspace_id, "credit"):
        try:
            ws = await store.add_credit(workspace_id, amount, audit=actor.audit)
        except Refused:
            left = (await workspace(store, workspace_id)).credit
            raise ApiError(codes.CREDIT_BELOW_ZERO, f"amount: a correction of {money_text(amount)} would take the "
                           f"credit of {workspace_id} below zero: it has {money_text(left)}, so at most "
                           f"-{money_text(left)} can be taken back.", param="amount") from None
    return workspace_out(ws or await workspace(store, workspace_id))


async def revoke_workspace(store: Store, workspace_id: str, actor: Authority = OPERATOR) -> api.Workspace:
    """Revoke the workspace: a state that refuses its keys, new keys and credit until it is restored. It stays, with
    its credit, keys and history; its keys keep their own state (one revoked by itself stays revoked on restore)."""
    ws = await workspace(store, workspace_id, actor)
    actor.check_not_own_workspace(ws.id)
    return workspace_out(await store.set_workspace_revoked(ws.id, True, audit=actor.audit) or ws)


async def restore_workspace(store: Store, workspace_id: str, actor: Authority = OPERATOR) -> api.Workspace:
    ws = await workspace(store, workspace_id)
    return workspace_out(await store.set_workspace_revoked(ws.id, False, audit=actor.audit) or ws)


def money(text: str, param: str) -> Decimal:
    try:
        return Decimal(text)
    except ArithmeticError:
        raise bad_request(f"{param} must be a decimal amount.", param) from None
