"""The Responses upstream against the fake's /v1/responses: what we send (a Responses caller's body as sent, another
format's request translated), what we read (text, tool calls, reasoning, usage), and how it fails."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import openai
import orjson
import pytest

from handlers.inference.canonical import (
    Event,
    Finish,
    FinishReason,
    Image,
    Message,
    Request,
    Result,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallStart,
    Usage,
    UsageReport,
    fold,
)
from handlers.inference.formats.base import Traits, UpstreamOptions
from handlers.inference.upstreams.base import PLAIN, UpstreamError
from handlers.inference.upstreams.responses import ResponsesUpstream
from tests.fake_upstream import FakeUpstream
from tests.formats_support import parse
from tests.upstream_support import (
    HELLO,
    KEY,
    failure,
    fixture_fake,  # noqa: F401  (a fixture)
    fixture_server,  # noqa: F401  (a fixture)
)

REASONING = Traits(reasoning=True)


@pytest.fixture(name="upstream")
async def fixture_upstream(fake: FakeUpstream) -> AsyncIterator[ResponsesUpstream]:
    upstream = ResponsesUpstream("resp", base_url=fake.url, api_key=KEY, headers={"x-org": "acme"})
    yield upstream
    await upstream.aclose()


async def events(upstream: ResponsesUpstream, request: Request = HELLO, traits: Traits = PLAIN) -> list[Event]:
    return [event async for event in upstream.stream(request, "gpt-up", traits)]


async def answer(upstream: ResponsesUpstream, streaming: bool, request: Request = HELLO) -> Result:
    return fold(await events(upstream, request)) if streaming else await upstream.complete(request, "gpt-up")


# --- what we send ---------------------------------------------------------------------------------------------------


async def test_a_responses_callers_body_goes_as_sent(fake: FakeUpstream, upstream: ResponsesUpstream) -> None:
    caller = {
        "model": "alias", "stream": True, "instructions": "Be brief.", "max_output_tokens": 300,
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Q"},
                                         {"type": "input_image", "image_url": "https://x/cat.png", "detail": "low"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A"}]},
            {"role": "user", "content": "Q2"},
        ],
        "tools": [{"type": "web_search"}], "text": {"format": {"type": "json_object"}},
        "reasoning": {"effort": "high", "summary": "auto"}, "metadata": {"k": "v"}, "undeclared": 1,
    }  # fmt: skip
    request = parse("responses", caller)
    request.effort = "high"
    await events(upstream, request, REASONING)
    sent = fake.requests[0]
    assert sent.path == "/v1/responses"
    assert sent.headers["authorization"] == f"Bearer {KEY}" and sent.headers["x-org"] == "acme"
    expected = {key: value for key, value in caller.items() if key != "undeclared"}
    assert sent.body == {
        **expected, "model": "gpt-up", "stream": True, "store": False, "include": ["reasoning.encrypted_content"]
    }  # fmt: skip


async def test_another_formats_request_is_translated(fake: FakeUpstream, upstream: ResponsesUpstream) -> None:
    request = Request(
        format="messages",
        system="Be brief.",
        messages=[
            Message("user", [Text("What is this?"), Image(data="iVBOR", media_type="image/png")]),
            Message("assistant", [Thinking("Hmm.", signature="sig", format="messages"), Text("A cat.")]),
            Message("user", [Text("Sure?")]),
        ],
        max_tokens=500,
        effort="low",
        thinking_budget=2048,
        extra={"metadata": {"user_id": "u"}},
    )
    await upstream.complete(request, "gpt-up", REASONING)
    assert fake.requests[0].body == {
        "model": "gpt-up",
        "input": [
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "What is this?"},
                {"type": "input_image", "detail": "auto", "image_url": "data:image/png;base64,iVBOR"},
            ]},
            {"type": "message", "role": "assistant", "content": "A cat."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Sure?"}]},
        ],
        "instructions": "Be brief.",
        "max_output_tokens": 500,
        "reasoning": {"effort": "low"},
        "store": False,
    }  # fmt: skip


async def test_passthrough_keeps_fields_no_format_defines(fake: FakeUpstream) -> None:
    upstream = ResponsesUpstream("resp", base_url=fake.url, options=UpstreamOptions(passthrough=True))
    try:
        await upstream.complete(parse("responses", {"input": "x", "vendor_knob": 3}), "m")
    finally:
        await upstream.aclose()
    assert fake.requests[0].body["vendor_knob"] == 3 and "authorization" not in fake.requests[0].headers


# --- what we read ---------------------------------------------------------------------------------------------------


async def test_complete_reads_text_usage_and_model(fake: FakeUpstream, upstream: ResponsesUpstream) -> None:
    fake.script(text="Hi there", usage=(30, 2, 20, 4), model="gpt-up-2025")
    result = await upstream.complete(HELLO, "gpt-up")
    assert result == Result([Text("Hi there")], FinishReason.STOP, Usage(30, 2, 20, 4, reasoning_tokens=0), "gpt-up-2025")


async def test_stream_yields_deltas_finish_and_usage(fake: FakeUpstream, upstream: ResponsesUpstream) -> None:
    fake.script(text="Hello from fake", usage=(9, 3, 4))
    assert await events(upstream) == [
        TextDelta("Hello "),
        TextDelta("from "),
        TextDelta("fake"),
        Finish(FinishReason.STOP),
        UsageReport(Usage(9, 3, 4, 0, reasoning_tokens=0)),
    ]
    assert fake.requests[0].body["stream"] is True and "stream_options" not in fake.requests[0].body


@pytest.mark.parametrize("streaming", [False, True])
async def test_tool_calls_come_back(fake: FakeUpstream, upstream: ResponsesUpstream, streaming: bool) -> None:
    calls = [{"id": "call_a", "name": "get_weather", "arguments": '{"city":"Paris"}'}, {"id": "call_b", "name": "now"}]
    fake.script(text="", tool_calls=calls)
    result = await answer(upstream, streaming)
    assert result.content == [ToolCall("call_a", "get_weather", '{"city":"Paris"}'), ToolCall("call_b", "now", "{}")]
    assert result.finish_reason == FinishReason.TOOL_CALLS


async def test_stream_starts_each_tool_call_with_its_id_and_name(
    fake: FakeUpstream, upstream: ResponsesUpstream
) -> None:
    fake.script(text="", tool_calls=[{"id": "call_a", "name": "get_weather", "arguments": '{"city":"Paris"}'}])
    got = await events(upstream)
    assert got[0] == ToolCallStart(0, "call_a", "get_weather")
    assert all(isinstance(e, ToolCallDelta) for e in got[1:-2]) and len(got[1:-2]) > 1


@pytest.mark.parametrize("streaming", [False, True])
async def test_reasoning_comes_back_with_its_encrypted_content(
    fake: FakeUpstream, upstream: ResponsesUpstream, streaming: bool
) -> None:
    fake.script(text="Done.", reasoning=["First I look.", "Then I answer."])
    result = await answer(upstream, streaming)
    thought = Thinking("First I look.\n\nThen I answer.", encrypted="gAAAA-fake", id="rs_fake", format="responses")
    assert result.content == [thought, Text("Done.")] and result.finish_reason == FinishReason.STOP


async def test_stream_reasoning_events(fake: FakeUpstream, upstream: ResponsesUpstream) -> None:
    fake.script(text="Ok", reasoning=["Think"])
    got = await events(upstream)
    assert got[:3] == [
        ThinkingDelta(id="rs_fake", format="responses"),
        ThinkingDelta("Think", id="rs_fake", format="responses"),
        ThinkingDelta(encrypted="gAAAA-fake", id="rs_fake", format="responses"),
    ]


FINISHES = [
    (None, FinishReason.STOP),
    ("max_output_tokens", FinishReason.LENGTH),
    ("content_filter", FinishReason.CONTENT_FILTER),
    ("something_new", FinishReason.UNKNOWN),
]


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(("word", "reason"), FINISHES)
async def test_finish_reasons(
    fake: FakeUpstream, upstream: ResponsesUpstream, word: str | None, reason: FinishReason, streaming: bool
) -> None:
    fake.script(finish=word)
    assert (await answer(upstream, streaming)).finish_reason == reason


@pytest.mark.parametrize("streaming", [False, True])
async def test_the_sdk_reads_the_fake_as_it_reads_openai(fake: FakeUpstream, streaming: bool) -> None:
    """The fake's /v1/responses is the real shape: the official SDK reads it, whole and streamed."""
    fake.script(text="Hello from fake", tool_calls=[{"name": "f"}], reasoning=["Why"], usage=(5, 4, 1))
    client = openai.AsyncOpenAI(api_key="k", base_url=fake.url, max_retries=0)
    if streaming:
        async with client.responses.stream(model="m", input="hi") as stream:
            final = await stream.get_final_response()
    else:
        final = await client.responses.create(model="m", input="hi")
    await client.close()
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call"]
    assert final.output_text == "Hello from fake" and final.usage is not None and final.usage.input_tokens == 5


# --- how it fails ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True])
async def test_an_error_status_carries_the_upstreams_message(
    fake: FakeUpstream, upstream: ResponsesUpstream, streaming: bool
) -> None:
    fake.script(status=400, error="Invalid 'input[0]': bad")
    error = await failure(answer(upstream, streaming))
    assert (error.kind, error.status, error.message, error.caller_fault) == (
        "status",
        400,
        "Invalid 'input[0]': bad",
        True,
    )
    fake.script(status=429, error="slow down", headers={"retry-after": "7"})
    error = await failure(answer(upstream, streaming))
    assert (error.status, error.retry_after, error.retryable) == (429, 7.0, True)


async def test_a_failed_response_mid_stream_raises(fake: FakeUpstream, upstream: ResponsesUpstream) -> None:
    """response.failed after some text: the upstream's fault (server_error), with its message."""
    fake.script(fail_after=6, error="The model crashed")
    got: list[Event] = []
    with pytest.raises(UpstreamError) as caught:
        async for event in upstream.stream(HELLO, "m"):
            got.append(event)
    assert got == [TextDelta("Hello "), TextDelta("from ")]
    error = caught.value
    assert (error.kind, error.status, error.message, error.retryable) == ("status", 500, "The model crashed", True)


async def test_a_cut_stream_raises_while_iterating(fake: FakeUpstream, upstream: ResponsesUpstream) -> None:
    fake.script(cut_after=6)
    got: list[Event] = []
    with pytest.raises(UpstreamError) as caught:
        async for event in upstream.stream(HELLO, "m"):
            got.append(event)
    assert got == [TextDelta("Hello "), TextDelta("from ")] and caught.value.kind == "protocol"


async def test_a_stream_that_ends_before_response_completed_is_a_protocol_failure() -> None:
    created = {"type": "response.created", "sequence_number": 0, "response": {"id": "r", "output": []}}
    delta = {"type": "response.output_text.delta", "item_id": "m", "output_index": 0, "content_index": 0,
             "delta": "Hi", "sequence_number": 1}  # fmt: skip
    body = b"".join(b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in (created, delta))

    def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    upstream = ResponsesUpstream("resp", base_url="http://up/v1", transport=httpx.MockTransport(reply))
    try:
        error = await failure(events(upstream))
    finally:
        await upstream.aclose()
    assert (error.kind, error.message) == ("protocol", "upstream resp ended the stream before response.completed")


@pytest.mark.parametrize("streaming", [False, True])
async def test_malformed_json_is_a_protocol_failure(
    fake: FakeUpstream, upstream: ResponsesUpstream, streaming: bool
) -> None:
    fake.script(malformed=True)
    assert (await failure(answer(upstream, streaming))).kind == "protocol"
