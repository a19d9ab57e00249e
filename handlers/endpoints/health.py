"""GET /healthz and /readyz: outside relay-key auth, for load balancers."""

from __future__ import annotations

from starlette.responses import Response

from handlers import gateway
from handlers.errors import ApiError
from handlers.http import json_response


async def healthz(principal: None) -> Response:
    return json_response({"status": "ok"})


async def readyz(principal: None) -> Response:
    gw = gateway.current()
    checks = {"store": gw.store.ping, "limits": gw.limiter.ping}
    states: dict[str, str] = {}
    for name, ping in checks.items():
        try:
            await ping()
        except Exception as exc:  # any failure to reach a dependency means not ready; say which, not why in detail
            raise ApiError(503, "not_ready", f"The {name} backend cannot be reached ({type(exc).__name__}).") from None
        states[name] = "ok"
    return json_response({"status": "ok", "checks": states})
