"""The admin API (scope `admin`): workspaces, credit and relay keys."""

from __future__ import annotations

from starlette.responses import Response

from generated import models
from handlers import gateway
from handlers.administration import accounts as admin
from handlers.administration.auth import Principal
from handlers.edge.responses import json_response


def _body(model: models.StrictModel) -> dict[str, object]:
    return model.model_dump(exclude_unset=True)


async def list_workspaces(principal: Principal) -> Response:
    workspaces = await gateway.current().store.list_workspaces()
    return json_response({"object": "list", "data": [admin.workspace_json(w) for w in workspaces]})


async def create_workspace(principal: Principal, body: models.WorkspaceCreate) -> Response:
    ws = await admin.create_workspace(gateway.current().store, _body(body))
    return json_response(admin.workspace_json(ws), status=201)


async def get_workspace(principal: Principal, workspace_id: str) -> Response:
    return json_response(admin.workspace_json(await admin.workspace(gateway.current().store, workspace_id)))


async def update_workspace(principal: Principal, body: models.WorkspaceUpdate, workspace_id: str) -> Response:
    store = gateway.current().store
    await admin.workspace(store, workspace_id)
    ws = await store.rename_workspace(workspace_id, body.name)
    return json_response(admin.workspace_json(ws or await admin.workspace(store, workspace_id)))


async def revoke_workspace(principal: Principal, workspace_id: str) -> Response:
    gw = gateway.current()
    ws, revoked = await admin.revoke_workspace(gw.store, workspace_id)
    for key in revoked:
        gw.keys.forget(key.id)
    return json_response(admin.workspace_json(ws))


async def add_credit(principal: Principal, body: models.CreditAdd, workspace_id: str) -> Response:
    ws = await admin.add_credit(gateway.current().store, workspace_id, body.amount.root)
    return json_response(admin.workspace_json(ws))


async def list_keys(principal: Principal, workspace_id: str | None = None) -> Response:
    keys = await gateway.current().store.list_keys(workspace_id)
    return json_response({"object": "list", "data": [admin.key_json(k) for k in keys]})


async def create_key(principal: Principal, body: models.KeyCreate) -> Response:
    gw = gateway.current()
    key, secret = await admin.create_key(gw.store, gw.catalog, gw.config.policies or {}, _body(body),
                                         principal.workspace_id)
    return json_response({**admin.key_json(key), "secret": secret}, status=201)


async def get_admin_key(principal: Principal, key_id: str) -> Response:
    return json_response(admin.key_json(await admin.key(gateway.current().store, key_id)))


async def update_key(principal: Principal, body: models.KeyUpdate, key_id: str) -> Response:
    gw = gateway.current()
    key = await admin.update_key(gw.store, gw.catalog, gw.config.policies or {}, key_id, _body(body))
    gw.keys.forget(key.id)
    return json_response(admin.key_json(key))


async def revoke_key(principal: Principal, key_id: str) -> Response:
    gw = gateway.current()
    key = await admin.revoke_key(gw.store, key_id)
    gw.keys.forget(key.id)
    return json_response(admin.key_json(key))
