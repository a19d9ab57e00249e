"""Every use of Connexion's internals, here and in handlers/edge/connexion_checks.py (its request checks); the rest of
the app calls `build_connexion_app`.

Checked against Connexion 3.3.0 (read in .venv/lib/python3.11/site-packages/connexion). On an upgrade, re-read the
pieces below; each names what it relies on and why it exists:

- `_MIDDLEWARES` replaces `ConnexionMiddleware.default_middlewares` (middleware/main.py) through the public
  `middlewares=` argument, but lists Connexion's own middleware classes. It drops `SecurityMiddleware` (the generated
  routes authenticate relay keys themselves, handlers/edge/glue.py) and `ResponseValidationMiddleware` (responses
  are built from generated models; `validate_responses` is off anyway). Path, method, content type and query
  parameters are still checked by Connexion.
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
- `_Operation.__call__` overrides `AsyncOperation.__call__`: a route function that takes no argument (no path or
  query parameter; the generated routes read headers and body themselves) is awaited directly, without the
  parameter decorator (`prep_kwargs`, a `deepcopy` of the query defaults per call) and the request Connexion builds
  for it; what it returns is converted as `AsyncResponseDecorator` does. `current_request()` reads the context
  variables `ContextMiddleware` sets (`connexion.context._scope`, `_receive`): `connexion.context.request` would build
  a new request (and parse its headers again) on every attribute access.
- `_index` turns the router of the API mounted in `RoutingMiddleware` (`RoutingAPI.router`) into an
  `_IndexedRouter` by assigning its class (Connexion builds it in `RoutingMiddleware.add_api`, with no hook for
  the class): Starlette's `Router.app` tries every route's pattern on every request; this one tries only those
  whose pattern matches the path. It relies on `Route.path_regex`, `Mount.path_regex`, `Router.middleware_stack`
  being the router's own `app` when it has no middleware, and `starlette.routing.get_route_path`.
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
- `DirectLane` serves the operations at a fixed path whose route takes no argument (chat, messages, count_tokens,
  responses, embeddings) without the middleware layers that do nothing for them, with the same checks, context and
  error handlers (tests/test_direct_lane.py sends every kind of request both ways and compares the answers). It
  builds Connexion's middleware stack at once (`ConnexionMiddleware._build_middleware_stack`, which Connexion
  otherwise runs on its first call) and takes from it the `CheckedOperation` and `_Operation` of each operation
  (`RoutedMiddleware.apis`, `RoutedAPI.operations`); it sets the context variables `ContextOperation.__call__` sets
  (`connexion.context._context`, `_operation`, `_receive`, `_scope`), and reads the paths from
  `ConnexionMiddleware.apis[0].specification.raw`. An exception after the answer started is raised as Starlette's
  `wrap_app_handling_exceptions` raises it.
- Error handlers: Connexion calls them with a `ConnexionRequest` and expects a `ConnexionResponse`; its own request
  checks raise `ProblemException`. Ours see only the request path and the exception and return an `ApiError`, and
  a `ProblemException` reaches them as a `Refusal`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import connexion
import orjson
from connexion import context
from connexion.apps.asynchronous import AsyncApi, AsyncASGIApp, AsyncOperation
from connexion.context import _receive, _scope
from connexion.datastructures import MediaTypeDict
from connexion.decorators import StarletteDecorator
from connexion.decorators.response import AsyncResponseDecorator
from connexion.exceptions import ProblemException
from connexion.frameworks.starlette import Starlette as StarletteFramework
from connexion.lifecycle import ConnexionRequest, ConnexionResponse
from connexion.middleware.context import ContextMiddleware
from connexion.middleware.exceptions import ExceptionMiddleware
from connexion.middleware.lifespan import LifespanMiddleware
from connexion.middleware.routing import RoutingMiddleware
from connexion.middleware.server_error import ServerErrorMiddleware
from connexion.middleware.swagger_ui import SwaggerUIMiddleware
from connexion.operations import AbstractOperation
from connexion.options import SwaggerUIOptions
from connexion.resolver import Resolver
from connexion.spec import OpenAPISpecification
from connexion.uri_parsing import AbstractURIParser
from connexion.validators import VALIDATOR_MAP
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount, Route, Router, get_route_path

from generated import openapi_checked
from handlers.edge import paths
from handlers.edge.connexion_checks import BodyParsedByRoute, CheckedOperation, Checking, NamedParameters
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
        for route in self.router.routes:
            if isinstance(route, Mount) and type(route.app) is Router:
                _index(route.app)


_PATHS_KEPT = 4096  # request paths whose candidate routes are remembered (scanners send endless distinct paths)


class _IndexedRouter(Router):
    """A Router that tries only the routes whose pattern matches the request's path, in their order (found once per
    path): the same first full match, or first partial one (a 405), as trying all of them; anything else goes to
    Starlette's own `Router.app` (redirects are off, then its default)."""

    _candidates: dict[str, list[BaseRoute]]

    def _for(self, path: str) -> list[BaseRoute]:
        found = self._candidates.get(path)
        if found is None:
            found = [r for r in self.routes if not isinstance(r, Route | Mount) or r.path_regex.match(path)]
            if len(self._candidates) < _PATHS_KEPT:
                self._candidates[path] = found
        return found

    async def app(self, scope: Any, receive: Any, send: Any) -> None:  # type: ignore[override]
        if scope["type"] != "http":
            await super().app(scope, receive, send)
            return
        scope.setdefault("router", self)
        partial = None
        for route in self._for(get_route_path(scope)):
            match, child_scope = route.matches(scope)
            if match is Match.FULL:
                scope["route"] = route
                scope.update(child_scope)
                await route.handle(scope, receive, send)
                return
            if match is Match.PARTIAL and partial is None:
                partial, partial_scope = route, child_scope
        if partial is not None:
            scope["route"] = partial
            scope.update(partial_scope)
            await partial.handle(scope, receive, send)
            return
        await super().app(scope, receive, send)


def _index(router: Router) -> None:
    """Make one of Connexion's routers an _IndexedRouter (Connexion builds them; it has no hook for the class)."""
    plain = router.middleware_stack == router.app  # no Starlette middleware around it: its stack is its app
    router.__class__ = _IndexedRouter
    router._candidates = {}  # type: ignore[attr-defined]
    if plain:
        router.middleware_stack = router.app


_MIDDLEWARES = [
    ServerErrorMiddleware,
    ExceptionMiddleware,
    _SwaggerUI,
    _Routing,
    Checking,
    LifespanMiddleware,
    ContextMiddleware,
]


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

    @functools.cached_property
    def _takes_nothing(self) -> bool:
        """A route function without parameters (no path or query parameter to pass) is called as it is."""
        fn = inspect.unwrap(self._fn)
        return asyncio.iscoroutinefunction(fn) and not inspect.signature(fn).parameters

    @functools.cached_property
    def _responses(self) -> AsyncResponseDecorator:
        return AsyncResponseDecorator(framework=StarletteFramework, jsonifier=self.jsonifier)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._takes_nothing:
            response = await self._fn()
            if isinstance(response, ConnexionResponse):
                response = StarletteFramework.connexion_to_framework_response(response)
            elif not isinstance(response, Response):
                response = self._responses.build_framework_response(response)  # what Connexion's decorator does
        else:
            response = await self.fn()
        await response(scope, receive, send)


class _Api(AsyncApi):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _no_slash_redirects(self.router)

    def make_operation(self, operation: AbstractOperation) -> _Operation:
        return _Operation.from_operation(operation, pythonic_params=self.pythonic_params, jsonifier=self.jsonifier)


class DirectLane:
    """The operations at a fixed path whose route takes no argument (the inference ones), served without the layers
    that do nothing for them: Swagger UI's router, routing by pattern (the path is exact), Lifespan's pass-through.
    What those layers do for them is done here as they do it: the same CheckedOperation checks the parameters and
    the content type, the context variables are set as ContextMiddleware sets them, the same _Operation is called,
    and an exception raised before the answer started becomes the ApiError its error handler makes (after the
    start, it goes to the server, as Starlette's handlers let it). A request with a query string or a root path, or
    whose body a validator other than the route's own would read, goes the whole way through Connexion."""

    def __init__(self, app: connexion.AsyncApp, handlers: Mapping[type[Exception], ErrorHandler]) -> None:
        middleware = app.middleware
        if middleware.middleware_stack is None:  # Connexion builds it on its first call otherwise
            middleware.app, middleware.middleware_stack = middleware._build_middleware_stack()
        stack = list(middleware.middleware_stack)
        checks = _operations(next(m for m in stack if isinstance(m, Checking)))
        calls = _operations(next(m for m in stack if isinstance(m, AsyncASGIApp)))
        self._handlers = handlers
        self._ops: dict[tuple[str, str], tuple[CheckedOperation, _Operation]] = {}
        for path, methods in app.middleware.apis[0].specification.raw["paths"].items():
            for method, operation in methods.items() if "{" not in path else ():
                op_id = operation.get("operationId") if isinstance(operation, dict) else None
                check, call = checks.get(op_id), calls.get(op_id)
                if isinstance(check, CheckedOperation) and isinstance(call, _Operation) and call._takes_nothing:
                    self._ops[path, method.upper()] = (check, call)

    def paths(self) -> frozenset[tuple[str, str]]:
        """(path, method) of every operation served here."""
        return frozenset(self._ops)

    def get(self, scope: Any) -> Callable[[Any, Any, Any], Any] | None:
        """The lane for this request, or None: Connexion serves it."""
        found = self._ops.get((scope["path"], scope["method"]))
        if found is None or scope.get("query_string") or scope.get("root_path"):
            return None
        check, call = found
        mime_type, _ = check.extract_content_type(scope["headers"])
        if not check._leaves_body(mime_type):
            return None
        return functools.partial(self._serve, check, call, mime_type)

    async def _serve(self, check: CheckedOperation, call: _Operation, mime_type: str,
                     scope: Any, receive: Any, send: Any) -> None:
        started = False

        async def sending(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            check._parameters.validate(scope)
            check.validate_mime_type(mime_type)
            context._context.set({})
            context._operation.set(call)
            _receive.set(receive)
            _scope.set(scope)
            await call(scope, receive, sending)
        except Exception as exc:
            handler = next((self._handlers[c] for c in type(exc).__mro__ if c in self._handlers), None)
            if handler is None:
                raise
            if started:  # as Starlette's exception handling says it
                raise RuntimeError("Caught handled exception, but response already started.") from exc
            raise handler(scope["path"], exc) from None


def _operations(middleware: Any) -> dict[str, Any]:
    """A Connexion middleware's operations by operationId (the APIs at the root path: the spec has no base path)."""
    return {op_id: op for api in middleware.apis.get("", []) for op_id, op in api.operations.items()}


def current_request() -> Request:
    """The request of the operation being called (the scope and receive channel ContextMiddleware set)."""
    return Request(_scope.get(), _receive.get())


def build_connexion_app(spec: Path, *, resolve: Callable[[str], Callable[..., Any]], lifespan: Lifespan,
                        error_handlers: Mapping[type[Exception], ErrorHandler],
                        on_refusal: Callable[[Refusal], ApiError], docs_path: str = "/docs"
                        ) -> tuple[connexion.AsyncApp, DirectLane]:
    """Connexion routing `spec` to `resolve(operationId)`, every error answered through our handlers, and the direct
    lane of its fixed-path operations."""
    app = connexion.AsyncApp(
        __name__,
        middlewares=_MIDDLEWARES,
        lifespan=lifespan,
        pythonic_params=True,
        validator_map={**VALIDATOR_MAP, "parameter": NamedParameters,
                       "body": MediaTypeDict({"*/*json": BodyParsedByRoute})},
        # The edge serves /openapi.json itself (the bundled file, not Connexion's ref-inlined copy); Swagger UI
        # still points at /openapi.json.
        swagger_ui_options=SwaggerUIOptions(swagger_ui_path=docs_path, serve_spec=False),
    )
    app._middleware_app.api_cls = _Api
    _no_slash_redirects(app._middleware_app.router)
    raw = spec.read_bytes()
    with _validated_by_generator(raw):
        app.add_api(orjson.loads(raw), resolver=Resolver(resolve), validate_responses=False)
    handlers: dict[type[Exception], ErrorHandler] = {
        ProblemException: lambda _path, exc: on_refusal(_refusal(exc)), **error_handlers}
    for exc_type, handler in handlers.items():
        app.add_error_handler(exc_type, _answer(handler))
    return app, DirectLane(app, handlers)


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
