"""GET /healthz, /readyz and /metrics: outside relay-key auth, for load balancers and Prometheus."""

from __future__ import annotations

from starlette.responses import Response

from generated import errors as codes
from handlers import gateway
from handlers.edge.responses import json_response
from handlers.errors import ApiError
from handlers.observability import metrics as metrics_mod


async def healthz(principal: None) -> Response:
    return json_response({"status": "ok"})


async def readyz(principal: None) -> Response:
    """Ready unless a dependency requests cannot do without is away. Redis failing open is degraded, not down: a
    load balancer must not take every replica out because limits are briefly per process."""
    gw = gateway.current()
    states: dict[str, str] = {}
    for name, ping in {"store": gw.store.ping, "limits": gw.limiter.ping}.items():
        try:
            await ping()
        except Exception as exc:  # noqa: BLE001 - any failure to reach a dependency counts
            if name == "limits" and gw.limits_fail_open:
                states[name] = "unreachable, failing open"
                continue
            raise ApiError(codes.NOT_READY, f"The {name} backend cannot be reached ({type(exc).__name__}).") from None
        states[name] = "ok"
    degraded = any(state != "ok" for state in states.values())
    return json_response({"status": "degraded" if degraded else "ok", "checks": states})


async def metrics(principal: None) -> Response:
    body, content_type = metrics_mod.exposition()
    return Response(body, media_type=content_type)
