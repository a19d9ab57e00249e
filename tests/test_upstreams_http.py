"""The HTTP plumbing every upstream kind shares: failures against the fake (status errors, timeouts, refused
connections, broken streams, cancellation, kept-alive connections), and compatible servers, SSE parsing and error
reading over httpx.MockTransport."""

from __future__ import annotations

import asyncio
import collections
import gc
import socket
import time
from collections.abc import AsyncIterator, Callable
from email.utils import formatdate

import httpx
import pytest

from handlers.inference.canonical import (
    Event,
    Finish,
    FinishReason,
    TextDelta,
    ToolCallDelta,
    ToolCallStart,
    UsageReport,
)
from handlers.inference.upstreams import OpenAIUpstream, Timeouts, UpstreamError
from handlers.inference.upstreams.base import Sizes
from handlers.inference.upstreams.failures import error_detail, retry_after
from handlers.inference.upstreams.sse import SseEvent, iter_sse
from tests.fake_upstream import FakeUpstream
from tests.upstream_support import (
    HELLO,
    KEY,
    KINDS,
    Build,
    answer,
    events,
    failure,
    fixture_build,  # noqa: F401  (a fixture)
    fixture_fake,  # noqa: F401  (a fixture)
    fixture_server,  # noqa: F401  (a fixture)
)


async def eventually(condition: Callable[[], bool], seconds: float = 3.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition never became true"
        await asyncio.sleep(0.02)


# --- Failures -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("kind", KINDS)
async def test_a_bad_request_is_the_callers_fault_with_the_upstreams_message(
    fake: FakeUpstream, build: Build, kind: str, streaming: bool
) -> None:
    fake.script(status=400, error="max_tokens: must be at most 8192")
    error = await failure(answer(build(kind), streaming))
    assert (error.kind, error.status, error.message) == ("status", 400, "max_tokens: must be at most 8192")
    assert error.caller_fault and not error.retryable


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("kind", KINDS)
async def test_rejected_credentials_never_show_the_key(
    fake: FakeUpstream, build: Build, kind: str, streaming: bool, status: int
) -> None:
    fake.script(status=status, error=f"Incorrect API key provided: {KEY}")
    error = await failure(answer(build(kind), streaming))
    assert KEY not in str(error) and KEY not in error.message
    assert error.message == f"upstream {kind} rejected the gateway's credentials"
    assert error.status == status and not error.caller_fault


async def test_the_key_is_scrubbed_from_any_upstream_message(fake: FakeUpstream, build: Build) -> None:
    fake.script(status=400, error=f"bad header value {KEY}")
    assert KEY not in (await failure(build("openai").complete(HELLO, "m"))).message


@pytest.mark.parametrize(
    ("status", "headers", "wait"), [(429, {"retry-after": "7"}, 7.0), (500, {}, None), (529, {}, None)]
)
@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("kind", KINDS)
async def test_overload_and_server_errors_are_retryable(
    fake: FakeUpstream,
    build: Build,
    kind: str,
    streaming: bool,
    status: int,
    headers: dict[str, str],
    wait: float | None,
) -> None:
    fake.script(status=status, headers=headers)
    error = await failure(answer(build(kind), streaming))
    assert (error.kind, error.status, error.retry_after) == ("status", status, wait)
    assert error.retryable and not error.caller_fault


@pytest.mark.parametrize("kind", KINDS)
async def test_a_refusal_is_raised_before_the_first_event(fake: FakeUpstream, build: Build, kind: str) -> None:
    fake.script(status=503)
    stream = build(kind).stream(HELLO, "m")
    assert (await failure(anext(stream))).status == 503


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("kind", KINDS)
async def test_a_slow_upstream_times_out(fake: FakeUpstream, build: Build, kind: str, streaming: bool) -> None:
    fake.script(delay=0.6)
    upstream = build(kind, timeouts=Timeouts(connect=1, read=0.2, total=10))
    error = await failure(answer(upstream, streaming))
    assert error.kind == "timeout" and error.retryable


@pytest.mark.parametrize("kind", KINDS)
async def test_the_total_deadline_bounds_a_trickling_stream(fake: FakeUpstream, build: Build, kind: str) -> None:
    fake.script(text="one two three four five six seven eight nine ten", chunk_delay=0.1)
    got: list[Event] = []
    started = time.monotonic()
    with pytest.raises(UpstreamError) as caught:
        async for event in build(kind, timeouts=Timeouts(read=5, total=0.45)).stream(HELLO, "m"):
            got.append(event)
    assert caught.value.kind == "timeout" and got and time.monotonic() - started < 1.5


async def test_the_total_deadline_bounds_a_whole_answer(fake: FakeUpstream, build: Build) -> None:
    fake.script(delay=0.6)
    error = await failure(build("openai", timeouts=Timeouts(read=5, total=0.2)).complete(HELLO, "m"))
    assert error.kind == "timeout"


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("kind", KINDS)
async def test_a_closed_port_is_a_connect_failure(build: Build, kind: str, streaming: bool) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}" + ("/v1" if kind == "openai" else "")
    error = await failure(answer(build(kind, base_url=base), streaming))
    assert error.kind == "connect" and error.retryable and str(port) not in error.message


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("kind", KINDS)
async def test_malformed_json_is_a_protocol_failure(
    fake: FakeUpstream, build: Build, kind: str, streaming: bool
) -> None:
    fake.script(malformed=True)
    error = await failure(answer(build(kind), streaming))
    assert error.kind == "protocol" and not error.retryable


@pytest.mark.parametrize(("kind", "cut_after"), [("openai", 3), ("anthropic", 5)])
async def test_a_cut_stream_raises_while_iterating(fake: FakeUpstream, build: Build, kind: str, cut_after: int) -> None:
    fake.script(cut_after=cut_after)
    got: list[Event] = []
    with pytest.raises(UpstreamError) as caught:
        async for event in build(kind).stream(HELLO, "m"):
            got.append(event)
    assert [e for e in got if not isinstance(e, UsageReport)] == [TextDelta("Hello "), TextDelta("from ")]
    assert caught.value.kind == "protocol"


@pytest.mark.parametrize(("kind", "after", "status"), [("openai", 3, 500), ("anthropic", 5, 529)])
async def test_an_error_event_mid_stream_raises(
    fake: FakeUpstream, build: Build, kind: str, after: int, status: int
) -> None:
    fake.script(fail_after=after, error="Overloaded")
    got: list[Event] = []
    with pytest.raises(UpstreamError) as caught:
        async for event in build(kind).stream(HELLO, "m"):
            got.append(event)
    assert got and all(isinstance(e, TextDelta | UsageReport) for e in got)
    assert (caught.value.message, caught.value.status, caught.value.retryable) == ("Overloaded", status, True)


@pytest.mark.parametrize("kind", KINDS)
async def test_closing_the_stream_cancels_the_upstream_request(build: Build, kind: str) -> None:
    with FakeUpstream() as own:
        own.script(text="word " * 100, chunk_delay=0.05)
        stream = build(kind, server=own).stream(HELLO, "m")
        first = await anext(stream)
        if kind == "anthropic":  # message_start's counts come first, with the first content
            assert isinstance(first, UsageReport)
            first = await anext(stream)
        assert first == TextDelta("word ")
        await stream.aclose()  # type: ignore[attr-defined]
        await eventually(lambda: own.disconnects == 1)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])  # aiohttp's own jar keeps no cookie of an IP address
@pytest.mark.parametrize("kind", KINDS)
async def test_a_cookie_an_upstream_sets_never_rides_on_the_next_request(fake: FakeUpstream, build: Build,
                                                                          kind: str, host: str) -> None:
    base = fake.url if kind == "openai" else fake.anthropic_url
    upstream = build(kind, base_url=base.replace("127.0.0.1", host))
    fake.script(headers={"set-cookie": "session=caller-a; Path=/"})
    await upstream.complete(HELLO, "m")
    await upstream.complete(HELLO, "m")
    assert "cookie" not in fake.requests[-1].headers


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("kind", KINDS)
async def test_configured_headers_replace_the_kinds_and_reach_the_upstream_once(
    fake: FakeUpstream, build: Build, kind: str, streaming: bool
) -> None:
    upstream = build(kind, headers={"User-Agent": "team-bot/1", "X-Team": "platform"})
    await answer(upstream, streaming)
    sent = fake.requests[-1]
    assert sent.headers["user-agent"] == "team-bot/1"
    assert sent.headers["x-team"] == "platform"
    assert sent.headers["content-type"] == "application/json"
    assert int(sent.headers["content-length"]) > 0 and sent.body is not None  # the body arrived whole, as JSON
    assert sent.headers["host"] == fake.url.split("//")[1].split("/")[0]


@pytest.mark.parametrize("headers", [
    {"content-type": "application/json"},
    {"Content-Type": "application/json", "anthropic-beta": "tools-2024", "USER-AGENT": "caller/2"},
    {"content-type": "application/json", "Host": "proxy.example", "content-length": "7", "x-amz-date": "20261207"},
    {},
])
@pytest.mark.parametrize("kind", KINDS)
async def test_an_upstream_request_is_what_httpx_would_build(build: Build, kind: str,
                                                             headers: dict[str, str]) -> None:
    """The request is built without httpx's build_request (which merged and encoded every header again on each call):
    the same headers (the kind's, the configuration's over them, the call's over both, Host and Content-Length
    unless given), body and timeouts."""
    upstream = build(kind, headers={"User-Agent": "team-bot/1", "X-Team": "platform"})
    url, content = httpx.URL("http://127.0.0.1:9/v1/x?y=1"), b'{"model": "m"}'
    ours = upstream._request(url, content, headers)  # type: ignore[attr-defined]
    httpx_own = upstream._client.build_request("POST", url, content=content, headers=headers)  # type: ignore[attr-defined]

    def items(request: httpx.Request) -> list[tuple[str, str]]:
        return sorted((k.lower(), v) for k, v in request.headers.multi_items())

    assert items(ours) == items(httpx_own)
    assert (ours.method, ours.url, ours.content, ours.extensions) == (
        httpx_own.method, httpx_own.url, httpx_own.content, httpx_own.extensions)


@pytest.mark.parametrize("kind", KINDS)
async def test_connections_are_kept_alive_and_reused(fake: FakeUpstream, build: Build, kind: str) -> None:
    upstream = build(kind)
    await upstream.complete(HELLO, "m")
    await events(upstream)
    await upstream.complete(HELLO, "m")
    assert len({r.peer for r in fake.requests}) == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_an_upstream_call_leaves_nothing_for_the_garbage_collector(build: Build, kind: str) -> None:
    """httpx binds an answer's stream to the answer, a reference cycle that only a collection frees: at 32
    connections it made the collector run every few requests. An answer, read or streamed, is freed when dropped."""
    upstream = build(kind)
    await answer(upstream, False), await answer(upstream, True)  # the pool's connection, caches
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept in gc.garbage, to be looked at
    try:
        for _ in range(10):
            await answer(upstream, False)
            await answer(upstream, True)
        gc.collect()
        left = collections.Counter(type(o).__module__ + "." + type(o).__qualname__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    ours = {name: n for name, n in left.items() if name.split(".")[0] in ("httpx", "httpx_aiohttp", "handlers")}
    assert not ours, ours


# --- Compatible servers and the plumbing, over httpx.MockTransport ---------------------------------------------------


def mock(reply: httpx.Response) -> OpenAIUpstream:
    return OpenAIUpstream("mock", base_url="http://upstream.test/v1", transport=httpx.MockTransport(lambda _: reply))


async def test_a_compatible_server_with_its_own_stream_habits() -> None:
    body = (
        b": keep-alive\r\n\r\n"
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{}"}}]}}]}'
        b"\r\n\r\n"
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\r\n\r\n'
        b"data: [DONE]\r\n\r\n"
    )
    upstream = mock(httpx.Response(200, content=body, headers={"content-type": "text/event-stream"}))
    assert await events(upstream) == [
        ToolCallStart(0, "call_0", "f"),
        ToolCallDelta(0, "{}"),
        Finish(FinishReason.TOOL_CALLS),
    ]


async def test_a_stream_that_just_ends_is_not_a_silent_success() -> None:
    body = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
    error = await failure(events(mock(httpx.Response(200, content=body))))
    assert error.kind == "protocol"


async def test_an_error_in_a_200_body_is_an_error() -> None:
    upstream = mock(httpx.Response(200, json={"error": {"message": "model overloaded", "type": "server_error"}}))
    error = await failure(upstream.complete(HELLO, "m"))
    assert (error.message, error.status) == ("model overloaded", 500)


async def test_sse_parsing_handles_names_multiline_data_comments_and_split_line_ends() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"event: a\r"  # the CR of a CRLF, whose LF comes in the next chunk
        yield b"\ndata: 1\r\ndata:2\r\n: comment\r\n\r"
        yield "\ndata: x\u2028y\n\r".encode()  # U+2028 is legal inside JSON strings, and no line end
        yield b"data: unfinished"

    got = [event async for event in iter_sse(httpx.Response(200, content=chunks()))]
    assert got == [SseEvent("a", "1\n2"), SseEvent("message", "x\u2028y")]


async def test_a_long_event_in_small_chunks_is_one_event() -> None:
    """A 1 MiB event arriving 1 KiB at a time (the reader joins its pieces once, when the line ends)."""
    event = b"data: " + b"x" * (1 << 20) + b"\r\n\r\ndata: next\n\n"

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(event), 1024):
            yield event[i : i + 1024]

    got = [event async for event in iter_sse(httpx.Response(200, content=chunks()))]
    assert got == [SseEvent("message", "x" * (1 << 20)), SseEvent("message", "next")]


def test_retry_after_reads_seconds_dates_and_milliseconds() -> None:
    assert retry_after({"retry-after": "3"}) == 3.0
    assert retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert 8 <= (retry_after({"retry-after": formatdate(time.time() + 10, usegmt=True)}) or 0) <= 10
    assert retry_after({"retry-after": "soon"}) is None and retry_after({}) is None


def test_error_detail_reads_the_usual_shapes() -> None:
    assert error_detail(b'{"error": {"message": "openai"}}') == "openai"
    assert error_detail(b'{"type": "error", "error": {"type": "x", "message": "anthropic"}}') == "anthropic"
    assert error_detail(b'{"error": "plain"}') == "plain"
    assert error_detail(b'{"detail": "fastapi"}') == "fastapi"
    assert error_detail(b"<html>") is None


# --- Size limits ----------------------------------------------------------------------------------------------------

SMALL = Sizes(answer=64 * 1024, event=8 * 1024)


@pytest.mark.parametrize("kind", KINDS)
async def test_an_answer_past_max_answer_bytes_is_the_upstreams_failure(fake: FakeUpstream, build: Build,
                                                                        kind: str) -> None:
    for streaming in (False, True):
        fake.script(text="word " * 20_000)  # ~100 KB as one JSON body, or as thousands of small events
        error = await failure(answer(build(kind, sizes=SMALL), streaming))
        assert (error.kind, error.caller_fault) == ("protocol", False)
        assert error.message == f"upstream {kind} sent an answer larger than its limit of 65536 bytes (max_answer_bytes)"


@pytest.mark.parametrize("kind", KINDS)
async def test_an_event_past_max_event_bytes_is_the_upstreams_failure(fake: FakeUpstream, build: Build,
                                                                      kind: str) -> None:
    fake.script(text="x" * 20_000)  # one word: one event of 20 KB, under the answer's limit
    error = await failure(answer(build(kind, sizes=SMALL), True))
    fake.script(text="x" * 20_000)
    assert error.message == f"upstream {kind} sent a stream event larger than its limit of 8192 bytes (max_event_bytes)"
    assert (await answer(build(kind, sizes=SMALL), False)).text() == "x" * 20_000  # whole, it fits


async def test_a_declared_length_past_the_limit_is_refused_before_reading() -> None:
    def handler(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-length": str(1 << 30)}, content=b"{}")

    upstream = OpenAIUpstream("big", base_url="http://upstream.test", sizes=SMALL, transport=httpx.MockTransport(handler))
    error = await failure(upstream.complete(HELLO, "m"))
    assert "larger than its limit of 65536 bytes" in error.message
