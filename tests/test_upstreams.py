"""Upstream kinds against a real HTTP fake (tests/fake_upstream.py), streamed and not."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from email.utils import formatdate
from typing import Any

import httpx
import orjson
import pytest

from handlers.canonical import (
    Event,
    Finish,
    FinishReason,
    Message,
    Request,
    Result,
    Text,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolCallStart,
    ToolChoice,
    ToolResult,
    Unknown,
    Usage,
    UsageReport,
    fold,
)
from handlers.upstreams import AnthropicUpstream, EchoUpstream, OpenAIUpstream, Timeouts, Upstream, UpstreamError
from handlers.upstreams.http import SseEvent, error_detail, iter_sse, retry_after
from tests.fake_upstream import FakeUpstream

KEY = "sk-test-SECRET-0123456789"
HELLO = Request(format="chat", messages=[Message("user", [Text("Hello there")])])
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
KINDS = ["openai", "anthropic"]
Build = Callable[..., Upstream]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake


@pytest.fixture
def fake(server: FakeUpstream) -> FakeUpstream:
    server.reset()
    return server


@pytest.fixture
async def build(fake: FakeUpstream) -> AsyncIterator[Build]:
    made: list[Upstream] = []

    def make(kind: str, *, server: FakeUpstream = fake, **options: Any) -> Upstream:
        options.setdefault("api_key", KEY)
        if kind == "openai":
            upstream: Upstream = OpenAIUpstream(kind, base_url=options.pop("base_url", server.url), **options)
        else:
            upstream = AnthropicUpstream(kind, base_url=options.pop("base_url", server.anthropic_url), **options)
        made.append(upstream)
        return upstream

    yield make
    for upstream in made:
        await upstream.aclose()


async def events(upstream: Upstream, request: Request = HELLO, model: str = "m") -> list[Event]:
    return [event async for event in upstream.stream(request, model)]


async def answer(upstream: Upstream, streaming: bool, request: Request = HELLO) -> Result:
    return fold(await events(upstream, request)) if streaming else await upstream.complete(request, "m")


async def failure(call: Awaitable[Any]) -> UpstreamError:
    with pytest.raises(UpstreamError) as caught:
        await call
    return caught.value


async def eventually(condition: Callable[[], bool], seconds: float = 3.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition never became true"
        await asyncio.sleep(0.02)


def conversation(format: str, **fields: Any) -> Request:
    """A conversation with every block kind: text, a tool call, its result, and unmodelled parts."""
    messages = [
        Message("user", [Text("Weather in Paris?"), Unknown({"type": "image_url", "image_url": {"url": "u"}}, "chat")]),
        Message("assistant", [Text("Checking."), ToolCall("call_1", "get_weather", '{"city": "Paris"}')]),
        Message("tool", [ToolResult("call_1", "18C and sunny")]),
        Message("user", [Text("Thanks!"), Unknown({"type": "document", "source": {"data": "d"}}, "messages")]),
    ]
    tools = [
        Tool("get_weather", "Current weather", WEATHER, {"type": "function", "function": {"name": "raw"}}, "chat"),
        Tool("lookup", None, {}, {"name": "raw_lookup", "input_schema": WEATHER}, "messages"),
    ]
    return Request(format=format, messages=messages, system="Be brief.", tools=tools, **fields)  # type: ignore[arg-type]


# --- OpenAI: what we send -------------------------------------------------------------------------------------------


async def test_openai_translates_a_chat_request(fake: FakeUpstream, build: Build) -> None:
    request = conversation(
        "chat",
        max_tokens=50, temperature=0.2, top_p=0.9, stop=["END"], seed=7,
        tool_choice=ToolChoice("auto", "auto", "chat"), response_format={"type": "json_object"},
        extra={"user": "u-1", "model": "not-this", "messages": [], "logit_bias": {"1": 2}},
    )  # fmt: skip
    await build("openai", headers={"x-org": "acme"}).complete(request, "gpt-test")
    sent = fake.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}" and sent.headers["x-org"] == "acme"
    assert sent.body == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather in Paris?"},
                    {"type": "image_url", "image_url": {"url": "u"}},
                ],
            },
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"},
            {"role": "user", "content": "Thanks!"},
        ],
        "max_tokens": 50, "temperature": 0.2, "top_p": 0.9, "stop": ["END"], "seed": 7,
        "tools": [
            {"type": "function", "function": {"name": "raw"}},
            {"type": "function", "function": {"name": "lookup", "parameters": {}}},
        ],
        "tool_choice": "auto",
        "response_format": {"type": "json_object"},
        "user": "u-1",
        "logit_bias": {"1": 2},
    }  # fmt: skip


async def test_openai_forwards_caller_specifics_only_for_chat_callers(fake: FakeUpstream, build: Build) -> None:
    choice = ToolChoice(None, {"type": "allowed_tools"}, "messages")  # a choice chat has no words for
    request = conversation("messages", tool_choice=choice, extra={"metadata": {"user_id": "x"}})
    await build("openai", api_key=None).complete(request, "m")
    body, headers = fake.requests[0].body, fake.requests[0].headers
    assert "tool_choice" not in body and "metadata" not in body and "authorization" not in headers
    assert set(body) == {"model", "messages", "tools"}


NAMED = ToolChoice("tool", {"x": "as the caller wrote it"}, "responses", name="get_weather")
CROSS_CHOICES = [  # a tool choice from another format -> what the upstream receives (tool_choice, parallel_tool_calls)
    ("openai", ToolChoice("required", "r", "messages", parallel=False), ("required", False)),
    ("openai", ToolChoice("none", "n", "messages"), ("none", None)),
    ("openai", ToolChoice("auto", None, "messages", parallel=True), ("auto", True)),
    ("openai", NAMED, ({"type": "function", "function": {"name": "get_weather"}}, None)),
    ("anthropic", ToolChoice("required", "r", "chat"), ({"type": "any"}, None)),
    (
        "anthropic",
        ToolChoice("auto", None, "chat", parallel=False),
        ({"type": "auto", "disable_parallel_tool_use": True}, None),
    ),
    ("anthropic", ToolChoice("none", "n", "chat", parallel=False), ({"type": "none"}, None)),
    ("anthropic", NAMED, ({"type": "tool", "name": "get_weather"}, None)),
]


@pytest.mark.parametrize(("kind", "choice", "expected"), CROSS_CHOICES)
async def test_a_tool_choice_from_another_format_is_translated(
    fake: FakeUpstream, build: Build, kind: str, choice: ToolChoice, expected: tuple[Any, Any]
) -> None:
    await build(kind).complete(conversation(choice.format, tool_choice=choice), "m")
    body = fake.requests[0].body
    assert (body.get("tool_choice"), body.get("parallel_tool_calls")) == expected


@pytest.mark.parametrize("kind", KINDS)
async def test_a_tool_choice_without_tools_is_not_sent(fake: FakeUpstream, build: Build, kind: str) -> None:
    """Both APIs refuse a tool choice without tools; the caller's same-format choice is still forwarded as sent."""
    other = "messages" if kind == "openai" else "chat"
    choice = ToolChoice("required", "r", other, parallel=False)
    await build(kind).complete(Request(format=other, messages=HELLO.messages, tool_choice=choice), "m")  # type: ignore[arg-type]
    assert not {"tool_choice", "parallel_tool_calls"} & set(fake.requests[0].body)


async def test_openai_always_streams_with_usage(fake: FakeUpstream, build: Build) -> None:
    request = Request(format="chat", messages=HELLO.messages, extra={"stream_options": {"include_usage": False}})
    await events(build("openai"), request)
    assert fake.requests[0].body["stream"] is True
    assert fake.requests[0].body["stream_options"] == {"include_usage": True}


# --- OpenAI: what we read -------------------------------------------------------------------------------------------


async def test_openai_complete_reads_text_usage_and_model(fake: FakeUpstream, build: Build) -> None:
    fake.script(text="Hi there", usage=(30, 2, 20), model="gpt-test-2024")
    result = await build("openai").complete(HELLO, "gpt-test")
    assert result == Result([Text("Hi there")], FinishReason.STOP, Usage(30, 2, 20), "gpt-test-2024")


async def test_openai_stream_yields_deltas_finish_and_usage(fake: FakeUpstream, build: Build) -> None:
    fake.script(text="Hello from fake", usage=(9, 3, 4))
    assert await events(build("openai")) == [
        TextDelta("Hello "),
        TextDelta("from "),
        TextDelta("fake"),
        Finish(FinishReason.STOP),
        UsageReport(Usage(9, 3, 4)),
    ]


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("kind", KINDS)
async def test_tool_calls_come_back(fake: FakeUpstream, build: Build, kind: str, streaming: bool) -> None:
    calls = [{"id": "call_a", "name": "get_weather", "arguments": '{"city":"Paris"}'}, {"id": "call_b", "name": "now"}]
    fake.script(text="", tool_calls=calls)
    result = await answer(build(kind), streaming)
    assert result.content == [ToolCall("call_a", "get_weather", '{"city":"Paris"}'), ToolCall("call_b", "now", "{}")]
    assert result.finish_reason == FinishReason.TOOL_CALLS


async def test_openai_stream_starts_each_tool_call_with_its_id_and_name(fake: FakeUpstream, build: Build) -> None:
    fake.script(text="", tool_calls=[{"id": "call_a", "name": "get_weather", "arguments": '{"city":"Paris"}'}])
    got = await events(build("openai"))
    assert got[0] == ToolCallStart(0, "call_a", "get_weather")
    assert all(isinstance(e, ToolCallDelta) for e in got[1:-2]) and len(got[1:-2]) > 1


FINISHES = [
    ("openai", "stop", FinishReason.STOP),
    ("openai", "length", FinishReason.LENGTH),
    ("openai", "tool_calls", FinishReason.TOOL_CALLS),
    ("openai", "function_call", FinishReason.TOOL_CALLS),
    ("openai", "content_filter", FinishReason.CONTENT_FILTER),
    ("openai", "something_new", FinishReason.UNKNOWN),
    ("anthropic", "end_turn", FinishReason.STOP),
    ("anthropic", "stop_sequence", FinishReason.STOP_SEQUENCE),
    ("anthropic", "max_tokens", FinishReason.LENGTH),
    ("anthropic", "tool_use", FinishReason.TOOL_CALLS),
    ("anthropic", "refusal", FinishReason.CONTENT_FILTER),
    ("anthropic", "pause_turn", FinishReason.UNKNOWN),
]


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(("kind", "word", "reason"), FINISHES)
async def test_finish_reasons(
    fake: FakeUpstream, build: Build, kind: str, word: str, reason: FinishReason, streaming: bool
) -> None:
    fake.script(finish=word)
    assert (await answer(build(kind), streaming)).finish_reason == reason


# --- Anthropic ------------------------------------------------------------------------------------------------------


async def test_anthropic_translates_a_request(fake: FakeUpstream, build: Build) -> None:
    choice = ToolChoice("required", {"type": "any"}, "messages")
    request = conversation("messages", temperature=0.5, top_p=0.8, stop=["END"], tool_choice=choice)
    request.extra = {"metadata": {"user_id": "x"}, "stream": True}
    request.messages.insert(1, Message("user", [Text(""), Text("Also Lyon.")]))
    await build("anthropic", headers={"anthropic-beta": "b1"}).complete(request, "claude-test")
    sent = fake.requests[0]
    assert sent.path == "/v1/messages"
    assert (sent.headers["x-api-key"], sent.headers["anthropic-version"], sent.headers["anthropic-beta"]) == (
        KEY,
        "2023-06-01",
        "b1",
    )
    assert sent.body == {
        "model": "claude-test",
        "max_tokens": 4096,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}, {"type": "text", "text": "Also Lyon."}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "18C and sunny"},
                    {"type": "text", "text": "Thanks!"},
                    {"type": "document", "source": {"data": "d"}},
                ],
            },
        ],
        "temperature": 0.5, "top_p": 0.8, "stop_sequences": ["END"],
        "tools": [
            {"name": "get_weather", "description": "Current weather", "input_schema": WEATHER},
            {"name": "raw_lookup", "input_schema": WEATHER},
        ],
        "tool_choice": {"type": "any"},
        "metadata": {"user_id": "x"},
    }  # fmt: skip


async def test_anthropic_sends_the_callers_max_tokens_and_streams(fake: FakeUpstream, build: Build) -> None:
    choice = ToolChoice("auto", "auto", "chat")
    request = Request(format="chat", messages=HELLO.messages, max_tokens=77, tool_choice=choice, extra={"user": "u"})
    await events(build("anthropic", default_max_tokens=1000), request)
    assert fake.requests[0].body == {
        "model": "m",
        "max_tokens": 77,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello there"}]}],
        "stream": True,
    }


@pytest.mark.parametrize("streaming", [False, True])
async def test_anthropic_counts_cache_reads_as_input(fake: FakeUpstream, build: Build, streaming: bool) -> None:
    fake.script(text="Hi", usage=(5, 2, 40), model="claude-test-2025")
    result = await answer(build("anthropic"), streaming)
    assert result.usage == Usage(input_tokens=45, output_tokens=2, cached_input_tokens=40)
    assert result.text() == "Hi"
    assert streaming or result.upstream_model == "claude-test-2025"


async def test_anthropic_stream_events(fake: FakeUpstream, build: Build) -> None:
    fake.script(text="Sure thing", tool_calls=[{"id": "toolu_1", "name": "now"}], usage=(12, 8, 0))
    assert await events(build("anthropic")) == [
        UsageReport(Usage(12, 1, 0)),  # message_start's counts, with the first content
        TextDelta("Sure "),
        TextDelta("thing"),
        ToolCallStart(0, "toolu_1", "now"),
        ToolCallDelta(0, "{}"),
        Finish(FinishReason.TOOL_CALLS),
        UsageReport(Usage(12, 8, 0)),
    ]


async def test_anthropic_reports_input_tokens_with_the_first_content_not_before(
    fake: FakeUpstream, build: Build
) -> None:
    """A stream that fails after message_start but before any content has not started: it still raises on the first
    event, so the relay can fall back."""
    fake.script(text="Hi", fail_after=2, error="Overloaded")
    assert (await failure(anext(build("anthropic").stream(HELLO, "m")))).status == 529


def anthropic_mock(body: bytes) -> AnthropicUpstream:
    reply = httpx.Response(200, content=body, headers={"content-type": "application/json"})
    return AnthropicUpstream("mock", base_url="http://upstream.test", transport=httpx.MockTransport(lambda _: reply))


async def test_anthropic_carries_the_matched_stop_sequence() -> None:
    whole = orjson.dumps({
        "type": "message", "model": "c", "content": [{"type": "text", "text": "Hi"}],
        "stop_reason": "stop_sequence", "stop_sequence": "END", "usage": {"input_tokens": 3, "output_tokens": 1},
    })  # fmt: skip
    result = await anthropic_mock(whole).complete(HELLO, "m")
    assert (result.finish_reason, result.stop_sequence) == (FinishReason.STOP_SEQUENCE, "END")
    frames = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 3, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "Hi"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "stop_sequence", "stop_sequence": "END"},
         "usage": {"output_tokens": 1}},
        {"type": "message_stop"},
    ]  # fmt: skip
    got = await events(anthropic_mock(b"".join(b"data: " + orjson.dumps(f) + b"\n\n" for f in frames)))
    assert got == [
        UsageReport(Usage(3, 1, None)),
        TextDelta("Hi"),
        Finish(FinishReason.STOP_SEQUENCE, "END"),
        UsageReport(Usage(3, 1, None)),
    ]
    assert fold(got).stop_sequence == "END"


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


@pytest.mark.parametrize("kind", KINDS)
async def test_connections_are_kept_alive_and_reused(fake: FakeUpstream, build: Build, kind: str) -> None:
    upstream = build(kind)
    await upstream.complete(HELLO, "m")
    await events(upstream)
    await upstream.complete(HELLO, "m")
    assert len({r.peer for r in fake.requests}) == 1


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


# --- Echo -----------------------------------------------------------------------------------------------------------


def echo_request(**fields: Any) -> Request:
    messages = [
        Message("user", [Text("first question")]),
        Message("assistant", [Text("an answer")]),
        Message("user", [Text("say   it back")]),
    ]
    return Request(format="chat", messages=messages, system="be kind", **fields)


async def test_echo_answers_the_last_user_message() -> None:
    result = await EchoUpstream("echo").complete(echo_request(), "echo-1")
    assert result == Result([Text("Echo: say it back")], FinishReason.STOP, Usage(9, 4, 0), "echo-1")


async def test_echo_truncates_to_max_tokens() -> None:
    result = await EchoUpstream("echo").complete(echo_request(max_tokens=2), "echo-1")
    assert (result.text(), result.finish_reason, result.usage.output_tokens) == ("Echo: say", FinishReason.LENGTH, 2)


async def test_echo_streams_word_by_word_and_agrees_with_complete() -> None:
    echo = EchoUpstream("echo")
    got = await events(echo, echo_request())
    assert got == [
        TextDelta("Echo: "),
        TextDelta("say "),
        TextDelta("it "),
        TextDelta("back"),
        Finish(FinishReason.STOP),
        UsageReport(Usage(9, 4, 0)),
    ]
    whole = await echo.complete(echo_request(), "m")
    assert fold(got).content == whole.content and fold(got).usage == whole.usage
    assert got == await events(echo, echo_request()) and whole == await echo.complete(echo_request(), "m")


async def test_echo_counts_at_least_one_input_token() -> None:
    result = await EchoUpstream("echo").complete(Request(format="chat", messages=[]), "m")
    assert (result.text(), result.usage.input_tokens) == ("Echo:", 1)
