"""The transport of HTTP upstream kinds: one pooled client per upstream, failures as UpstreamError, SSE parsing.

What goes in a body and how an answer reads belong to the kind's wire format (handlers/inference/formats)."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, ClassVar, TypeVar

import aiohttp
import httpx
import orjson
from httpx._client import BoundAsyncStream
from httpx_aiohttp import AiohttpTransport, HttpxAiohttpClient

from generated.config import UpstreamSettings
from handlers.config import api_key as configured_key
from handlers.inference.canonical import Dialect, Event, Request, Result
from handlers.inference.formats import reasoning
from handlers.inference.formats.base import UPSTREAM_FORMATS, Traits, UpstreamFault, UpstreamFormat, UpstreamOptions
from handlers.inference.formats.common import json_object
from handlers.inference.formats.tools import Crossing
from handlers.inference.upstreams.base import PLAIN, Pool, Sizes, Timeouts, Upstream, UpstreamError
from handlers.inference.upstreams.failures import CAUGHT, ERROR_TYPE_STATUS, event_error, failure, status_error
from handlers.inference.upstreams.proxies import environment_proxy, proxy_headers_of
from handlers.inference.upstreams.sse import SseEvent, Unreadable, answer_too_large, iter_sse
from handlers.steps import within

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
_JSON = {"content-type": "application/json"}


class _NoCookies(httpx.Cookies):
    """httpx's jar for an upstream: it keeps nothing, and reads nothing of an answer (httpx's own extraction builds
    urllib and email objects for every answer, even for a jar whose policy refuses every cookie)."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class _Transport(AiohttpTransport):
    """httpx-aiohttp's transport, its aiohttp session without a cookie jar (aiohttp's default jar keeps what an
    upstream sets, for any host name, and sends it with every later request of every caller)."""

    def get_client(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(keepalive_timeout=self.limits.keepalive_expiry, ssl=self.ssl_context,
                                         limit=self.limits.max_connections or 0)
        return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())


class _Client(HttpxAiohttpClient):
    """httpx's client, its answers freed as soon as they are dropped. httpx binds an answer's stream to the answer
    (`BoundAsyncStream._response`, to set `elapsed` when it closes): a reference cycle of a dozen objects an upstream
    call, which only the cyclic garbage collector frees; it was all the cyclic garbage a request made, and the
    collector ran every few requests to free it (bench/README.md, "Garbage"). The stream holds its answer weakly."""

    async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        response = await super().send(request, **kwargs)
        if isinstance(response.stream, BoundAsyncStream):
            response.stream._response = weakref.proxy(response)
        return response


def make_client(
    base_url: str,
    *,
    headers: Mapping[str, str],
    timeouts: Timeouts,
    transport: httpx.AsyncBaseTransport | None = None,
    proxy: httpx.Proxy | None = None,
) -> httpx.AsyncClient:
    """One pooled keep-alive client per upstream, through `proxy` when one is given; `total` and the pool's bound are
    enforced per call by HttpUpstream, not here (the pool timeout given aiohttp only bounds connecting, since it never
    waits for a connection)."""
    client = _Client(
        base_url=base_url,
        headers=headers,
        timeout=httpx.Timeout(timeouts.read, connect=timeouts.connect, pool=timeouts.connect),
        transport=transport or _Transport(limits=LIMITS, proxy=proxy),
        limits=LIMITS,
    )  # the transport is given, so httpx mounts no proxy of its own: the environment's is `proxy` (proxies.py)
    # A cookie an upstream sets must never ride along on another caller's request. (The `cookies` setter would copy
    # the jar into a plain httpx.Cookies.)
    client._cookies = _NoCookies()
    return client


class HttpUpstream(Upstream):
    """Base for kinds that speak a wire format over HTTP: one client, the total deadline, failures as UpstreamError.

    A kind says which format it speaks, where (path_for), how it presents its key (auth_headers) and what the error
    types of its stream events mean (error_statuses); `headers` are added to (and may override) the kind's own;
    `transport` replaces aiohttp, for tests. Each call holds one of `pool.max_connections` slots from before it
    connects until its answer is closed; the wait for one is no part of `timeouts`.
    """

    speaks: ClassVar[Dialect]  # its wire format: a caller speaking it may also send headers meant for this kind
    path: ClassVar[str]  # where it answers, unless path_for says otherwise
    error_statuses: ClassVar[Mapping[str, int]] = ERROR_TYPE_STATUS  # an error event's type -> its HTTP status

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
        self._failures = _Failures(self)
        proxy = environment_proxy(base_url, f"upstreams.{name}")
        merged = httpx.Headers({"user-agent": USER_AGENT, **self.kind_headers(),
                                **(self.auth_headers(api_key) if api_key else {})})
        merged.update(proxy_headers_of(base_url, proxy))
        merged.update(headers or {})  # by name whatever its case: a configured "User-Agent" replaces ours
        self._client = make_client(base_url, headers=merged, timeouts=timeouts, transport=transport, proxy=proxy)
        self._urls: dict[str, httpx.URL] = {}
        self._own = [(name.decode("latin-1").lower(), name, value) for name, value in self._client.headers.raw]
        self._extensions = {"timeout": self._client.timeout.as_dict()}

    @classmethod
    def from_settings(cls, name: str, settings: UpstreamSettings) -> HttpUpstream:
        return cls(name, **cls.transport_args(name, settings), options=UpstreamOptions.of(settings))

    @staticmethod
    def transport_args(name: str, settings: UpstreamSettings) -> dict[str, Any]:
        """The arguments every HTTP kind takes from its configuration entry."""
        return {"base_url": settings.base_url or "", "api_key": configured_key(name, settings),
                "headers": dict(settings.headers), "timeouts": Timeouts.of(settings.timeouts),
                "sizes": Sizes.of(settings), "pool": Pool.of(settings.pool)}

    def path_for(self, model: str, stream: bool) -> str:
        """The path of a call to `model` (some providers put the model in the path)."""
        return self.path

    def dialect(self, model: str) -> Dialect:
        """The wire format a call to `model` speaks: the kind's own (Vertex AI speaks one per model publisher)."""
        return self.speaks

    def format_for(self, model: str) -> UpstreamFormat:
        return UPSTREAM_FORMATS[self.dialect(model)]

    def body_for(self, request: Request, model: str, traits: Traits) -> dict[str, Any]:
        """The body of a call to `model`: its format's (a kind that wants it otherwise on its paths changes it)."""
        return self.format_for(model).upstream_body(request, model, self.options, traits)

    @abc.abstractmethod
    def auth_headers(self, api_key: str) -> dict[str, str]:
        """How this kind presents the key."""

    def kind_headers(self) -> dict[str, str]:
        """Headers every request of this kind carries."""
        return {}

    async def sign(self, url: httpx.URL, content: bytes, headers: Mapping[str, str]) -> Mapping[str, str]:
        """The headers of one request to `url` with this exact body: a kind that signs each request adds its
        signature here (the key of the others is already in the client's headers)."""
        return headers

    def frames(self, response: httpx.Response) -> AsyncIterator[SseEvent]:
        """A streamed answer's events: server-sent events, unless the kind streams in frames of its own."""
        return iter_sse(response, self.sizes)

    async def aclose(self) -> None:
        await self._client.aclose()

    def on_request(self, hook: Callable[[httpx.Request], Awaitable[None]]) -> None:
        """Run `hook` on each request before it is sent (tracing adds its traceparent). Nothing runs when none
        was added."""
        self._client.event_hooks["request"].append(hook)

    async def complete(self, request: Request, model: str, traits: Traits = PLAIN) -> Result:
        wire = self.format_for(model)
        body = self.body_for(request, model, traits)
        payload = await self.post_json(self.path_for(model, False), body, self._caller_headers(request, model))
        try:
            result = wire.upstream_result(payload)
        except UpstreamFault as fault:
            raise self._fault(fault) from None
        crossing = self._crossing(request, model)
        return crossing.result(result) if crossing is not None else result

    def stream(self, request: Request, model: str, traits: Traits = PLAIN) -> AsyncIterator[Event]:
        events = self._events(request, model, traits)
        crossing = self._crossing(request, model)
        return crossing.events(events) if crossing is not None else events

    def _crossing(self, request: Request, model: str) -> Crossing | None:
        """How the calls of a request of another format come back, when any of its tools was renamed or made a
        function (custom tools, namespaces); None otherwise."""
        target = self.dialect(model)
        if request.format == target or not request.tools:
            return None
        crossing = Crossing.of(request, target, self.kind)  # type: ignore[arg-type]
        return crossing if crossing.maps else None

    def omitted_tools(self, request: Request, model: str) -> list[str]:
        target = self.dialect(model)
        if request.format == target or not request.tools:
            return []
        return Crossing.of(request, target, self.kind).omitted  # type: ignore[arg-type]

    def left_out(self, request: Request, model: str, traits: Traits = PLAIN) -> list[str]:
        """Hosted tools this kind has no equivalent of, and options of the others its equivalent has no word for (a
        caller of its own format is sent its tools as written); the reasoning it cannot take back (see
        formats/reasoning.py)."""
        said: list[str] = []
        target = self.dialect(model)
        if request.format != target and request.tools:
            crossing = Crossing.of(request, target, self.kind)  # type: ignore[arg-type]
            said = [f"tool {kind}: the {self.kind} upstream has no such tool" for kind in crossing.omitted]
            said += [f"tool option {option}: the {self.kind} upstream's equivalent has no such option"
                     for option in crossing.unsaid]
        return said + reasoning.left_out(request, target, traits)

    async def _events(self, request: Request, model: str, traits: Traits) -> AsyncIterator[Event]:
        wire = self.format_for(model)
        body = {**self.body_for(request, model, traits), **wire.STREAM_FIELDS}
        reader = wire.UpstreamReader()
        path = self.path_for(model, True)
        async with contextlib.aclosing(self.stream_sse(path, body, self._caller_headers(request, model))) as events:
            async for sse in events:
                try:
                    out = reader.read(sse.event, sse.data)
                except UpstreamFault as fault:
                    raise self._fault(fault) from None
                for event in out:
                    yield event
                if reader.done:
                    return
        raise self.protocol_error(f"ended the stream before {wire.STREAM_END}")

    def _caller_headers(self, request: Request, model: str) -> dict[str, str]:
        """The JSON content type, and the headers a caller of this call's own format sent for it (anthropic-beta)."""
        same = request.headers and request.format == self.dialect(model)
        return {**_JSON, **request.headers} if same else _JSON

    async def post_json(self, path: str, body: dict[str, Any], headers: Mapping[str, str] = _JSON) -> dict[str, Any]:
        """POST a JSON body and return the JSON answer; any failure is an UpstreamError."""
        await self._take_slot()
        try:
            return await self._post_json(path, body, headers)
        finally:
            self._slots.release()

    async def _post_json(self, path: str, body: dict[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
        with self._failures:
            async with asyncio.timeout(self.timeouts.total):
                url, content = self._url(path), orjson.dumps(body)
                request = self._request(url, content, await self.sign(url, content, headers))
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
        """POST a JSON body and yield the answer's events (server-sent events, or the kind's own frames as `frames`
        reads them). Closing this closes the connection."""
        await self._take_slot()
        try:
            deadline = asyncio.get_running_loop().time() + self.timeouts.total
            async with contextlib.AsyncExitStack() as stack:
                # orjson's bytes keep its 8 KB working buffer whatever their length; a stream holds its body for
                # its whole life, so an exact-size copy (8 KB less a stream, 40 MB less at 5,000 streams a worker).
                url, content = self._url(path), bytes(memoryview(orjson.dumps(body)))
                request = self._request(url, content, await self._by(deadline, self.sign(url, content, headers)))
                response = await self._by(deadline, self._client.send(request, stream=True))
                stack.push_async_callback(response.aclose)
                if not response.is_success:
                    raise self._status_error(response, await self._by(deadline, response.aread()))
                events = await stack.enter_async_context(contextlib.aclosing(self.frames(response)))
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

    def _request(self, url: httpx.URL, content: bytes, headers: Mapping[str, str]) -> httpx.Request:
        """What `client.build_request("POST", url, content=content, headers=headers)` makes: the client's headers
        under the call's, Host, Content-Length, the client's timeouts. build_request merged and encoded the client's
        headers again and made the body's stream twice on every call: 13 µs, this 3 (bench/README.md, "An upstream
        request without build_request")."""
        names = {name.lower() for name in headers}
        raw: list[tuple[str | bytes, str | bytes]] = []
        if "host" not in names:
            raw.append((b"Host", url.netloc))
        if "content-length" not in names:
            raw.append((b"Content-Length", b"%d" % len(content)))
        raw += [(name, value) for lower, name, value in self._own if lower not in names]
        raw += headers.items()
        request = httpx.Request("POST", url, headers=raw, stream=httpx.ByteStream(content),
                                extensions=self._extensions)
        request.read()
        return request

    async def _read(self, response: httpx.Response) -> bytes:
        """The whole body, at most `sizes.answer` bytes of it (a declared length past that is not read at all)."""
        limit = self.sizes.answer
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            raise answer_too_large(limit)
        chunks, seen = [], 0
        async for chunk in response.aiter_bytes():
            seen += len(chunk)
            if seen > limit:
                raise answer_too_large(limit)
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
            return event_error(self.name, fault.payload, self._secret, self.error_statuses)
        return self.protocol_error(fault.what or "sent an answer that cannot be read")

    def protocol_error(self, what: str) -> UpstreamError:
        return UpstreamError("protocol", f"upstream {self.name} {what}")

    def _status_error(self, response: httpx.Response, body: bytes) -> UpstreamError:
        return status_error(self.name, response.status_code, response.headers, body, self._secret)

    async def _by(self, deadline: float, step: Awaitable[T]) -> T:
        with self._failures:
            return await within(deadline, step)


class _Failures:
    """`with upstream._failures:` around a call to it: what fails there is an UpstreamError. A class of its own
    rather than a generator's context manager, which cost ~1.5 µs a use, and a stream uses it for every read."""

    __slots__ = ("_upstream",)

    def __init__(self, upstream: HttpUpstream) -> None:
        self._upstream = upstream

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _tb: object) -> None:
        if exc is None or isinstance(exc, UpstreamError):
            return
        if isinstance(exc, Unreadable):
            raise self._upstream.protocol_error(str(exc)) from None
        if isinstance(exc, CAUGHT):
            raise failure(self._upstream.name, exc) from exc
