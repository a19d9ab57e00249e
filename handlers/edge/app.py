"""The app factory: Connexion routes by the spec; our own code authenticates, validates and answers errors."""

from __future__ import annotations

import logging
from typing import Any

import connexion
from connexion.datastructures import MediaTypeDict
from connexion.exceptions import ProblemException
from connexion.lifecycle import ConnexionRequest, ConnexionResponse
from connexion.middleware.context import ContextMiddleware
from connexion.middleware.exceptions import ExceptionMiddleware
from connexion.middleware.lifespan import LifespanMiddleware
from connexion.middleware.request_validation import RequestValidationMiddleware
from connexion.middleware.routing import RoutingMiddleware
from connexion.middleware.server_error import ServerErrorMiddleware
from connexion.middleware.swagger_ui import SwaggerUIMiddleware
from connexion.options import SwaggerUIOptions
from connexion.resolver import Resolver
from connexion.validators import VALIDATOR_MAP
from starlette.exceptions import HTTPException

from generated import routes
from generated.config import Config
from handlers.edge import paths
from handlers.edge.connexion_adapter import Api
from handlers.edge.middleware import Edge
from handlers.errors import ApiError
from handlers.gateway import Gateway

log = logging.getLogger("specway")

# Connexion's own checks (path, method, content type, query parameters) stay; its per-request jsonschema body
# validation and its security layer are replaced: the generated routes parse the body once with pydantic and
# authenticate relay keys themselves.
_MIDDLEWARES = [
    ServerErrorMiddleware,
    ExceptionMiddleware,
    SwaggerUIMiddleware,
    RoutingMiddleware,
    RequestValidationMiddleware,
    LifespanMiddleware,
    ContextMiddleware,
]

_CODES = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed", 406: "not_acceptable",
          413: "request_too_large", 415: "unsupported_media_type"}


class _BodyParsedByRoute:
    """A body 'validator' that leaves the body alone: the generated route validates it with pydantic."""

    def __init__(self, **_: Any) -> None:
        pass

    async def wrap_receive(self, receive: Any, *, scope: Any) -> tuple[Any, Any]:
        return receive, scope


def _reply(err: ApiError) -> ConnexionResponse:
    return ConnexionResponse(status_code=err.status, mimetype="application/json", body=err.json(), headers=err.headers)


async def _on_api_error(_request: ConnexionRequest, exc: ApiError) -> ConnexionResponse:
    return _reply(exc)


async def _on_problem(_request: ConnexionRequest, exc: ProblemException) -> ConnexionResponse:
    status = exc.status or 500
    message = exc.detail or exc.title or "The request could not be served."
    return _reply(ApiError(status, _CODES.get(status, "invalid_request"), str(message), headers=dict(exc.headers or {})))


async def _on_http(request: ConnexionRequest, exc: HTTPException) -> ConnexionResponse:
    status = exc.status_code
    messages = {404: "No such path.", 405: "This path does not allow that method."}
    message = messages.get(status) or str(exc.detail)
    headers = dict(exc.headers or {})
    if status == 405:
        info = paths.match(request.url.path)
        headers["Allow"] = info.methods if info else headers.get("Allow", "")
    return _reply(ApiError(status, _CODES.get(status, "invalid_request"), message, headers=headers))


async def _on_crash(_request: ConnexionRequest, exc: Exception) -> ConnexionResponse:
    log.error("unhandled error", exc_info=exc)
    return _reply(ApiError(500, "internal_error", "The gateway failed to serve this request; it has been logged."))


def create_app(config: Config | None = None, *, gateway: Gateway | None = None) -> Edge:
    """One ASGI app: the edge (request ids, body limit) around Connexion."""
    gw = gateway or (Gateway(config) if config is not None else Gateway.from_file())
    app = connexion.AsyncApp(
        __name__,
        middlewares=_MIDDLEWARES,
        lifespan=gw.lifespan,
        pythonic_params=True,
        validator_map={**VALIDATOR_MAP, "body": MediaTypeDict({"*/*json": _BodyParsedByRoute})},
        swagger_ui_options=SwaggerUIOptions(swagger_ui_path="/docs"),
    )
    app._middleware_app.api_cls = Api  # operations that build their call path once (handlers/operation.py)
    app.add_api(paths.SPEC, resolver=Resolver(lambda op_id: getattr(routes, op_id)), validate_responses=False)
    app.add_error_handler(ApiError, _on_api_error)
    app.add_error_handler(ProblemException, _on_problem)
    app.add_error_handler(HTTPException, _on_http)
    app.add_error_handler(Exception, _on_crash)
    return Edge(app, gw)


def factory() -> Edge:
    """For uvicorn --factory (several workers): the config comes from $SPECWAY_CONFIG."""
    return create_app()
