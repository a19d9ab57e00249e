"""GET /v1/usage: requests, tokens, cost and errors over a time range, from the hourly rollups."""

from __future__ import annotations

from starlette.responses import Response

from generated import errors as codes
from generated.scopes import ADMIN, WORKSPACE_ADMIN
from handlers import gateway
from handlers.administration.auth import Principal
from handlers.edge.responses import json_response
from handlers.errors import ApiError
from handlers.observability import usage


def _scope(principal: Principal, key_id: str | None, workspace_id: str | None) -> tuple[str | None, str | None]:
    """The (workspace, key) filters the caller may read with: `admin` any, `workspace:admin` its workspace, any
    other key itself. A filter past that is a 403."""
    scopes, own_ws = principal.key.scopes, principal.workspace_id
    if ADMIN in scopes:
        return workspace_id, key_id
    if workspace_id is not None and workspace_id != own_ws:
        raise ApiError(codes.INSUFFICIENT_SCOPE, "Only a key with the admin scope reads other workspaces' usage.")
    if WORKSPACE_ADMIN in scopes:
        return own_ws, key_id
    if key_id is not None and key_id != principal.key.id:
        raise ApiError(codes.INSUFFICIENT_SCOPE,
                       "This key reads its own usage only; workspace:admin reads every key of its workspace.")
    return own_ws, principal.key.id


async def get_usage(principal: Principal, start: str | None = None, end: str | None = None, bucket: str = "day",
                    group_by: str | None = None, key_id: str | None = None,
                    workspace_id: str | None = None) -> Response:
    since, until = usage.time_range(start, end)
    dims = usage.dimensions(group_by)
    ws, key = _scope(principal, key_id, workspace_id)
    gw = gateway.current()
    await gw.write()  # what this process answered so far counts too
    rows = await gw.store.usage(since, until, ws, key)
    return json_response(usage.report(rows, since, until, bucket or "day", dims))
