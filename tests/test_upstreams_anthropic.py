"""The Anthropic upstream against the fake: what we send, the usage and events we read, the matched stop sequence."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from handlers.inference.canonical import (
    CacheMark,
    Document,
    Finish,
    FinishReason,
    Image,
    ItemDone,
    ItemProgress,
    ItemStart,
    Message,
    OutputFormat,
    Request,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStart,
    ToolChoice,
    Unknown,
    Usage,
    UsageReport,
    fold,
)
from handlers.inference.formats.base import Traits
from handlers.inference.upstreams import AnthropicUpstream
from tests.fake_upstream import FakeUpstream
from tests.formats_support import parse
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
    """Another format's conversation in Anthropic's words. (It was a Messages request rendered from canonical with
    its extra fields merged; a Messages caller's body is now passed through, see the test after this one.)"""
    choice = ToolChoice("required", "required", "chat")
    request = conversation("chat", temperature=0.5, top_p=0.8, stop=["END"], tool_choice=choice, extra={"user": "x"})
    request.messages[0].content[1] = Image(url="https://x.test/map.png")  # a chat image part, as chat parses it
    request.messages[3].content.insert(0, Document(data="JVBERi0=", media_type="application/pdf", cache=CacheMark()))
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
            {"role": "user", "content": [
                {"type": "text", "text": "Weather in Paris?"},
                {"type": "image", "source": {"type": "url", "url": "https://x.test/map.png"}},
                {"type": "text", "text": "Also Lyon."},
            ]},
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
                    {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                                    "data": "JVBERi0="}, "cache_control": {"type": "ephemeral"}},
                    {"type": "text", "text": "Thanks!"},
                    {"type": "document", "source": {"data": "d"}},  # Anthropic's own block, as it came
                ],
            },
        ],
        "temperature": 0.5, "top_p": 0.8, "stop_sequences": ["END"],
        "tools": [
            {"name": "get_weather", "description": "Current weather", "input_schema": WEATHER},
            {"name": "raw_lookup", "input_schema": WEATHER},
        ],
        "tool_choice": {"type": "any"},
    }  # fmt: skip


async def test_anthropic_receives_images_and_documents_as_sources(fake: FakeUpstream, build: Build) -> None:
    """A chat caller's data-URL image, https image and PDF file part, and data URLs kept as URLs (split by
    data_url_source), as Anthropic's image and document blocks."""
    request = parse("chat", {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4A=="}},
        {"type": "image_url", "image_url": {"url": "https://x.test/cat.png"}},
        {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0="}},
    ]}]})  # fmt: skip
    request.messages[0].content += [
        Image(url="data:image/webp;base64,UklGRg=="),
        Image(data="iVBO"),  # no media type: PNG
        Document(url="data:application/pdf;base64,JVBE"),
        Document(url="https://x.test/a.pdf"),
        Image(url="data:image/svg+xml,<svg/>"),  # not base64: a URL as given
    ]
    await build("anthropic").complete(request, "claude-test")
    assert fake.requests[0].body["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4A=="}},
        {"type": "image", "source": {"type": "url", "url": "https://x.test/cat.png"}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="},
         "title": "a.pdf"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/webp", "data": "UklGRg=="}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}},
        {"type": "document", "source": {"type": "url", "url": "https://x.test/a.pdf"}},
        {"type": "image", "source": {"type": "url", "url": "data:image/svg+xml,<svg/>"}},
    ]  # fmt: skip


async def test_anthropic_passes_a_messages_callers_body_and_beta_header(fake: FakeUpstream, build: Build) -> None:
    thinking = {"type": "thinking", "thinking": "Hmm.", "signature": "EuYBCkQYAiJA+/=="}
    caller = {
        "model": "alias", "max_tokens": 3000, "stream": False,
        "system": [{"type": "text", "text": "Long rules.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Q", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [thinking, {"type": "text", "text": "A"}]},
            {"role": "user", "content": "Q2"},
        ],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "metadata": {"user_id": "u1"}, "top_k": 4, "undeclared": 1,
    }  # fmt: skip
    request = parse("messages", caller)
    request.headers = {"anthropic-beta": "interleaved-thinking-2025-05-14"}
    await build("anthropic").complete(request, "claude-test", Traits(reasoning=True))
    sent = fake.requests[0]
    assert sent.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    expected = {key: value for key, value in caller.items() if key not in ("stream", "undeclared")}
    assert sent.body == {**expected, "model": "claude-test"}
    assert orjson.dumps(sent.body["messages"]) == orjson.dumps(caller["messages"])


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


@pytest.mark.parametrize("streaming", [False, True])
async def test_anthropic_counts_cache_writes_apart(fake: FakeUpstream, build: Build, streaming: bool) -> None:
    fake.script(text="Hi", usage=(5, 2, 40, 300))
    result = await answer(build("anthropic"), streaming)
    assert result.usage == Usage(input_tokens=345, output_tokens=2, cached_input_tokens=40, cache_write_tokens=300)


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


def sse_body(*frames: Any) -> bytes:
    return b"".join(b"event: " + str(f["type"]).encode() + b"\ndata: " + orjson.dumps(f) + b"\n\n" for f in frames)


START = {"type": "message_start", "message": {"usage": {"input_tokens": 3, "output_tokens": 1,
                                                        "cache_creation_input_tokens": 7}}}  # fmt: skip


async def test_anthropic_streams_thinking_and_relays_server_tool_blocks_as_items() -> None:
    frames = [
        START,
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "",
                                                                      "signature": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Plan"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig=="}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "opaque"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": SEARCH},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"q": 1}'}},
        {"type": "content_block_stop", "index": 2},
        {"type": "content_block_start", "index": 3, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 3, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 3},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]  # fmt: skip
    got = await events(anthropic_mock(sse_body(*frames)))
    assert got == [
        UsageReport(Usage(10, 1, None, 7)),
        ThinkingDelta("", format="messages"),
        ThinkingDelta("Plan", format="messages"),
        ThinkingDelta(signature="sig==", format="messages"),
        ThinkingDelta(redacted="opaque", format="messages"),
        ItemStart(Unknown(SEARCH, "messages")),
        ItemProgress({"type": "content_block_delta", "delta": {"type": "input_json_delta", "partial_json": '{"q": 1}'}},
                     "messages"),
        ItemDone(Unknown({**SEARCH, "input": {"q": 1}}, "messages")),
        TextDelta("Hi"),
        Finish(FinishReason.STOP),
        UsageReport(Usage(10, 9, None, 7)),
    ]
    # A signature ends its thinking block, and redacted thinking is a block of its own.
    assert fold(got).content[:3] == [Thinking("Plan", signature="sig==", format="messages"),
                                     Thinking("", redacted="opaque", format="messages"),
                                     Unknown({**SEARCH, "input": {"q": 1}}, "messages")]


SEARCH = {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}}


async def test_anthropic_reads_a_streamed_structured_output_tool_as_text() -> None:
    tool = {"type": "tool_use", "id": "toolu_1", "name": "specway_json_output", "input": {}}
    frames = [
        START,
        {"type": "content_block_start", "index": 0, "content_block": tool},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"a":'}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "1}"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
    ]
    result = fold(await events(anthropic_mock(sse_body(*frames))))
    assert (result.content, result.finish_reason) == ([Text('{"a":1}')], FinishReason.STOP)
    empty = [*frames[:2], frames[4], *frames[5:]]  # a tool call with no input streams no JSON
    assert fold(await events(anthropic_mock(sse_body(*empty)))).content == [Text("{}")]


async def test_anthropic_answers_structured_output_asked_in_another_format() -> None:
    """The whole path for a chat caller's json_schema: a forced tool out, its input back as the answer's text."""
    sent: list[dict[str, Any]] = []
    reply = orjson.dumps({
        "type": "message", "model": "c", "stop_reason": "tool_use", "usage": {"input_tokens": 3, "output_tokens": 4},
        "content": [{"type": "tool_use", "id": "t", "name": "specway_json_city", "input": {"city": "Paris"}}],
    })  # fmt: skip

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(orjson.loads(request.content))
        return httpx.Response(200, content=reply, headers={"content-type": "application/json"})

    upstream = AnthropicUpstream("mock", base_url="http://upstream.test", transport=httpx.MockTransport(handler))
    output = OutputFormat("json_schema", schema=WEATHER, name="city")
    result = await upstream.complete(Request(format="chat", messages=HELLO.messages, output=output), "m")
    assert sent[0]["tool_choice"] == {"type": "tool", "name": "specway_json_city"}
    assert (result.text(), result.finish_reason) == ('{"city":"Paris"}', FinishReason.STOP)
