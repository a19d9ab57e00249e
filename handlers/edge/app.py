"""The app factory: Connexion routes by the spec; our own code authenticates, validates and answers errors.

How Connexion is set up (and which of its internals that takes) is all in handlers/edge/connexion_adapter.py.
"""

from __future__ import annotations

import logging

from starlette.exceptions import HTTPException

from generated import routes
from generated.config import Config
from handlers.edge import paths
from handlers.edge.connexion_adapter import Refusal, build_connexion_app
from handlers.edge.middleware import Edge
from handlers.errors import ApiError
from handlers.gateway import Gateway

log = logging.getLogger("specway")

_CODES = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed", 406: "not_acceptable",
          413: "request_too_large", 415: "unsupported_media_type"}


def _on_api_error(_path: str, exc: ApiError) -> ApiError:
    return exc


def _on_refusal(refusal: Refusal) -> ApiError:
    message = refusal.message or "The request could not be served."
    return ApiError(refusal.status, _CODES.get(refusal.status, "invalid_request"), message, headers=refusal.headers)


def _on_http(path: str, exc: HTTPException) -> ApiError:
    status = exc.status_code
    messages = {404: "No such path.", 405: "This path does not allow that method."}
    message = messages.get(status) or str(exc.detail)
    headers = dict(exc.headers or {})
    if status == 405:
        info = paths.match(path)
        headers["Allow"] = info.methods if info else headers.get("Allow", "")
    return ApiError(status, _CODES.get(status, "invalid_request"), message, headers=headers)


def _on_crash(_path: str, exc: Exception) -> ApiError:
    log.error("unhandled error", exc_info=exc)
    return ApiError(500, "internal_error", "The gateway failed to serve this request; it has been logged.")


def create_app(config: Config | None = None, *, gateway: Gateway | None = None) -> Edge:
    """One ASGI app: the edge (request ids, body limit) around Connexion."""
    gw = gateway or (Gateway(config) if config is not None else Gateway.from_file())
    app = build_connexion_app(
        paths.SPEC,
        resolve=lambda op_id: getattr(routes, op_id),
        lifespan=gw.lifespan,
        error_handlers={ApiError: _on_api_error, HTTPException: _on_http, Exception: _on_crash},
        on_refusal=_on_refusal,
    )
    return Edge(app, gw, spec=paths.SPEC.read_bytes())  # served as it is in the repository, $refs and names kept


def factory() -> Edge:
    """For uvicorn --factory (several workers): the config comes from $SPECWAY_CONFIG."""
    return create_app()
