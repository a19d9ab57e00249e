"""GET /v1/usage: requests, tokens, cost and errors over a time range, from the hourly rollups."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from starlette.responses import Response

from handlers import gateway
from handlers.administration.auth import Principal
from handlers.edge.responses import json_response
from handlers.errors import ApiError, bad_request
from handlers.observability import usage

_LEAP = re.compile(r"(T\d\d:\d\d):60")


def _time(name: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:  # RFC 3339 allows a leap second, which datetime does not: it counts in its minute
        at = datetime.fromisoformat(_LEAP.sub(r"\1:59", value))
    except ValueError:
        raise bad_request(f"{name}: not an ISO 8601 date and time: {value!r}.", param=name) from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _range(start: datetime | None, end: datetime | None) -> tuple[datetime, datetime]:
    """[since, until) in whole hours: `end` rounded up (default now), `start` rounded down (default a day before
    `end`), at most MAX_RANGE long (cut at its start), never inverted (an inverted range is an empty one)."""
    until = usage.hour_ceil(end or datetime.now(UTC))
    earliest = _minus(until, usage.MAX_RANGE)
    since = usage.hour_floor(start) if start is not None else _minus(until, timedelta(hours=24))
    return min(max(since, earliest), until), until


def _minus(at: datetime, delta: timedelta) -> datetime:
    try:
        return at - delta
    except OverflowError:
        return datetime.min.replace(tzinfo=UTC)


def _scope(principal: Principal, key_id: str | None, workspace_id: str | None) -> tuple[str | None, str | None]:
    """The (workspace, key) filters the caller may read with: `admin` any, `workspace:admin` its workspace, any
    other key itself. A filter past that is a 403."""
    scopes, own_ws = principal.key.scopes, principal.workspace_id
    if "admin" in scopes:
        return workspace_id, key_id
    if workspace_id is not None and workspace_id != own_ws:
        raise ApiError(403, "insufficient_scope", "Only a key with the admin scope reads other workspaces' usage.")
    if "workspace:admin" in scopes:
        return own_ws, key_id
    if key_id is not None and key_id != principal.key.id:
        raise ApiError(403, "insufficient_scope",
                       "This key reads its own usage only; workspace:admin reads every key of its workspace.")
    return own_ws, principal.key.id


def time_range(start: str | None, end: str | None) -> tuple[datetime, datetime]:
    return _range(_time("start", start), _time("end", end))


def dimensions(group_by: str | None) -> list[str]:
    """The group_by words in order; one named twice counts once. An unknown one is a 400 (the spec says so too)."""
    dims = list(dict.fromkeys(d.strip() for d in (group_by or "").split(",") if d.strip()))
    for d in dims:
        if d not in usage.DIMENSIONS:
            raise bad_request(f"group_by: {d!r} is not one of {', '.join(usage.DIMENSIONS)}.", param="group_by")
    return dims


async def get_usage(principal: Principal, start: str | None = None, end: str | None = None, bucket: str = "day",
                    group_by: str | None = None, key_id: str | None = None,
                    workspace_id: str | None = None) -> Response:
    since, until = time_range(start, end)
    dims = dimensions(group_by)
    ws, key = _scope(principal, key_id, workspace_id)
    gw = gateway.current()
    await gw.write()  # what this process answered so far counts too
    rows = await gw.store.usage(since, until, ws, key)
    return json_response(usage.report(rows, since, until, bucket or "day", dims))
