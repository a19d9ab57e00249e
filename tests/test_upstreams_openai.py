"""The OpenAI upstream against the fake: what we send and what we read. The checks that hold for both kinds (tool
choices from another format, tool calls, finish reasons) run here on each kind side by side."""

from __future__ import annotations

from typing import Any

import pytest

from handlers.inference.canonical import (
    Finish,
    FinishReason,
    Message,
    Request,
    Result,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallStart,
    ToolChoice,
    Unknown,
    Usage,
    UsageReport,
)
from handlers.inference.formats import messages
from handlers.inference.formats.base import Traits
from tests.fake_upstream import FakeUpstream
from tests.formats_support import parse
from tests.upstream_support import (
    HELLO,
    KEY,
    KINDS,
    Build,
    answer,
    conversation,
    events,
    fixture_build,  # noqa: F401  (a fixture)
    fixture_fake,  # noqa: F401  (a fixture)
    fixture_server,  # noqa: F401  (a fixture)
)

# --- OpenAI: what we send -------------------------------------------------------------------------------------------

SPEAKS = {"openai": "chat", "anthropic": "messages"}


def speakable(kind: str, request: Request) -> Request:
    """`request` without the parts only its own format has, which an upstream of another format refuses."""
    own = SPEAKS[kind]
    request.messages = [
        Message(m.role, [b for b in m.content if not isinstance(b, Unknown) or b.format == own])
        for m in request.messages
    ]
    return request


async def test_openai_passes_a_chat_callers_body_through(fake: FakeUpstream, build: Build) -> None:
    """Same format: the caller's body as sent, with the upstream's model, the token limit and the streaming fields
    the gateway owns; a field no format defines is dropped."""
    body = {
        "model": "fast",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]},
            {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}}]},
        ],
        "max_tokens": 50, "logit_bias": {"1": 2}, "user": "u-1", "reasoning_effort": "low", "n": 1,
        "tools": [{"type": "custom", "custom": {"name": "grammar"}}], "tool_choice": "required",
        "stream": True, "stream_options": {"include_usage": False}, "not_a_field": True,
    }  # fmt: skip
    request = parse("chat", body)
    await build("openai").complete(request, "gpt-test", Traits(reasoning=True))
    await events(build("openai"), request)
    owned = {"stream", "stream_options", "not_a_field", "max_tokens", "reasoning_effort"}
    kept = {k: v for k, v in body.items() if k not in owned}
    whole, streamed = fake.requests[0].body, fake.requests[1].body
    assert whole == {**kept, "model": "gpt-test", "max_completion_tokens": 50, "reasoning_effort": "low"}
    # Not a reasoning model: max_tokens, and no effort (it was for routing only).
    assert streamed == {
        **kept,
        "model": "m",
        "max_tokens": 50,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def test_openai_translates_a_chat_request(fake: FakeUpstream, build: Build) -> None:
    """A chat request the gateway built itself (no caller body) is rendered from canonical, its own fields kept."""
    request = speakable("openai", conversation(
        "chat",
        max_tokens=50, temperature=0.2, top_p=0.9, stop=["END"], seed=7,
        tool_choice=ToolChoice("auto", "auto", "chat"), response_format={"type": "json_object"},
        extra={"user": "u-1", "model": "not-this", "messages": [], "logit_bias": {"1": 2}},
    ))  # fmt: skip
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


async def test_openai_forwards_caller_specifics_only_for_chat_callers(
    fake: FakeUpstream, build: Build, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(messages, "ADVISORY", frozenset({"metadata"}), raising=False)  # Messages says so of it
    choice = ToolChoice(None, {"type": "allowed_tools"}, "messages")  # a choice chat has no words for
    request = speakable("openai", conversation("messages", tool_choice=choice, extra={"metadata": {"user_id": "x"}}))
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
    await build(kind).complete(speakable(kind, conversation(choice.format, tool_choice=choice)), "m")
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
    assert result == Result([Text("Hi there")], FinishReason.STOP, Usage(30, 2, 20, reasoning_tokens=0), "gpt-test-2024")


async def test_openai_stream_yields_deltas_finish_and_usage(fake: FakeUpstream, build: Build) -> None:
    fake.script(text="Hello from fake", usage=(9, 3, 4))
    assert await events(build("openai")) == [
        TextDelta("Hello "),
        TextDelta("from "),
        TextDelta("fake"),
        Finish(FinishReason.STOP),
        UsageReport(Usage(9, 3, 4, reasoning_tokens=0)),
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
