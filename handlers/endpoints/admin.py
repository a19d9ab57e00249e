"""The admin API: workspaces, credit and relay keys, for `admin` (every workspace) and `workspace:admin` (its own).

Who may reach what is decided in handlers/administration (accounts and tenancy), from the calling key's Authority.
"""

from __future__ import annotations

from starlette.responses import Response

from generated import models
from handlers import gateway
from handlers.administration import accounts as admin
from handlers.administration import audit
from handlers.administration.auth import Principal
from handlers.administration.tenancy import Authority
from handlers.edge.responses import model_response


def _actor(principal: Principal) -> Authority:
    return Authority(principal.key)


async def list_workspaces(principal: Principal) -> Response:
    await gateway.current().ledger.write_now()
    workspaces = await admin.list_workspaces(gateway.current().store, _actor(principal))
    return model_response(models.WorkspaceList(object="list", data=[admin.workspace_out(w) for w in workspaces]))


async def create_workspace(principal: Principal, body: models.WorkspaceCreate) -> Response:
    return model_response(await admin.create_workspace(gateway.current().store, body, _actor(principal)), status=201)


async def get_workspace(principal: Principal, workspace_id: str) -> Response:
    await gateway.current().ledger.write_now()
    ws = await admin.workspace(gateway.current().store, workspace_id, _actor(principal))
    return model_response(admin.workspace_out(ws))


async def update_workspace(principal: Principal, body: models.WorkspaceUpdate, workspace_id: str) -> Response:
    return model_response(await admin.rename_workspace(gateway.current().store, workspace_id, body, _actor(principal)))


async def revoke_workspace(principal: Principal, workspace_id: str) -> Response:
    gw = gateway.current()
    ws = await admin.revoke_workspace(gw.store, workspace_id, _actor(principal))
    gw.keys.forget_workspace(ws.id)  # at once here; other processes within server.key_cache_seconds
    return model_response(ws)


async def restore_workspace(principal: Principal, workspace_id: str) -> Response:
    gw = gateway.current()
    ws = await admin.restore_workspace(gw.store, workspace_id, _actor(principal))
    gw.keys.forget_workspace(ws.id)
    return model_response(ws)


async def add_credit(principal: Principal, body: models.CreditAdd, workspace_id: str) -> Response:
    return model_response(await admin.add_credit(gateway.current().store, workspace_id, body, _actor(principal)))


async def list_keys(principal: Principal, workspace_id: str | None = None) -> Response:
    await gateway.current().ledger.write_now()
    keys = await admin.list_keys(gateway.current().store, workspace_id, _actor(principal))
    return model_response(models.KeyList(object="list", data=[admin.key_out(k) for k in keys]))


async def create_key(principal: Principal, body: models.KeyCreate) -> Response:
    gw = gateway.current()
    created = await admin.create_key(gw.store, gw.catalog, gw.config.policies, body, principal.workspace_id,
                                     _actor(principal))
    return model_response(created, status=201)


async def get_admin_key(principal: Principal, key_id: str) -> Response:
    await gateway.current().ledger.write_now()
    return model_response(admin.key_out(await admin.key(gateway.current().store, key_id, _actor(principal))))


async def update_key(principal: Principal, body: models.KeyUpdate, key_id: str) -> Response:
    gw = gateway.current()
    key = await admin.update_key(gw.store, gw.catalog, gw.config.policies, key_id, body, _actor(principal))
    gw.keys.forget(key.id)
    return model_response(key)


async def revoke_key(principal: Principal, key_id: str) -> Response:
    gw = gateway.current()
    key = await admin.revoke_key(gw.store, key_id, _actor(principal))
    gw.keys.forget(key.id)
    return model_response(key)


async def rotate_key(principal: Principal, body: models.KeyRotate, key_id: str) -> Response:
    gw = gateway.current()
    rotated = await admin.rotate_key(gw.store, key_id, body, _actor(principal))
    gw.keys.forget(rotated.id)
    return model_response(rotated)


async def list_audit(principal: Principal, limit: int | None = None, cursor: str | None = None,
                     workspace_id: str | None = None, key_id: str | None = None, action: str | None = None,
                     target_id: str | None = None, since: str | None = None, until: str | None = None) -> Response:
    found, next_cursor = await audit.page(gateway.current().store, _actor(principal), limit=limit, cursor=cursor,
                                          workspace_id=workspace_id, key_id=key_id, action=action,
                                          target_id=target_id, since=since, until=until)
    return model_response(audit.list_out(found, next_cursor))


async def reload_config(principal: Principal) -> Response:
    return model_response(await gateway.current().reload(_actor(principal)))
