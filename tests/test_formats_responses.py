"""The OpenAI responses wire format: parse rules and the rendered answer, which echoes the request."""

from __future__ import annotations

from typing import Any

import openai.types.responses as openai_responses
import pytest

from handlers.inference.canonical import Message, Text, Tool, ToolCall, ToolChoice, ToolResult, Unknown
from tests.formats_support import ANSWER, RESULTS, USER, bad, parse, render

# --- parse ---------------------------------------------------------------------------------------------------------


def test_responses_parse_string_input_and_fields() -> None:
    tool = {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True}
    search = {"type": "web_search"}
    request = parse(
        "responses",
        {
            "model": "m",
            "input": "Hello",
            "instructions": "Be kind.",
            "max_output_tokens": 100,
            "temperature": 0.2,
            "stream": True,
            "reasoning": {"effort": "Medium", "summary": "auto"},
            "top_p": 0.3,
            "tools": [tool, search],
            "tool_choice": "required",
            "previous_response_id": "resp_1",
        },
    )
    assert request.messages == [Message("user", [Text("Hello")])]
    assert (request.system, request.max_tokens, request.temperature, request.effort) == ("Be kind.", 100, 0.2, "medium")
    assert (request.stream, request.top_p, request.instructions) == (True, 0.3, "Be kind.")
    assert request.tool_choice == ToolChoice("required", "required", "responses")
    assert request.tools == [
        Tool("f", "d", {"type": "object"}, tool, "responses"),
        Tool("", None, {}, search, "responses"),
    ]
    assert request.extra == {"previous_response_id": "resp_1"}


def test_responses_parse_items() -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    request = parse(
        "responses",
        {
            "instructions": "  ",
            "input": [
                {"role": "developer", "content": "Rules."},
                {"content": [{"type": "input_text", "text": "Hi"}, {"type": "input_image", "image_url": "u"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me see."}]},
                reasoning,
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
                {"role": "system", "content": [{"type": "input_text", "text": "More rules."}]},
                {"role": "user", "content": "Thanks"},
            ],
        },
    )
    assert request.system == "Rules.\n\nMore rules."
    assert request.messages == [
        Message("user", [Text("Hi"), Unknown({"type": "input_image", "image_url": "u"}, "responses")]),
        Message("assistant", [Text("Let me see."), Unknown(reasoning, "responses"), ToolCall("c1", "f", "{}")]),
        Message("tool", [ToolResult("c1", "42")]),
        Message("user", [Text("Thanks")]),
    ]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": []}, "input"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input.0.role"),
        ({"input": [{"content": ["x"]}]}, "input.0.content.0"),
        ({"input": [{"content": [{"type": "input_text"}]}]}, "input.0.content.0.text"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "input.0.call_id"),
        ({"input": [{"type": "function_call", "call_id": "c"}]}, "input.0.name"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input.0.call_id"),
        ({"input": "x", "max_output_tokens": 2.5}, "max_output_tokens"),
    ],
)
def test_responses_parse_errors(body: dict[str, Any], param: str) -> None:
    assert bad("responses", body).param == param


# --- render --------------------------------------------------------------------------------------------------------


def test_render_responses() -> None:
    rendered = render("responses", RESULTS["both"])
    assert (rendered["id"], rendered["status"], rendered["output_text"]) == ("resp_dec123", "completed", "Checking.")
    assert rendered["created_at"] == ANSWER.created and rendered["incomplete_details"] is None
    message, first, second = rendered["output"]
    assert message["id"] == "msg_dec123" and message["content"][0]["text"] == "Checking."
    assert (first["id"], first["call_id"], first["arguments"]) == ("fc_dec123_0", "call_1", '{"city":"Paris"}')
    assert second["id"] == "fc_dec123_1"
    assert [item["type"] for item in render("responses", RESULTS["tools"])["output"]] == ["function_call"]
    length = render("responses", RESULTS["length"])
    assert (length["status"], length["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})
    usage = render("responses", RESULTS["text"])["usage"]
    assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (10, 5, 15)
    assert usage["input_tokens_details"]["cached_tokens"] == 2
    assert render("responses", RESULTS["unknown"])["output_text"] == ""


def test_render_responses_echoes_the_request() -> None:
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": False}
    request = parse("responses", {"input": "x", "temperature": 0.3, "tools": [tool], "tool_choice": "none"})
    rendered = render("responses", RESULTS["text"], request)
    openai_responses.Response.model_validate(rendered)
    assert (rendered["temperature"], rendered["tools"], rendered["tool_choice"]) == (0.3, [tool], "none")
    assert (rendered["instructions"], rendered["parallel_tool_calls"]) == (None, True)
    body = {"input": "x", "instructions": "  Be kind.  ", "parallel_tool_calls": False, "max_output_tokens": 9}
    rendered = render("responses", RESULTS["text"], parse("responses", body))
    assert (rendered["instructions"], rendered["parallel_tool_calls"], rendered["max_output_tokens"]) == (
        "  Be kind.  ",
        False,
        9,
    )
    assert rendered["tool_choice"] == "auto"  # not said, so not echoed
    foreign = render("responses", RESULTS["text"], parse("chat", {"messages": USER, "tools": [{"type": "x"}]}))
    assert foreign["tools"] == [] and foreign["tool_choice"] == "auto"
