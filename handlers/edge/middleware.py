"""The edge of the app: request ids, the body's size and time limits, the gateway and its configuration bound for the
request, the spec
document and the operator console's files (handlers/console). (The limits on connections and headers sit below, in
handlers/edge/connections.py.)

`GET /openapi.json` is answered here, before Connexion, with the bundled openapi.json byte for byte (read once at
startup): Connexion would serve its resolved copy, every `$ref` inlined, and clients generated from that lose the
schema names."""

from __future__ import annotations

import asyncio
import os
import re
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from generated import errors as codes
from handlers.console.serve import PREFIX as CONSOLE
from handlers.console.serve import Console, is_console
from handlers.edge import paths
from handlers.edge.connexion_adapter import DirectLane
from handlers.errors import ApiError
from handlers.gateway import Gateway
from handlers.observability import metrics, requestlog
from handlers.steps import within

_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
SPEC_PATH = "/openapi.json"  # where the spec document is served (Swagger UI at /docs reads it)


def _too_large(limit: int) -> ApiError:
    return ApiError(codes.REQUEST_TOO_LARGE, f"The request body is over the limit of {limit} bytes.")


def _too_slow(seconds: float) -> ApiError:
    # The rest of the body may still be on its way: the connection cannot carry another request.
    return ApiError(codes.BODY_TIMEOUT, f"The request body did not arrive within {seconds:g} s.",
                    headers={"Connection": "close"})


class Edge:
    """Outermost ASGI layer. The body limits are enforced while reading: a declared Content-Length over the
    limit is refused before any byte is read, a chunked body is counted as it arrives, and the whole body must
    arrive within `server.body_timeout_seconds` of the request's start (a Content-Length that promises more than
    is sent ends there too, rather than waiting forever)."""

    def __init__(self, app: ASGIApp, gateway: Gateway, *, spec: bytes | None = None,
                 console: Console | None = None, direct: DirectLane | None = None) -> None:
        self.app = app
        self.direct = direct
        self.gateway = gateway
        self.console = console
        self.limit = gateway.config.server.body_limit_bytes
        self.body_timeout = float(gateway.config.server.body_timeout_seconds)
        self.spec = spec
        self.max_requests = gateway.config.server.max_requests
        self.serving = 0  # requests in progress in this worker, ops routes aside

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.gateway.bind()
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)
        rid = request_id.encode()
        info = paths.match(scope["path"], scope["method"])
        at_console = self.console is not None and is_console(scope["path"])
        route = info.template if info else CONSOLE if at_console else "unmatched"
        fields: dict[str, Any] = {"request_id": request_id, "method": scope["method"], "route": route, "status": 500}
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid)]
                fields["status"] = message["status"]
            await send(message)

        token = requestlog.begin(fields)
        counted = route not in _NEVER_REFUSED
        self.serving += counted
        pinned = self.gateway.pin()  # the configuration it started on, to its last byte, whatever a reload does
        try:
            length = _content_length(scope)
            if counted and self.max_requests is not None and self.serving > self.max_requests:
                metrics.OVERLOADED.labels("requests").inc()
                await _send_error(send_with_id, _overloaded(self.max_requests), scope)
            elif length is not None and length > self.limit:
                await _send_error(send_with_id, _too_large(self.limit), scope)  # nothing of the body is read
            elif self.spec is not None and scope["path"] == SPEC_PATH:
                await _send_spec(send_with_id, scope["method"], self.spec)
            elif at_console and self.console is not None:
                try:
                    await self.console(scope, receive, send_with_id)
                except ApiError as err:
                    await _send_error(send_with_id, err, scope)
            elif (lane := self.direct.get(scope) if self.direct is not None else None) is not None:
                try:
                    await lane(scope, _reading(receive, self.limit, self.body_timeout), send_with_id)
                except ApiError as err:
                    await _send_error(send_with_id, err, scope)
            else:
                await self.app(scope, _reading(receive, self.limit, self.body_timeout), send_with_id)
        finally:
            self.gateway.unpin(pinned)
            self.serving -= counted
            fields["latency_ms"] = round((time.perf_counter() - started) * 1000, 3)
            metrics.child(metrics.REQUESTS, route, scope["method"], str(fields["status"])).inc()
            requestlog.end(token)


_NEVER_REFUSED = frozenset({"/healthz", "/readyz", "/metrics"})  # what an operator needs most when it is busy


def _overloaded(limit: int) -> ApiError:
    return ApiError(codes.OVERLOADED, f"The gateway is serving as many requests as it may ({limit}); retry shortly.",
                    headers={"Retry-After": "1"})


def _request_id(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            candidate = value.decode("latin-1")
            if _SAFE_ID.match(candidate):
                return candidate
    return os.urandom(16).hex()  # as random as uuid4().hex, without building a UUID


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _reading(receive: Receive, limit: int, timeout: float) -> Receive:
    """receive, with the body counted against `limit` and due within `timeout`. Once the body is in, what comes
    is only a disconnect, which may be awaited for a whole stream: no deadline then."""
    seen = 0
    deadline: float | None = asyncio.get_running_loop().time() + timeout

    async def wrapped() -> Message:
        nonlocal seen, deadline
        if deadline is None:
            return await receive()
        try:
            message = await within(deadline, receive())
        except TimeoutError:
            raise _too_slow(timeout) from None
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise _too_large(limit)
            if not message.get("more_body", False):
                deadline = None
        else:
            deadline = None
        return message

    return wrapped


async def _send_error(send: Send, err: ApiError, scope: Scope) -> None:
    body = paths.error_json(err, scope["path"], scope["method"])
    headers: list[Any] = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                          *((name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in err.headers.items())]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})



async def _send_spec(send: Send, method: str, spec: bytes) -> None:
    if method not in ("GET", "HEAD"):
        err = ApiError(codes.METHOD_NOT_ALLOWED, "This path does not allow that method.", headers={"Allow": "GET"})
        await _send_error(send, err, {"path": SPEC_PATH, "method": method})
        return
    headers: list[Any] = [(b"content-type", b"application/json"), (b"content-length", str(len(spec)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if method == "HEAD" else spec})
