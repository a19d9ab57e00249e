"""The transport of HTTP upstream kinds: one pooled client per upstream, failures as UpstreamError, SSE parsing.

What goes in a body and how an answer reads belong to the kind's wire format (handlers/inference/formats)."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import email.utils
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any, NamedTuple, TypeVar

import aiohttp
import httpx
import orjson
from httpx_aiohttp import AiohttpTransport, HttpxAiohttpClient

from handlers.inference.canonical import Event, Format, Request, Result
from handlers.inference.formats.base import Traits, UpstreamFault, UpstreamFormat, UpstreamOptions
from handlers.inference.formats.common import json_object
from handlers.inference.upstreams.base import PLAIN, FailureKind, Pool, Sizes, Timeouts, Upstream, UpstreamError

T = TypeVar("T")

DEFAULT_TIMEOUTS = Timeouts()  # frozen, so one shared default is safe
DEFAULT_SIZES = Sizes()
DEFAULT_POOL = Pool()
DEFAULT_OPTIONS = UpstreamOptions()
USER_AGENT = "specway"
# httpx-aiohttp hands max_connections to aiohttp's connector as its `limit` (0: none) and httpx's pool timeout to
# aiohttp's `connect` timeout, which spans the wait for a free connection as well as connecting: a full pool then
# looked like an upstream that timed out. So aiohttp has no limit, and HttpUpstream bounds its calls itself (Pool).
# (aiohttp ignores max_keepalive_connections: idle connections close after keepalive_expiry.)
LIMITS = httpx.Limits(max_connections=0, keepalive_expiry=30.0)
_BUSY_RETRY = 1.0  # seconds a caller turned away by a full pool is told to wait: connections free up as calls end
_MAX_DETAIL = 1000  # characters of an upstream's error message we pass on
_JSON = {"content-type": "application/json"}

# First match wins. The aiohttp cause is classified before httpx-aiohttp's mapping of it, which is lossy:
# it turns a refused connection into httpx.ConnectTimeout.
_FAILURES: tuple[tuple[tuple[type[BaseException], ...], FailureKind, str], ...] = (
    ((TimeoutError, httpx.TimeoutException), "timeout", "timed out"),
    ((aiohttp.ClientConnectionError, httpx.ConnectError, ConnectionError), "connect", "could not be reached"),
    ((BaseException,), "protocol", "sent an incomplete or malformed response"),
)
_CAUGHT = (httpx.HTTPError, aiohttp.ClientError, OSError)  # OSError covers TimeoutError

# Error events inside a 200 stream carry a type but no status; this is the status each provider uses for the type.
ERROR_TYPE_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "insufficient_quota": 429,
    "api_error": 500,
    "server_error": 500,
    "overloaded_error": 529,
}


class SseEvent(NamedTuple):
    event: str  # "message" when the server named none
    data: str


class TooLarge(Exception):
    """An answer or an event past its size limit (Sizes): the upstream's failure, never the caller's."""


def _answer_too_large(limit: int) -> TooLarge:
    return TooLarge(f"sent an answer larger than its limit of {limit} bytes (max_answer_bytes)")


def make_client(
    base_url: str,
    *,
    headers: Mapping[str, str],
    timeouts: Timeouts,
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    """One pooled keep-alive client per upstream; `total` and the pool's bound are enforced per call by HttpUpstream,
    not here (the pool timeout given aiohttp only bounds connecting, since it never waits for a connection)."""
    return HttpxAiohttpClient(
        base_url=base_url,
        headers={"user-agent": USER_AGENT, **headers},
        timeout=httpx.Timeout(timeouts.read, connect=timeouts.connect, pool=timeouts.connect),
        transport=transport or AiohttpTransport(limits=LIMITS),
        limits=LIMITS,
        # A cookie an upstream sets must never ride along on another caller's request.
        cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
        # Environment proxies would be mounted in front of an injected (test) transport; only the real one uses them.
        trust_env=transport is None,
    )


def failure(name: str, exc: BaseException) -> UpstreamError:
    """An UpstreamError for a transport failure (timeout, refused connection, cut response)."""
    cause = exc.__cause__ if isinstance(exc.__cause__, aiohttp.ClientError) else exc
    kind, what = next((k, w) for types, k, w in _FAILURES if isinstance(cause, types))
    return UpstreamError(kind, f"upstream {name} {what}")


def status_error(name: str, status: int, headers: Mapping[str, str], body: bytes, secret: str | None) -> UpstreamError:
    """An UpstreamError for a non-2xx answer, carrying the upstream's own message when it sent one."""
    if status in (401, 403):
        # The upstream's text may quote the key it was given; say nothing of it.
        message = f"upstream {name} rejected the gateway's credentials"
    else:
        detail = error_detail(body)
        message = scrub(detail, secret) if detail else f"upstream {name} answered HTTP {status}"
    return UpstreamError("status", message, status=status, retry_after=retry_after(headers))


def event_error(name: str, payload: Any, secret: str | None) -> UpstreamError:
    """An UpstreamError for an error event inside a stream (`{"error": {"type", "message"}}` in both providers)."""
    error = payload.get("error") if isinstance(payload, dict) else None
    error_type = (error.get("type") or error.get("code")) if isinstance(error, dict) else None
    detail = error_detail(payload) or f"upstream {name} failed mid-stream"
    return UpstreamError("status", scrub(detail, secret), status=ERROR_TYPE_STATUS.get(str(error_type), 500))


def error_detail(body: bytes | Any) -> str | None:
    """The human message from an error body: OpenAI, Anthropic and the usual compatible-server shapes."""
    if isinstance(body, bytes):
        try:
            body = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    for candidate in (
        error.get("message") if isinstance(error, dict) else error,
        body.get("message"),
        body.get("detail"),
    ):
        if isinstance(candidate, str) and candidate.strip():
            return candidate.strip()[:_MAX_DETAIL]
    return None


def scrub(text: str, secret: str | None) -> str:
    return text.replace(secret, "[redacted]") if secret else text


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait, from `retry-after-ms` (OpenAI) or `retry-after` (seconds or an HTTP date)."""
    for header, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        with contextlib.suppress(TypeError, ValueError):
            return max(0.0, float(headers.get(header) or "") * scale)
    try:
        when = email.utils.parsedate_to_datetime(headers.get("retry-after") or "")
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


_EOL = re.compile(rb"\r\n|\r|\n")


def _event_too_large(limit: int) -> TooLarge:
    return TooLarge(f"sent a stream event larger than its limit of {limit} bytes (max_event_bytes)")


async def _lines(chunks: AsyncIterator[bytes], sizes: Sizes) -> AsyncIterator[str]:
    """Lines split on CRLF, LF or CR only (httpx's aiter_lines also splits on U+2028 and friends, legal in JSON).

    Linear in the stream's size: a chunk with no line end is only set aside, and the pieces of a line are joined
    once, when its end arrives (re-splitting a growing buffer on every chunk made a long event quadratic). A line
    longer than `sizes.event`, or more than `sizes.answer` bytes in all, is TooLarge (counted here, in the one
    loop every chunk goes through).
    """
    pending: list[bytes] = []  # the pieces of the line not ended yet
    waiting = seen = 0  # their bytes; all the bytes so far
    async for chunk in chunks:
        seen += len(chunk)
        if seen > sizes.answer:
            raise _answer_too_large(sizes.answer)
        if b"\n" not in chunk and b"\r" not in chunk and not (pending and pending[-1].endswith(b"\r")):
            pending.append(chunk)
            waiting += len(chunk)
            if waiting > sizes.event:
                raise _event_too_large(sizes.event)
            continue
        pending.append(chunk)
        data = b"".join(pending)
        end = len(data) - 1 if data.endswith(b"\r") else len(data)  # a CR may be half of a CRLF
        *lines, rest = _EOL.split(data[:end])
        pending = [rest + data[end:]]
        waiting = len(pending[0])
        for line in lines:
            yield line.decode("utf-8", "replace")
    # Whatever is left had no line end: an unfinished event, which SSE discards.


async def iter_sse(response: httpx.Response, sizes: Sizes = DEFAULT_SIZES) -> AsyncIterator[SseEvent]:
    """Server-sent events from a streaming response: `event:` names, multi-line data, comments, CRLF. An event or
    the whole answer past `sizes` is TooLarge."""
    event, data, size = "", [], 0
    async for line in _lines(response.aiter_bytes(), sizes):
        if not line:
            if data:
                yield SseEvent(event or "message", "\n".join(data))
            event, data, size = "", [], 0
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
            size += len(value)
            if size > sizes.event:
                raise _event_too_large(sizes.event)
        # A comment has an empty field name; id and retry mean nothing to a one-shot request.


class HttpUpstream(Upstream):
    """Base for kinds that speak a wire format over HTTP: one client, the total deadline, failures as UpstreamError.

    A kind sets `format` and `path` and says how it presents its key; `headers` are added to (and may override) the
    kind's own; `transport` replaces aiohttp, for tests. Each call holds one of `pool.max_connections` slots from
    before it connects until its answer is closed; the wait for one is no part of `timeouts`.
    """

    format: UpstreamFormat
    speaks: Format  # the format's name: a caller speaking it may send headers meant for this kind
    path: str

    def __init__(
        self,
        name: str,
        *,
        base_url: str,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        sizes: Sizes = DEFAULT_SIZES,
        pool: Pool = DEFAULT_POOL,
        options: UpstreamOptions = DEFAULT_OPTIONS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(name)
        self.timeouts = timeouts
        self.sizes = sizes
        self.pool = pool
        self.options = options
        self._slots = asyncio.Semaphore(pool.max_connections)
        self._busy = (f"upstream {name} had all {pool.max_connections} of its connections in use for "
                      f"{pool.wait_seconds:g} s (pool.max_connections, pool.wait_seconds)")
        self._secret = api_key
        own = {**self.kind_headers(), **(self.auth_headers(api_key) if api_key else {})}
        self._client = make_client(base_url, headers={**own, **(headers or {})}, timeouts=timeouts, transport=transport)
        self._urls: dict[str, httpx.URL] = {}

    @abc.abstractmethod
    def auth_headers(self, api_key: str) -> dict[str, str]:
        """How this kind presents the key."""

    def kind_headers(self) -> dict[str, str]:
        """Headers every request of this kind carries."""
        return {}

    async def aclose(self) -> None:
        await self._client.aclose()

    def on_request(self, hook: Callable[[httpx.Request], Awaitable[None]]) -> None:
        """Run `hook` on each request before it is sent (tracing adds its traceparent). Nothing runs when none
        was added."""
        self._client.event_hooks["request"].append(hook)

    async def complete(self, request: Request, model: str, traits: Traits = PLAIN) -> Result:
        body = self.format.upstream_body(request, model, self.options, traits)
        payload = await self.post_json(self.path, body, self._caller_headers(request))
        try:
            return self.format.upstream_result(payload)
        except UpstreamFault as fault:
            raise self._fault(fault) from None

    async def stream(self, request: Request, model: str, traits: Traits = PLAIN) -> AsyncIterator[Event]:
        body = {**self.format.upstream_body(request, model, self.options, traits), **self.format.STREAM_FIELDS}
        reader = self.format.UpstreamReader()
        async with contextlib.aclosing(self.stream_sse(self.path, body, self._caller_headers(request))) as events:
            async for sse in events:
                try:
                    out = reader.read(sse.event, sse.data)
                except UpstreamFault as fault:
                    raise self._fault(fault) from None
                for event in out:
                    yield event
                if reader.done:
                    return
        raise self.protocol_error(f"ended the stream before {self.format.STREAM_END}")

    def _caller_headers(self, request: Request) -> dict[str, str]:
        """The JSON content type, and the headers a caller of this kind's own format sent for it (anthropic-beta)."""
        return {**_JSON, **request.headers} if request.format == self.speaks and request.headers else _JSON

    async def post_json(self, path: str, body: dict[str, Any], headers: Mapping[str, str] = _JSON) -> dict[str, Any]:
        """POST a JSON body and return the JSON answer; any failure is an UpstreamError."""
        await self._take_slot()
        try:
            return await self._post_json(path, body, headers)
        finally:
            self._slots.release()

    async def _post_json(self, path: str, body: dict[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
        with self._failures():
            async with asyncio.timeout(self.timeouts.total):
                request = self._client.build_request("POST", self._url(path), content=orjson.dumps(body),
                                                     headers=headers)
                response = await self._client.send(request, stream=True)
                try:
                    content = await self._read(response)
                finally:
                    await response.aclose()
                if not response.is_success:
                    raise self._status_error(response, content)
                try:
                    return json_object(content)
                except UpstreamFault as fault:
                    raise self._fault(fault) from None

    async def stream_sse(self, path: str, body: dict[str, Any], headers: Mapping[str, str] = _JSON
                         ) -> AsyncIterator[SseEvent]:
        """POST a JSON body and yield the answer's server-sent events. Closing this closes the connection."""
        await self._take_slot()
        try:
            deadline = asyncio.get_running_loop().time() + self.timeouts.total
            async with contextlib.AsyncExitStack() as stack:
                request = self._client.stream("POST", self._url(path), content=orjson.dumps(body), headers=headers)
                response = await self._by(deadline, stack.enter_async_context(request))
                if not response.is_success:
                    raise self._status_error(response, await self._by(deadline, response.aread()))
                events = await stack.enter_async_context(contextlib.aclosing(iter_sse(response, self.sizes)))
                # The deadline wraps each read, never a yield: a timeout scope must not span the consumer's code.
                while (event := await self._by(deadline, anext(events, None))) is not None:
                    yield event
        finally:
            self._slots.release()

    async def _take_slot(self) -> None:
        """One of the pool's slots, waiting up to pool.wait_seconds for a call to give one back; else UpstreamError
        "busy". The wait is this process's load, not the upstream's slowness: it is no part of the upstream's
        timeouts and never counts toward its cooldown."""
        if not self._slots.locked():
            await self._slots.acquire()  # a free slot: taken at once, nothing allocated
            return
        try:
            async with asyncio.timeout(self.pool.wait_seconds):
                await self._slots.acquire()
        except TimeoutError:
            raise UpstreamError("busy", self._busy, retry_after=_BUSY_RETRY) from None

    async def _read(self, response: httpx.Response) -> bytes:
        """The whole body, at most `sizes.answer` bytes of it (a declared length past that is not read at all)."""
        limit = self.sizes.answer
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            raise _answer_too_large(limit)
        chunks, seen = [], 0
        async for chunk in response.aiter_bytes():
            seen += len(chunk)
            if seen > limit:
                raise _answer_too_large(limit)
            chunks.append(chunk)
        return b"".join(chunks)

    def _url(self, path: str) -> httpx.URL:
        """The absolute URL of a path, parsed once: httpx would parse and join it again on every request."""
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx.URL(str(self._client.base_url).rstrip("/") + path)
        return url

    def _fault(self, fault: UpstreamFault) -> UpstreamError:
        if fault.payload is not None:
            return event_error(self.name, fault.payload, self._secret)
        return self.protocol_error(fault.what or "sent an answer that cannot be read")

    def protocol_error(self, what: str) -> UpstreamError:
        return UpstreamError("protocol", f"upstream {self.name} {what}")

    def _status_error(self, response: httpx.Response, body: bytes) -> UpstreamError:
        return status_error(self.name, response.status_code, response.headers, body, self._secret)

    async def _by(self, deadline: float, step: Awaitable[T]) -> T:
        with self._failures():
            async with asyncio.timeout_at(deadline):
                return await step

    @contextlib.contextmanager
    def _failures(self) -> Iterator[None]:
        try:
            yield
        except UpstreamError:
            raise
        except TooLarge as exc:
            raise self.protocol_error(str(exc)) from None
        except _CAUGHT as exc:
            raise failure(self.name, exc) from exc
