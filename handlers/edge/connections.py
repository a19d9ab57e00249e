"""The HTTP/1.1 connection: uvicorn's httptools protocol with the limits it lacks, answered in our error shape.

httptools keeps every byte of an unfinished header in memory, without a cap, and uvicorn gives a connection no
time limit until its first response: one huge header grew a worker by hundreds of MB, and slow-header (slowloris)
connections stayed open forever. Here, per connection:

- the request line and headers may take `header_limit_bytes` (431) and must arrive within `header_timeout_seconds`
  (408), counted from the connection's opening or from the first byte of a later request;
- a worker holds at most `max_connections`; one over it gets 503 to its first request. uvicorn's own
  `limit_concurrency` answers in plain text and counts idle keep-alive connections and running requests together;
- a request that is not valid HTTP gets 400 in our shape, not uvicorn's plain text.

The body's time limit is the edge middleware's (handlers/edge/middleware.py), idle keep-alive is uvicorn's
`timeout_keep_alive`. A refused connection is half-closed after the answer and what the client still sends is
read and dropped for up to LINGER seconds: closing at once would reset the connection and could lose the answer.
"""

from __future__ import annotations

import functools
import logging
from asyncio import TimerHandle
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from generated import errors as codes
from generated.config import Server
from handlers.edge import paths
from handlers.errors import ApiError
from handlers.observability import metrics

log = logging.getLogger("specway.requests")
LINGER = 2.0  # seconds a refused connection stays half-open to drain what the client is still sending
_REQUEST_LINE = len(b"  HTTP/1.1\r\n") + 2  # around the method and the target, plus the blank line at the end
_admitted: WeakKeyDictionary[ServerState, int] = WeakKeyDictionary()  # connections in service, per server


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_bytes: int
    header_timeout: float
    max_connections: int


def protocol(server: Server) -> Any:
    """What uvicorn's `http=` takes: our protocol bound to the configured limits (picklable, for worker
    processes)."""
    limits = ConnectionLimits(server.header_limit_bytes, float(server.header_timeout_seconds), server.max_connections)
    return functools.partial(LimitedHttpToolsProtocol, limits=limits)


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.limit_concurrency = None  # ours replaces uvicorn's
        self._admitted = False
        self._refusing = False
        self._heading = False  # between the first byte of a request and the end of its headers
        self._head_bytes = 0  # bytes received while heading (the request's head so far, while it is unfinished)
        self._head_size = 0  # the finished part of the head: target and complete header lines
        self._head_timer: TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        admitted = _admitted.get(self.server_state, 0)
        if admitted < self.limits.max_connections:
            _admitted[self.server_state] = admitted + 1
            self._admitted = True
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._admitted:
            self._admitted = False
            _admitted[self.server_state] -= 1
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refusing:
            return  # read and dropped until the client closes or LINGER ends
        super().data_received(data)
        if self._heading and not self._refusing:
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.header_bytes:
                self._refuse(self._too_large())

    def send_400_response(self, msg: str) -> None:
        """A request httptools cannot parse: our shape instead of uvicorn's plain text."""
        self._refuse(ApiError(codes.INVALID_HTTP, "The request is not valid HTTP/1.1."))

    # parser callbacks

    def on_message_begin(self) -> None:
        if self._refusing:
            return
        super().on_message_begin()
        self._heading, self._head_bytes, self._head_size = True, 0, 0
        self._arm_head_timer()

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self._head_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self._head_size += len(name) + len(value) + 4  # ": " and CRLF

    def on_headers_complete(self) -> None:
        if self._refusing:
            return
        self._heading = False
        self._cancel_head_timer()
        method = self.parser.get_method()
        if self._head_size + len(method) + _REQUEST_LINE > self.limits.header_bytes:
            self._refuse(self._too_large(), method, self.url)
        elif not self._admitted:
            metrics.OVERLOADED.labels("connections").inc()
            self._refuse(ApiError(codes.OVERLOADED, "The gateway holds as many connections as it may; retry "
                                  "shortly.", headers={"Retry-After": "1"}), method, self.url)
        else:
            super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refusing:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._refusing:
            super().on_message_complete()

    # limits

    def _too_large(self) -> ApiError:
        return ApiError(codes.HEADERS_TOO_LARGE,
                        f"The request line and headers are over the limit of {self.limits.header_bytes} bytes.")

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.limits.header_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        seconds = f"{self.limits.header_timeout:g}"
        self._refuse(ApiError(codes.HEADER_TIMEOUT, f"The request's headers did not arrive within {seconds} s."))

    def _refuse(self, err: ApiError, method: bytes = b"-", target: bytes = b"") -> None:
        """Answer `err` on the raw connection, then half-close it and drain. Behind a pipelined request still being
        answered, nothing can be written: that answer ends the connection instead."""
        self._refusing = True
        self._cancel_head_timer()
        _record(err, method.decode("latin-1"), target)
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = False
            return
        if self.transport.is_closing():
            return
        body = paths.error_json(err, _path(target), method.decode("latin-1"))
        lines = [STATUS_LINE[err.status]]
        headers = [*self.server_state.default_headers, (b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode()), (b"connection", b"close"),
                   *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in err.headers.items())]
        lines.extend(b"%s: %s\r\n" % header for header in headers)
        self.transport.write(b"".join([*lines, b"\r\n", body]))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.flow.resume_reading()
        self.loop.call_later(LINGER, self.transport.close)


def _path(target: bytes) -> str:
    """The path of a request target, "" when there is none (or it cannot be parsed)."""
    try:
        path = httptools.parse_url(target).path or b"" if target else b""
    except httptools.HttpParserInvalidURLError:
        path = b""
    return path.decode("latin-1")


def _record(err: ApiError, method: str, target: bytes) -> None:
    """A refusal in the request log and in specway_requests_total, like any answered request."""
    path = _path(target)
    info = paths.match(path, method) if path else None
    route = info.template if info else "unmatched"
    metrics.REQUESTS.labels(route, method, str(err.status)).inc()
    if log.isEnabledFor(logging.INFO):
        log.info(orjson.dumps({"method": method, "route": route, "status": err.status, "error": err.code}).decode())
