"""Connexion's per-operation call path, built once instead of on every request.

Connexion 3.3 rebuilds an operation's decorator stack (its parameter and response decorators, the inspection of the
route function's arguments) and its URI parser on every call: `AsyncOperation.fn` is a property, and the
decorator's wrapper calls `decorate()` each time. Both depend only on the route function and the operation, which
are fixed once the spec is loaded, so here they are built on the first call and kept. What the route function
receives is unchanged: Connexion's own decorators still parse path and query parameters.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from connexion import context
from connexion.apps.asynchronous import AsyncApi, AsyncOperation
from connexion.decorators import StarletteDecorator
from connexion.operations import AbstractOperation
from connexion.uri_parsing import AbstractURIParser


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


class Operation(AsyncOperation):
    @functools.cached_property
    def fn(self) -> Callable[..., Any]:  # type: ignore[override]
        return _Decorator(pythonic_params=self.pythonic_params, jsonifier=self.jsonifier)(self._fn)


class Api(AsyncApi):
    def make_operation(self, operation: AbstractOperation) -> Operation:
        return Operation.from_operation(operation, pythonic_params=self.pythonic_params, jsonifier=self.jsonifier)
