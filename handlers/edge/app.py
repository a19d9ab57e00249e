"""The app factory: Connexion routes by the spec; our own code authenticates, validates and answers errors.

How Connexion is set up (and which of its internals that takes) is all in handlers/edge/connexion_adapter.py.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from connexion import context
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp

from generated import errors as codes
from generated import routes
from generated.config import Config
from handlers import reloading
from handlers.console.serve import Console
from handlers.edge import paths
from handlers.edge.connexion_adapter import Refusal, build_connexion_app
from handlers.edge.middleware import Edge
from handlers.errors import ApiError
from handlers.gateway import Gateway
from handlers.observability import metrics, requestlog

log = logging.getLogger("specway")

# What Connexion's own refusals (ProblemException) and Starlette's routing (HTTPException) answer, by their status.
_CODES = {c.status: c for c in (codes.INVALID_REQUEST, codes.NOT_FOUND, codes.METHOD_NOT_ALLOWED,
                                codes.REQUEST_TOO_LARGE, codes.UNSUPPORTED_MEDIA_TYPE)}


def _code(status: int) -> codes.Code:
    return _CODES.get(status) or (codes.INTERNAL_ERROR if status >= 500 else codes.INVALID_REQUEST)


def _on_api_error(_path: str, exc: ApiError) -> ApiError:
    return exc


def _on_refusal(refusal: Refusal) -> ApiError:
    message = refusal.message or "The request could not be served."
    return ApiError(_code(refusal.status), message, headers=refusal.headers)


def _on_http(path: str, exc: HTTPException) -> ApiError:
    status = exc.status_code
    messages = {404: "No such path.", 405: "This path does not allow that method."}
    message = messages.get(status) or str(exc.detail)
    headers = dict(exc.headers or {})
    if status == 405:
        headers["Allow"] = paths.allowed(path) or headers.get("Allow", "")
    return ApiError(_code(status), message, headers=headers)


def _on_disconnect(_path: str, _exc: ClientDisconnect) -> ApiError:
    # The client went away before its request was read: nobody will read this answer, and it is not our fault. The
    # request's log line (at info) says so; no traceback.
    requestlog.add(outcome="client_disconnected")
    return ApiError(codes.CLIENT_CLOSED_REQUEST, "The client closed the connection before its request was read.")


def _on_crash(_path: str, exc: Exception) -> ApiError:
    log.error("unhandled error", exc_info=exc)
    return ApiError(codes.INTERNAL_ERROR, "The gateway failed to serve this request; it has been logged.")


def create_app(config: Config | None = None, *, gateway: Gateway | None = None) -> ASGIApp:
    """One ASGI app: the edge (request ids, body limit) around Connexion, in a server span per request when
    telemetry is on."""
    gw = gateway or (Gateway(config) if config is not None else Gateway.from_file())
    resolve = _resolver(metrics.token(gw.config.server))
    app, lane = build_connexion_app(
        paths.SPEC,
        resolve=resolve,
        lifespan=gw.lifespan,
        error_handlers={ApiError: _on_api_error, HTTPException: _on_http, ClientDisconnect: _on_disconnect,
                        Exception: _on_crash},
        on_refusal=_on_refusal,
    )
    # The spec served as it is in the repository ($refs and names kept), and the operator console.
    edge = Edge(app, gw, spec=paths.SPEC.read_bytes(), console=Console(), direct=lane)
    return _traced(edge, gw)


def _traced(edge: Edge, gw: Gateway) -> ASGIApp:
    """Outside the edge, a server span per request when telemetry.otlp_endpoint is set: only then is OpenTelemetry
    imported, and with tracing off a request goes through nothing more."""
    if gw.config.telemetry.otlp_endpoint is None:
        return edge
    import handlers.observability.tracing  # noqa: F401 - now, so that a missing otel extra stops the start here
    from handlers.edge.spans import ServerSpans

    return ServerSpans(edge, gw)


def _resolver(metrics_token: bytes | None) -> Callable[[str], Callable[..., Any]]:
    """operationId -> its generated route; GET /metrics behind its bearer token when one is configured."""

    def resolve(op_id: str) -> Callable[..., Any]:
        route: Callable[..., Any] = getattr(routes, op_id)
        if op_id != "metrics" or metrics_token is None:
            return route

        @functools.wraps(route)
        async def guarded(*args: Any, **kwargs: Any) -> Any:
            metrics.authorize(context.request.headers.get("authorization"), metrics_token)
            return await route(*args, **kwargs)

        return guarded

    return resolve


def factory() -> ASGIApp:
    """For uvicorn --factory (several workers): the config comes from $SPECWAY_CONFIG. Until the gateway listens for
    them, a reload's signals are held rather than stopping a worker that is starting (handlers/reloading.py)."""
    reloading.hold_signals()
    return create_app()
