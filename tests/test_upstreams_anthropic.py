"""The Anthropic upstream against the fake: what we send, the usage and events we read, the matched stop sequence."""

from __future__ import annotations

import httpx
import orjson
import pytest

from handlers.inference.canonical import (
    Finish,
    FinishReason,
    Message,
    Request,
    Text,
    TextDelta,
    ToolCallDelta,
    ToolCallStart,
    ToolChoice,
    Usage,
    UsageReport,
    fold,
)
from handlers.inference.upstreams import AnthropicUpstream
from tests.fake_upstream import FakeUpstream
from tests.upstream_support import (
    HELLO,
    KEY,
    WEATHER,
    Build,
    answer,
    conversation,
    events,
    failure,
    fixture_build,  # noqa: F401  (a fixture)
    fixture_fake,  # noqa: F401  (a fixture)
    fixture_server,  # noqa: F401  (a fixture)
)


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
    assert result.usage == Usage(input_tokens=45, output_tokens=2, cached_input_tokens=40, cache_write_tokens=0)
    assert result.text() == "Hi"
    assert streaming or result.upstream_model == "claude-test-2025"


async def test_anthropic_stream_events(fake: FakeUpstream, build: Build) -> None:
    fake.script(text="Sure thing", tool_calls=[{"id": "toolu_1", "name": "now"}], usage=(12, 8, 0))
    assert await events(build("anthropic")) == [
        UsageReport(Usage(12, 1, 0, 0)),  # message_start's counts, with the first content
        TextDelta("Sure "),
        TextDelta("thing"),
        ToolCallStart(0, "toolu_1", "now"),
        ToolCallDelta(0, "{}"),
        Finish(FinishReason.TOOL_CALLS),
        UsageReport(Usage(12, 8, 0, 0)),
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
