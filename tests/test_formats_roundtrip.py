"""What holds across the three wire formats: tool choices, answers every SDK type accepts, one conversation parsed
alike from each format, round trips through every pair of formats, and what is left to a same-format upstream."""

from __future__ import annotations

from typing import Any

import anthropic.types as anthropic_types
import openai.types.chat as openai_chat
import openai.types.responses as openai_responses
import orjson
import pytest

from generated import models as g
from handlers.inference.canonical import FinishReason, Message, Result, Text, Tool, ToolCall, ToolResult, Usage
from tests.formats_support import MODULES, REQUESTS, RESULTS, USER, parse, render

# --- tool choices --------------------------------------------------------------------------------------------------

NAMED = {
    "chat": {"type": "function", "function": {"name": "f"}},
    "responses": {"type": "function", "name": "f"},
    "messages": {"type": "tool", "name": "f"},
}


@pytest.mark.parametrize(
    ("fmt", "fields", "expected"),
    [
        *[(fmt, {"tool_choice": NAMED[fmt]}, ("tool", "f", None)) for fmt in NAMED],
        *[
            (fmt, {"tool_choice": word}, (word, None, None))
            for fmt in ("chat", "responses")
            for word in ("auto", "none", "required")
        ],
        ("messages", {"tool_choice": {"type": "any", "disable_parallel_tool_use": True}}, ("required", None, False)),
        ("messages", {"tool_choice": {"type": "none"}}, ("none", None, None)),
        ("chat", {"tool_choice": "required", "parallel_tool_calls": False}, ("required", None, False)),
        ("responses", {"parallel_tool_calls": True}, ("auto", None, True)),
        # Forms no other format can say, or not a tool choice at all: kept, never refused, for a same-format upstream.
        (
            "chat",
            {"tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}},
            (None, None, None),
        ),
        ("responses", {"tool_choice": {"type": "web_search_preview"}}, (None, None, None)),
        ("responses", {"tool_choice": {"type": "function"}}, (None, None, None)),
        ("messages", {"tool_choice": "auto"}, (None, None, None)),
        ("messages", {"tool_choice": {"type": "tool", "name": ""}}, (None, None, None)),
        ("chat", {"tool_choice": 7}, (None, None, None)),
    ],
)
def test_tool_choice_parse(fmt: str, fields: dict[str, Any], expected: tuple[Any, ...]) -> None:
    choice = parse(fmt, {**REQUESTS[fmt], **fields}).tool_choice
    assert choice is not None and (choice.mode, choice.name, choice.parallel) == expected
    assert (choice.raw, choice.format, choice.portable) == (fields.get("tool_choice"), fmt, expected[0] is not None)
    if "parallel_tool_calls" in fields:  # kept for a same-format upstream as well
        assert parse(fmt, {**REQUESTS[fmt], **fields}).extra["parallel_tool_calls"] == fields["parallel_tool_calls"]


@pytest.mark.parametrize("fmt", MODULES)
def test_no_tool_choice(fmt: str) -> None:
    assert parse(fmt, REQUESTS[fmt]).tool_choice is None


# --- answers every SDK accepts -------------------------------------------------------------------------------------

SDK_TYPES = {
    "chat": openai_chat.ChatCompletion,
    "messages": anthropic_types.Message,
    "responses": openai_responses.Response,
}
OUR_TYPES = {"chat": g.ChatCompletion, "messages": g.Message, "responses": g.ResponseObject}


@pytest.mark.parametrize("fmt", MODULES)
@pytest.mark.parametrize("case", RESULTS)
def test_render_validates(fmt: str, case: str) -> None:
    rendered = render(fmt, RESULTS[case])
    OUR_TYPES[fmt].model_validate(rendered)
    SDK_TYPES[fmt].model_validate(rendered)
    assert rendered["model"] == "pub/model"
    orjson.dumps(rendered)


# --- round trips ---------------------------------------------------------------------------------------------------

# One conversation in each format: system text, a question, an assistant turn with a tool call, its result, thanks.
ARGS = '{"city":"Paris"}'
CONVERSATIONS: dict[str, dict[str, Any]] = {
    "chat": {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
            {"role": "user", "content": "Thanks"},
        ]
    },
    "messages": {
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me check."},
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "18C"}]},
            {"role": "user", "content": "Thanks"},
        ],
    },
    "responses": {
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": ARGS},
            {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
            {"role": "user", "content": [{"type": "input_text", "text": "Thanks"}]},
        ],
    },
}
ASSISTANT = Message("assistant", [Text("Let me check."), ToolCall("call_1", "get_weather", ARGS)])
CANONICAL = [
    Message("user", [Text("Weather?")]),
    ASSISTANT,
    Message("tool", [ToolResult("call_1", "18C")]),
    Message("user", [Text("Thanks")]),
]


def follow_up(fmt: str, rendered: dict[str, Any]) -> dict[str, Any]:
    """What a client sends next: the rendered answer as the assistant turn, then a question."""
    if fmt == "chat":
        message = rendered["choices"][0]["message"]
        turn = [{"role": "assistant", "content": message["content"], "tool_calls": message["tool_calls"]}]
        return {"messages": [*turn, *USER]}
    if fmt == "messages":
        return {"messages": [{"role": "assistant", "content": rendered["content"]}, *USER]}
    return {"input": [*rendered["output"], *USER]}


@pytest.mark.parametrize("source", MODULES)
def test_every_format_parses_to_the_same_conversation(source: str) -> None:
    request = parse(source, CONVERSATIONS[source])
    assert (request.system, request.messages) == ("Be brief.", CANONICAL)


@pytest.mark.parametrize("target", MODULES)
@pytest.mark.parametrize("source", MODULES)
def test_round_trip(source: str, target: str) -> None:
    """Parse format A, answer with its assistant turn rendered in format B, and read that answer back as B."""
    turn = parse(source, CONVERSATIONS[source]).messages[1]
    rendered = render(target, Result(turn.content, FinishReason.TOOL_CALLS, Usage(7, 3)))
    sdk = SDK_TYPES[target].model_validate(rendered)
    assert sdk.model == "pub/model"
    back = parse(target, follow_up(target, rendered))
    assert back.messages == [ASSISTANT, Message("user", [Text("hi")])]


@pytest.mark.parametrize(
    ("fmt", "body"),
    [
        ("chat", {"messages": [{"role": "system", "content": "only"}]}),
        ("messages", {"messages": [{"role": "user", "content": "x"}], "system": "only"}),
        ("responses", {"input": [{"role": "system", "content": "only"}]}),
    ],
)
def test_system_only_conversations_are_left_to_the_upstream(fmt: str, body: dict[str, Any]) -> None:
    req = parse(fmt, body)
    assert req.system == "only"


@pytest.mark.parametrize(
    ("fmt", "body"),
    [
        ("chat", {"messages": USER, "tools": ["x", {"type": "function"}, {"function": {"description": "no name"}}]}),
        ("messages", {"messages": USER, "tools": [{"input_schema": {}}, 7]}),
        ("responses", {"input": "x", "tools": [{"type": "function"}, None]}),
    ],
)
def test_tools_are_never_validated_only_kept_for_a_same_format_upstream(fmt: str, body: dict[str, Any]) -> None:
    req = parse(fmt, body)
    assert req.tools is not None and all(not (isinstance(t, Tool) and t.name) and t.format == fmt for t in req.tools)
    assert [t.raw for t in req.tools] == body["tools"]
