"""The chat completions wire format: parse rules and the rendered answer."""

from __future__ import annotations

from typing import Any

import pytest

from generated import models as g
from handlers.errors import ApiError
from handlers.inference.canonical import Message, Text, Tool, ToolCall, ToolChoice, ToolResult, Unknown
from handlers.inference.formats import chat
from tests.formats_support import ANSWER, RESULTS, USER, bad, parse, render

# --- parse ---------------------------------------------------------------------------------------------------------


def test_chat_parse_content_and_roles() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:,"}}
    request = parse(
        "chat",
        {
            "messages": [
                {"role": "system", "content": "Be terse."},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "Look: "}, image, {"type": "text", "text": "ok?"}],
                },
                {"role": "developer", "content": [{"type": "text", "text": "Use metric."}]},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}],
                },
                {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "42"}]},
            ]
        },
    )
    assert request.system == "Be terse.\n\nUse metric."
    assert request.messages == [
        Message("user", [Text("Look: "), Unknown(image, "chat"), Text("ok?")]),
        Message("assistant", [ToolCall("c1", "f", '{"a":1}')]),
        Message("tool", [ToolResult("c1", "42")]),
    ]


def test_chat_parse_fields() -> None:
    weather = {
        "type": "function",
        "function": {"name": "weather", "description": "d", "parameters": {"type": "object"}},
    }
    custom = {"type": "custom", "custom": {"name": "grammar"}}
    request = parse(
        "chat",
        {
            "model": "fast",
            "messages": USER,
            "max_completion_tokens": 12.0,
            "temperature": 0.5,
            "reasoning_effort": "HIGH",
            "stream": True,
            "stream_options": {"include_usage": True},
            "top_p": 0.9,
            "stop": "END",
            "seed": 7,
            "tools": [weather, custom],
            "tool_choice": {"type": "function", "function": {"name": "weather"}},
            "response_format": {"type": "json_object"},
            "n": 1,
            "user": "u1",
        },
    )
    assert (request.model, request.max_tokens, request.temperature, request.effort) == ("fast", 12, 0.5, "high")
    assert (request.stream, request.include_usage, request.top_p, request.stop, request.seed) == (
        True,
        True,
        0.9,
        ["END"],
        7,
    )
    assert request.tools == [
        Tool("weather", "d", {"type": "object"}, weather, "chat"),
        Tool("", None, {}, custom, "chat"),
    ]
    choice = {"type": "function", "function": {"name": "weather"}}
    assert request.tool_choice == ToolChoice("tool", choice, "chat", name="weather")
    assert request.response_format == {"type": "json_object"}
    assert request.extra == {"n": 1, "user": "u1"}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"top_p": "0.9", "stop": 5, "seed": 1.5}, (None, None, None)),
        ({"top_p": True, "stop": ["a", 1], "seed": True}, (None, None, None)),
        ({"top_p": 1, "stop": ["a", "b"], "seed": 3.0}, (1.0, ["a", "b"], 3)),
    ],
)
def test_chat_parse_sampling_types(extra: dict[str, Any], expected: tuple[Any, ...]) -> None:
    request = parse("chat", {"messages": USER, **extra})
    assert (request.top_p, request.stop, request.seed) == expected
    assert request.extra == {}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"max_tokens": 5, "max_completion_tokens": 5}, "max_tokens"),
        ({"max_tokens": 12.5}, "max_tokens"),
        ({"max_completion_tokens": 3.25}, "max_completion_tokens"),
        ({"messages": [{"role": "critic", "content": "x"}]}, "messages.0.role"),
        ({"messages": [{"content": "x"}]}, "messages.0.role"),
        ({"messages": [*USER, {"role": "user", "content": ["bare"]}]}, "messages.1.content.0"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]}, "messages.0.content.0.text"),
        ({"messages": [{"role": "assistant", "tool_calls": {"id": "x"}}]}, "messages.0.tool_calls"),
        ({"messages": [{"role": "assistant", "tool_calls": ["x"]}]}, "messages.0.tool_calls.0.function"),
        (
            {"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]},
            "messages.0.tool_calls.0.function.name",
        ),
    ],
)
def test_chat_parse_errors(body: dict[str, Any], param: str) -> None:
    error = bad("chat", {"messages": USER, **body})
    assert error.param == param
    if param == "max_tokens" and "max_completion_tokens" in body:
        assert "send max_tokens or max_completion_tokens, not both" in error.message


def test_chat_parse_content_of_another_type_is_a_400() -> None:
    # The generated model refuses it; a body built without validation must still answer 400, never 500.
    body = g.ChatCompletionRequest.model_construct(messages=[g.ChatMessage.model_construct(role="user", content=7)])
    with pytest.raises(ApiError) as caught:
        chat.parse(body)
    assert (caught.value.status, caught.value.param) == (400, "messages.0.content")


def test_chat_tool_message_without_its_id_is_left_to_the_upstream() -> None:
    req = parse("chat", {"messages": [*USER, {"role": "tool", "content": "x"}]})
    assert req.messages[-1] == Message("tool", [ToolResult("", "x")])


# --- render --------------------------------------------------------------------------------------------------------


def test_render_chat() -> None:
    rendered = render("chat", RESULTS["tools"])
    assert (rendered["id"], rendered["object"], rendered["created"]) == (
        "chatcmpl-dec123",
        "chat.completion",
        ANSWER.created,
    )
    choice = rendered["choices"][0]
    assert choice["message"]["content"] is None and choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
    ]
    text = render("chat", RESULTS["text"])
    assert "tool_calls" not in text["choices"][0]["message"]
    assert text["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 2},
    }
    finishes = [render("chat", RESULTS[c])["choices"][0]["finish_reason"] for c in ("length", "filter", "unknown")]
    assert finishes == ["length", "content_filter", "stop"]
    assert render("chat", RESULTS["unknown"])["choices"][0]["message"]["content"] == ""
