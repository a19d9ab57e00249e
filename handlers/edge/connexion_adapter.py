"""Every use of Connexion's internals, in one place; the rest of the app calls `build_connexion_app`.

Checked against Connexion 3.3.0 (read in .venv/lib/python3.11/site-packages/connexion). On an upgrade, re-read the
pieces below; each names what it relies on and why it exists:

- `_MIDDLEWARES` replaces `ConnexionMiddleware.default_middlewares` (middleware/main.py) through the public
  `middlewares=` argument, but lists Connexion's own middleware classes. It drops `SecurityMiddleware` (the generated
  routes authenticate relay keys themselves, handlers/edge/glue.py) and `ResponseValidationMiddleware` (responses
  are built from generated models; `validate_responses` is off anyway). Path, method, content type and query
  parameters are still checked by Connexion.
- `_BodyParsedByRoute` replaces the `"*/*json"` entry of `validators.VALIDATOR_MAP["body"]`.
  `RequestValidationOperation.__call__` (middleware/request_validation.py) builds it with keyword arguments and
  awaits `wrap_receive(receive, scope=scope)`; ours returns both untouched, so the body is parsed once, with
  pydantic, by the generated route instead of also by jsonschema.
- `app._middleware_app.api_cls = _Api` (private): `AsyncApp` builds its `AsyncASGIApp` before any API is added, and
  `RoutedMiddleware.add_api` (middleware/abstract.py) instantiates `self.api_cls`; there is no public hook for it.
- `_Api`, `_Operation`, `_Decorator` subclass `AsyncApi`, `AsyncOperation` and `StarletteDecorator`
  (apps/asynchronous.py, decorators/main.py). Connexion rebuilds an operation's decorator stack (its parameter and
  response decorators, the inspection of the route function's arguments) and its URI parser on every call:
  `AsyncOperation.fn` is a property, and `ASGIDecorator.__call__`'s wrapper calls `decorate()` each time. Both
  depend only on the route function and the operation, fixed once the spec is loaded, so here they are built on the
  first call and kept. They rely on `AsyncOperation._fn`, `BaseDecorator.decorate`, `BaseDecorator.uri_parser`
  (which reads `connexion.context.operation`, hence built on the first call) and `framework.get_request`. What the
  route function receives is unchanged: Connexion's own decorators still parse path and query parameters.
- `SwaggerUIOptions(serve_spec=False)`: Connexion would serve `/openapi.json` (and `/openapi.yaml`) from its
  resolved spec, every `$ref` inlined (middleware/swagger_ui.py `_spec_for_prefix`); the edge serves the bundled
  file instead (handlers/edge/middleware.py). Swagger UI's page still loads `{base_path}/openapi.json`.
- `_SwaggerUI`, `_Routing` and `_Api` turn off `redirect_slashes` on every Starlette `Router` Connexion builds
  (`SwaggerUIMiddleware.router`, `RoutingMiddleware.router` and the routers of the APIs mounted on them,
  `AsyncASGIApp.router`, `AsyncApi.router`). On a path that matches no route, Starlette would otherwise answer a 307
  to the path with its trailing slash added or removed, as an absolute URL built from the Host header
  (`GET /v1/keys/%2e%2e%2f` -> `Location: http://<any host>/v1/keys/..`); such a path is a 404 instead.
- `_validated_by_generator` hands Connexion the spec as a dict (Connexion would parse a file as YAML, in pure
  Python: about a second for ours) and, when the file is the one the generator wrote, skips
  `Specification._validate_spec` (spec.py; another ~0.4 s) by shadowing it on `OpenAPISpecification` while the API is
  added: the generator ran that same validation (`Specification.from_dict`) on the bundle whose digest
  generated/openapi_checked.py holds. Any other file is validated as Connexion always does.
- Error handlers: Connexion calls them with a `ConnexionRequest` and expects a `ConnexionResponse`; its own request
  checks raise `ProblemException`. Ours see only the request path and the exception and return an `ApiError`, and
  a `ProblemException` reaches them as a `Refusal`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import connexion
import orjson
from connexion import context
from connexion.apps.asynchronous import AsyncApi, AsyncOperation
from connexion.datastructures import MediaTypeDict
from connexion.decorators import StarletteDecorator
from connexion.exceptions import ProblemException
from connexion.lifecycle import ConnexionRequest, ConnexionResponse
from connexion.middleware.context import ContextMiddleware
from connexion.middleware.exceptions import ExceptionMiddleware
from connexion.middleware.lifespan import LifespanMiddleware
from connexion.middleware.request_validation import RequestValidationMiddleware
from connexion.middleware.routing import RoutingMiddleware
from connexion.middleware.server_error import ServerErrorMiddleware
from connexion.middleware.swagger_ui import SwaggerUIMiddleware
from connexion.operations import AbstractOperation
from connexion.options import SwaggerUIOptions
from connexion.resolver import Resolver
from connexion.spec import OpenAPISpecification
from connexion.uri_parsing import AbstractURIParser
from connexion.validators import VALIDATOR_MAP, ParameterValidator
from starlette.routing import Mount, Router

from generated import openapi_checked
from handlers.edge import paths
from handlers.errors import ApiError


@dataclass(frozen=True, slots=True)
class Refusal:
    """Connexion refused the request itself (a bad query parameter, content type...): a ProblemException."""

    status: int
    message: str | None
    headers: dict[str, str] = field(default_factory=dict)


# (request path, the exception) -> the error to answer with. Typed loosely: each handler takes its own exception type.
ErrorHandler = Callable[[str, Any], ApiError]
Lifespan = Callable[[Any], AbstractAsyncContextManager[None]]


def _no_slash_redirects(router: Router) -> None:
    """No redirect built from the Host header: a router, and the routers mounted in it, never add or drop a slash."""
    router.redirect_slashes = False
    for route in router.routes:
        if isinstance(route, Mount) and isinstance(route.app, Router):
            _no_slash_redirects(route.app)


class _SwaggerUI(SwaggerUIMiddleware):
    def add_api(self, *args: Any, **kwargs: Any) -> None:
        super().add_api(*args, **kwargs)
        _no_slash_redirects(self.router)


class _Routing(RoutingMiddleware):
    def add_api(self, *args: Any, **kwargs: Any) -> None:
        super().add_api(*args, **kwargs)
        _no_slash_redirects(self.router)


_MIDDLEWARES = [
    ServerErrorMiddleware,
    ExceptionMiddleware,
    _SwaggerUI,
    _Routing,
    RequestValidationMiddleware,
    LifespanMiddleware,
    ContextMiddleware,
]


class _NamedParameters(ParameterValidator):
    """Connexion's check of path, query and header parameters, its refusal naming the parameter (Connexion says
    only what the value failed, in jsonschema's words)."""

    @staticmethod
    def validate_parameter(parameter_type: str, value: Any, param: dict[str, Any], param_name: str | None = None
                           ) -> str | None:
        error = ParameterValidator.validate_parameter(parameter_type, value, param, param_name)
        if error is None or value is None:
            return error
        return f"The {parameter_type} parameter {param.get('name', param_name)!r} is not valid: {error.splitlines()[0]}"


class _BodyParsedByRoute:
    """A body 'validator' that leaves the body alone: the generated route validates it with pydantic."""

    def __init__(self, **_: Any) -> None:
        pass

    async def wrap_receive(self, receive: Any, *, scope: Any) -> tuple[Any, Any]:
        return receive, scope


class _Decorator(StarletteDecorator):
    def __call__(self, function: Callable[..., Any]) -> Callable[..., Any]:
        decorated = self.decorate(function)
        parser: AbstractURIParser | None = None  # this operation's, made on the first call (it needs the context)

        @functools.wraps(function)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            nonlocal parser
            if parser is None:
                parser = self.uri_parser
            request = self.framework.get_request(uri_parser=parser, scope=context.scope, receive=context.receive)
            return await decorated(request)

        return wrapper


class _Operation(AsyncOperation):
    @functools.cached_property
    def fn(self) -> Callable[..., Any]:  # type: ignore[override]
        return _Decorator(pythonic_params=self.pythonic_params, jsonifier=self.jsonifier)(self._fn)


class _Api(AsyncApi):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _no_slash_redirects(self.router)

    def make_operation(self, operation: AbstractOperation) -> _Operation:
        return _Operation.from_operation(operation, pythonic_params=self.pythonic_params, jsonifier=self.jsonifier)


def build_connexion_app(spec: Path, *, resolve: Callable[[str], Callable[..., Any]], lifespan: Lifespan,
                        error_handlers: Mapping[type[Exception], ErrorHandler],
                        on_refusal: Callable[[Refusal], ApiError], docs_path: str = "/docs") -> connexion.AsyncApp:
    """Connexion routing `spec` to `resolve(operationId)`, every error answered through our handlers."""
    app = connexion.AsyncApp(
        __name__,
        middlewares=_MIDDLEWARES,
        lifespan=lifespan,
        pythonic_params=True,
        validator_map={**VALIDATOR_MAP, "parameter": _NamedParameters,
                       "body": MediaTypeDict({"*/*json": _BodyParsedByRoute})},
        # The edge serves /openapi.json itself (the bundled file, not Connexion's ref-inlined copy); Swagger UI
        # still points at /openapi.json.
        swagger_ui_options=SwaggerUIOptions(swagger_ui_path=docs_path, serve_spec=False),
    )
    app._middleware_app.api_cls = _Api
    _no_slash_redirects(app._middleware_app.router)
    raw = spec.read_bytes()
    with _validated_by_generator(raw):
        app.add_api(orjson.loads(raw), resolver=Resolver(resolve), validate_responses=False)
    app.add_error_handler(ProblemException, _answer(lambda _path, exc: on_refusal(_refusal(exc))))
    for exc_type, handler in error_handlers.items():
        app.add_error_handler(exc_type, _answer(handler))
    return app


@contextlib.contextmanager
def _validated_by_generator(raw: bytes) -> Iterator[None]:
    """Connexion's validation of the spec left out while the API is added, when `raw` is the bundle the generator
    validated with it."""
    if hashlib.sha256(raw).hexdigest() != openapi_checked.SHA256:
        yield
        return
    OpenAPISpecification._validate_spec = classmethod(lambda cls, spec: None)  # type: ignore[method-assign]
    try:
        yield
    finally:
        del OpenAPISpecification._validate_spec  # Specification's own again


def _refusal(exc: ProblemException) -> Refusal:
    message = exc.detail or exc.title
    return Refusal(exc.status or 500, str(message) if message else None, dict(exc.headers or {}))


def _answer(handler: ErrorHandler) -> Callable[[ConnexionRequest, Exception], Any]:
    async def on_error(request: ConnexionRequest, exc: Exception) -> ConnexionResponse:
        err = handler(request.url.path, exc)
        body = paths.error_json(err, request.url.path, request.method)
        return ConnexionResponse(status_code=err.status, mimetype="application/json", body=body, headers=err.headers)

    return on_error
