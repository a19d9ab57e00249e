"""The Anthropic messages wire format: parse rules and the rendered answer."""

from __future__ import annotations

from typing import Any

import anthropic.types as anthropic_types
import pytest

from handlers.inference.canonical import (
    FinishReason,
    Message,
    Result,
    Text,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
    Unknown,
    Usage,
)
from tests.formats_support import RESULTS, USER, bad, parse, render

# --- parse ---------------------------------------------------------------------------------------------------------


def test_messages_parse_blocks() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}
    request = parse(
        "messages",
        {
            "system": [{"type": "text", "text": "One."}, {"type": "text", "text": "Two."}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "See"}, image]},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Checking."},
                        {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "42"}]},
                        {"type": "tool_result", "tool_use_id": "t2", "content": "7", "is_error": True},
                        {"type": "text", "text": "Thanks"},
                    ],
                },
            ],
        },
    )
    assert request.system == "One.\n\nTwo."
    assert request.messages == [
        Message("user", [Text("See"), Unknown(image, "messages")]),
        Message("assistant", [Text("Checking."), ToolCall("t1", "f", '{"a":1}')]),
        Message("tool", [ToolResult("t1", "42")]),
        Message("tool", [ToolResult("t2", "7")]),
        Message("user", [Text("Thanks")]),
    ]


@pytest.mark.parametrize(
    ("system", "expected"),
    [("Be brief.", "Be brief."), ([], None), ("", None), ([{"type": "text", "text": "A"}, {"type": "x"}], "A")],
)
def test_messages_parse_system(system: Any, expected: str | None) -> None:
    assert parse("messages", {"system": system, "messages": USER}).system == expected


@pytest.mark.parametrize(
    ("thinking", "effort", "budget"),
    [
        ("High", "high", None),
        ({"effort": "LOW"}, "low", None),
        ({"type": "enabled", "budget_tokens": 2048}, None, 2048),
        ({"type": "disabled"}, None, None),
        ({"type": "enabled", "budget_tokens": "lots"}, None, None),
    ],
)
def test_messages_parse_thinking(thinking: Any, effort: str | None, budget: int | None) -> None:
    request = parse("messages", {"messages": USER, "thinking": thinking})
    assert (request.effort, request.thinking_budget) == (effort, budget)


def test_messages_parse_fields() -> None:
    tool = {"name": "f", "description": "d", "input_schema": {"type": "object"}}
    search = {"type": "web_search_20250305", "name": "web_search"}
    request = parse(
        "messages",
        {
            "model": "m",
            "messages": USER,
            "max_tokens": 256,
            "temperature": 1,
            "stream": True,
            "stop_sequences": ["\n\n"],
            "top_p": 0.5,
            "tools": [tool, search],
            "tool_choice": {"type": "auto"},
            "metadata": {"user_id": "u"},
            "top_k": 5,
        },
    )
    assert (request.model, request.max_tokens, request.temperature, request.stream) == ("m", 256, 1.0, True)
    assert (request.stop, request.top_p) == (["\n\n"], 0.5)
    assert request.tool_choice == ToolChoice("auto", {"type": "auto"}, "messages")
    assert request.tools == [
        Tool("f", "d", {"type": "object"}, tool, "messages"),
        Tool("", None, {}, search, "messages"),
    ]
    assert request.extra == {"metadata": {"user_id": "u"}, "top_k": 5}


def test_messages_parse_refuses_a_system_turn_as_anthropic_does() -> None:
    error = bad("messages", {"system": "A", "messages": [{"role": "system", "content": "B"}, *USER]})
    assert error.param == "messages.0.role"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": [1]}]}, "messages.0.content.0"),
        ({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}, "messages.0.content.0.tool_use_id"),
        (
            {"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "x"}]}]},
            "messages.0.content.0.name",
        ),
        ({"system": ["text"]}, "system.0"),
    ],
)
def test_messages_parse_errors(body: dict[str, Any], param: str) -> None:
    assert bad("messages", {"messages": USER, **body}).param == param


# --- render --------------------------------------------------------------------------------------------------------


def test_render_messages() -> None:
    rendered = render("messages", RESULTS["both"])
    assert (rendered["id"], rendered["stop_reason"], rendered["stop_sequence"]) == ("msg_dec123", "tool_use", None)
    assert rendered["content"] == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
        # Arguments that are not a JSON object are kept as text, the one rule both directions share.
        {"type": "tool_use", "id": "call_2", "name": "f", "input": {"arguments": "not json"}},
    ]
    # Anthropic counts cache reads apart from input_tokens.
    assert render("messages", RESULTS["text"])["usage"] == {
        "input_tokens": 8,
        "output_tokens": 5,
        "cache_read_input_tokens": 2,
    }
    empty = render("messages", RESULTS["unknown"])
    assert empty["content"] == [{"type": "text", "text": ""}] and empty["usage"] == {
        "input_tokens": 0,
        "output_tokens": 0,
    }
    stops = [render("messages", RESULTS[c])["stop_reason"] for c in ("text", "length", "filter", "unknown")]
    assert stops == ["end_turn", "max_tokens", "refusal", "end_turn"]


@pytest.mark.parametrize("sequence", ["END", None])  # None: the upstream did not say which
def test_a_stop_sequence_is_told_to_messages_callers_only(sequence: str | None) -> None:
    result = Result([Text("Hi")], FinishReason.STOP_SEQUENCE, Usage(1, 1), stop_sequence=sequence)
    rendered = render("messages", result)
    assert (rendered["stop_reason"], rendered["stop_sequence"]) == ("stop_sequence", sequence)
    anthropic_types.Message.model_validate(rendered)
    assert render("chat", result)["choices"][0]["finish_reason"] == "stop"
    assert (render("responses", result)["status"], render("responses", result)["incomplete_details"]) == (
        "completed",
        None,
    )
    plain = Result([Text("Hi")], FinishReason.STOP, Usage(1, 1), stop_sequence="END")  # a sequence without the reason
    assert render("messages", plain)["stop_sequence"] is None
