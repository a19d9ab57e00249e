"""The three wire formats: parse rules, rendered answers (our schema and the official SDK types), streams read back by
the SDKs' own stream machinery, and round trips through every pair of formats."""

from __future__ import annotations

from typing import Any

import anthropic
import anthropic.types as anthropic_types
import httpx2
import openai
import openai.types.chat as openai_chat
import openai.types.responses as openai_responses
import orjson
import pydantic
import pytest
from pydantic import TypeAdapter

from generated import models as g
from handlers.canonical import (
    Answer,
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
from handlers.errors import ApiError
from handlers.glue import validation_error
from handlers.wire import chat, messages, responses

ANSWER = Answer(decision_id="dec123", model="pub/model", created=1_700_000_000)
MODULES = {"chat": chat, "messages": messages, "responses": responses}
BODIES = {"chat": g.ChatCompletionRequest, "messages": g.MessagesRequest, "responses": g.ResponsesRequest}
USER = [{"role": "user", "content": "hi"}]


def parse(fmt: str, body: dict[str, Any]) -> Request:
    """Validate as the generated route does (schema errors become ApiError 400), then parse."""
    try:
        model = BODIES[fmt].model_validate(body)
    except pydantic.ValidationError as exc:
        raise validation_error(exc) from None
    return MODULES[fmt].parse(model)


def render(fmt: str, result: Result, request: Request | None = None) -> dict[str, Any]:
    """A whole answer as `fmt` renders it, for `request` or a plain request of that format."""
    return MODULES[fmt].render(result, ANSWER, request or parse(fmt, REQUESTS[fmt]))


def bad(fmt: str, body: dict[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse(fmt, body)
    assert caught.value.status == 400
    return caught.value


# --- chat parse ----------------------------------------------------------------------------------------------------


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


# --- messages parse ------------------------------------------------------------------------------------------------


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


# --- responses parse -----------------------------------------------------------------------------------------------


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

CALL = ToolCall("call_1", "get_weather", '{"city":"Paris"}')
RESULTS = {
    "text": Result([Text("Hello.")], FinishReason.STOP, Usage(10, 5, 2)),
    "tools": Result([CALL], FinishReason.TOOL_CALLS, Usage(10, 5)),
    "both": Result(
        [Text("Checking."), CALL, ToolCall("call_2", "f", "not json")], FinishReason.TOOL_CALLS, Usage(3, 4)
    ),
    "length": Result([Text("Cut")], FinishReason.LENGTH, Usage()),
    "filter": Result([], FinishReason.CONTENT_FILTER, Usage(1, 0)),
    "unknown": Result([], FinishReason.UNKNOWN, Usage()),
}
SDK_TYPES = {
    "chat": openai_chat.ChatCompletion,
    "messages": anthropic_types.Message,
    "responses": openai_responses.Response,
}
OUR_TYPES = {"chat": g.ChatCompletion, "messages": g.Message, "responses": g.Response}


@pytest.mark.parametrize("fmt", MODULES)
@pytest.mark.parametrize("case", RESULTS)
def test_render_validates(fmt: str, case: str) -> None:
    rendered = render(fmt, RESULTS[case])
    OUR_TYPES[fmt].model_validate(rendered)
    SDK_TYPES[fmt].model_validate(rendered)
    assert rendered["model"] == "pub/model"
    orjson.dumps(rendered)


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


def test_render_messages() -> None:
    rendered = render("messages", RESULTS["both"])
    assert (rendered["id"], rendered["stop_reason"], rendered["stop_sequence"]) == ("msg_dec123", "tool_use", None)
    assert rendered["content"] == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_2", "name": "f", "input": {}},
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


# --- streams -------------------------------------------------------------------------------------------------------

TOOLS_STREAM: list[Event] = [
    TextDelta("Hel"),
    TextDelta(""),
    TextDelta("lo"),
    ToolCallStart(3, "call_1", "get_weather"),
    ToolCallDelta(3, '{"city":'),
    ToolCallDelta(3, '"Paris"}'),
    ToolCallStart(4, "call_2", "get_time"),
    ToolCallDelta(4, "{}"),
    ToolCallDelta(9, "{}"),  # a call that never started: dropped
    Finish(FinishReason.TOOL_CALLS),
    UsageReport(Usage(10, 5, 2)),
]
TEXT_STREAM: list[Event] = [TextDelta("Hi"), TextDelta(" there"), Finish(FinishReason.LENGTH), UsageReport(Usage(3, 2))]
EMPTY_STREAM: list[Event] = [Finish(FinishReason.STOP)]


def stream(fmt: str, events: list[Event], request: Request | None = None) -> bytes:
    renderer = MODULES[fmt].StreamRenderer(ANSWER, request or parse(fmt, REQUESTS[fmt]))
    return renderer.start() + b"".join(renderer.event(ev) for ev in events) + renderer.finish()


def failed_stream(fmt: str) -> bytes:
    renderer = MODULES[fmt].StreamRenderer(ANSWER, parse(fmt, REQUESTS[fmt]))
    return (
        renderer.start()
        + renderer.event(TextDelta("partial"))
        + renderer.error(ApiError(502, "upstream_error", "boom"))
    )


def frames(body: bytes) -> list[tuple[str | None, str]]:
    """(event name, data) per frame; every frame is complete: `event:` (optional) then one `data:` line."""
    assert body.endswith(b"\n\n")
    out = []
    for frame in body.decode().split("\n\n")[:-1]:
        lines = frame.split("\n")
        event = lines.pop(0).removeprefix("event: ") if lines[0].startswith("event: ") else None
        assert len(lines) == 1 and lines[0].startswith("data: "), frame
        out.append((event, lines[0].removeprefix("data: ")))
    return out


def events_of(body: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(data) for _, data in frames(body) if data != "[DONE]"]


def transport(body: bytes) -> httpx2.Client:
    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})

    return httpx2.Client(transport=httpx2.MockTransport(answer))


def openai_client(body: bytes) -> openai.OpenAI:
    return openai.OpenAI(api_key="k", base_url="http://gateway/v1", http_client=transport(body), max_retries=0)


def anthropic_client(body: bytes) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="k", base_url="http://gateway", http_client=transport(body), max_retries=0)


REQUESTS = {
    "chat": {"messages": USER, "stream": True, "stream_options": {"include_usage": True}},
    "messages": {"messages": USER, "stream": True, "max_tokens": 64},
    "responses": {"input": "hi", "stream": True},
}


def test_chat_stream_through_the_sdk() -> None:
    body = stream("chat", TOOLS_STREAM)
    with openai_client(body).chat.completions.stream(model="m", messages=USER) as events:
        final = events.get_final_completion()
    message = final.choices[0].message
    assert (message.content, final.choices[0].finish_reason) == ("Hello", "tool_calls")
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []] == [
        ("call_1", "get_weather", '{"city":"Paris"}'),
        ("call_2", "get_time", "{}"),
    ]
    assert final.usage is not None and (final.usage.prompt_tokens, final.usage.completion_tokens) == (10, 5)
    assert final.id == "chatcmpl-dec123" and final.model == "pub/model"


def test_chat_stream_frames() -> None:
    parsed = frames(stream("chat", TEXT_STREAM))
    assert all(event is None for event, _ in parsed)
    assert parsed[-1][1] == "[DONE]"
    chunks = events_of(stream("chat", TEXT_STREAM))
    for chunk in chunks:
        openai_chat.ChatCompletionChunk.model_validate(chunk)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None, None, None, "length"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 5
    without_usage = events_of(stream("chat", EMPTY_STREAM, parse("chat", {"messages": USER, "stream": True})))
    assert [c["choices"][0]["finish_reason"] for c in without_usage] == [None, "stop"]


def test_responses_stream_through_the_sdk() -> None:
    with openai_client(stream("responses", TOOLS_STREAM)).responses.stream(model="m", input="hi") as events:
        final = events.get_final_response()
    assert (final.id, final.status, final.output_text) == ("resp_dec123", "completed", "Hello")
    calls = [(o.id, o.call_id, o.name, o.arguments) for o in final.output if o.type == "function_call"]
    assert calls == [
        ("fc_dec123_0", "call_1", "get_weather", '{"city":"Paris"}'),
        ("fc_dec123_1", "call_2", "get_time", "{}"),
    ]
    assert final.usage is not None and (final.usage.input_tokens, final.usage.output_tokens) == (10, 5)


RESPONSE_TEXT_EVENTS = [
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]


def test_responses_stream_frames() -> None:
    events = events_of(stream("responses", TEXT_STREAM))
    adapter: TypeAdapter[Any] = TypeAdapter(openai_responses.ResponseStreamEvent)
    for event in events:
        adapter.validate_python(event)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        *RESPONSE_TEXT_EVENTS,
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [event for event, _ in frames(stream("responses", TEXT_STREAM))] == [e["type"] for e in events]
    assert events[0]["response"]["status"] == "in_progress"
    completed = events[-1]["response"]
    assert (completed["status"], completed["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})
    assert completed["output_text"] == "Hi there" and completed["usage"]["total_tokens"] == 5
    assert completed == render("responses", Result([Text("Hi there")], FinishReason.LENGTH, Usage(3, 2)))


def test_responses_stream_without_text() -> None:
    events = events_of(stream("responses", EMPTY_STREAM))
    text_events = [t for t in RESPONSE_TEXT_EVENTS if t != "response.output_text.delta"]
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        *text_events,
        "response.completed",
    ]
    assert events[-1]["response"]["output_text"] == ""
    with openai_client(stream("responses", EMPTY_STREAM)).responses.stream(model="m", input="hi") as stream_:
        assert stream_.get_final_response().output_text == ""


def test_messages_stream_through_the_sdk() -> None:
    client = anthropic_client(stream("messages", TOOLS_STREAM))
    with client.messages.stream(model="m", max_tokens=64, messages=USER) as events:
        final = events.get_final_message()
    assert (final.id, final.model, final.stop_reason) == ("msg_dec123", "pub/model", "tool_use")
    text, weather, clock = final.content
    assert text.type == "text" and text.text == "Hello"
    assert weather.type == "tool_use" and (weather.id, weather.name, weather.input) == (
        "call_1",
        "get_weather",
        {"city": "Paris"},
    )
    assert clock.type == "tool_use" and clock.input == {}
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.cache_read_input_tokens) == (8, 5, 2)


def test_messages_stream_frames() -> None:
    body = stream("messages", TEXT_STREAM)
    events = events_of(body)
    adapter: TypeAdapter[Any] = TypeAdapter(anthropic_types.RawMessageStreamEvent)
    for event in events:
        adapter.validate_python(event)
    assert (
        [event for event, _ in frames(body)]
        == [e["type"] for e in events]
        == [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    )
    assert events[0]["message"]["usage"] == {"input_tokens": 0, "output_tokens": 0}
    assert events[-2]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert events[-2]["usage"] == {"input_tokens": 3, "output_tokens": 2}


def test_messages_stream_starts_with_the_input_tokens_an_upstream_reports_first() -> None:
    early = [UsageReport(Usage(40, 1, 30)), TextDelta("Hi"), Finish(FinishReason.STOP_SEQUENCE, "END"),
             UsageReport(Usage(40, 6, 30))]  # fmt: skip
    events = events_of(stream("messages", early))
    assert [e["type"] for e in events][:2] == ["message_start", "content_block_start"]
    assert events[0]["message"]["usage"] == {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 30}
    assert events[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    with anthropic_client(stream("messages", early)).messages.stream(model="m", max_tokens=8, messages=USER) as s:
        final = s.get_final_message()
    assert (final.stop_reason, final.stop_sequence, final.usage.output_tokens) == ("stop_sequence", "END", 6)
    renderer = messages.StreamRenderer(ANSWER, parse("messages", REQUESTS["messages"]))
    assert renderer.start() + renderer.event(UsageReport(Usage(1, 0))) == b""  # message_start waits for content
    assert [e["type"] for e in events_of(renderer.error(ApiError(502, "upstream_error", "x")))] == [
        "message_start",
        "error",
    ]


def test_fold_keeps_the_stop_sequence() -> None:
    result = fold([TextDelta("a"), Finish(FinishReason.STOP_SEQUENCE, "END")])
    assert (result.text(), result.finish_reason, result.stop_sequence) == ("a", FinishReason.STOP_SEQUENCE, "END")


def test_messages_stream_without_text() -> None:
    events = events_of(stream("messages", EMPTY_STREAM))
    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    with anthropic_client(stream("messages", EMPTY_STREAM)).messages.stream(
        model="m", max_tokens=8, messages=USER
    ) as s:
        final = s.get_final_message()
    assert final.content[0].type == "text" and final.content[0].text == ""
    assert final.usage.output_tokens == 0


def test_messages_stream_tool_call_only() -> None:
    events = events_of(stream("messages", [ToolCallStart(0, "c", "f"), Finish(FinishReason.TOOL_CALLS)]))
    assert [e.get("index") for e in events if e["type"].startswith("content_block")] == [0, 0]
    assert events[1]["content_block"] == {"type": "tool_use", "id": "c", "name": "f", "input": {}}


def test_text_after_a_tool_call_opens_a_new_item() -> None:
    events: list[Event] = [ToolCallStart(0, "c", "f"), TextDelta("after"), ToolCallDelta(0, '{"late":1}')]
    with openai_client(stream("responses", events)).responses.stream(model="m", input="hi") as s:
        final = s.get_final_response()
    assert [(item.type, item.id) for item in final.output] == [
        ("function_call", "fc_dec123_0"),
        ("message", "msg_dec123"),
    ]
    assert final.output_text == "after" and final.output[0].arguments == '{"late":1}'  # type: ignore[union-attr]
    client = anthropic_client(stream("messages", events))
    with client.messages.stream(model="m", max_tokens=8, messages=USER) as m:
        message = m.get_final_message()
    assert [block.type for block in message.content] == ["tool_use", "text"]


def test_chat_stream_error() -> None:
    body = failed_stream("chat")
    assert frames(body)[-1] == (
        None,
        orjson.dumps({"error": ApiError(502, "upstream_error", "boom").body()["error"]}).decode(),
    )
    with pytest.raises(openai.APIError, match="boom"):
        list(openai_client(body).chat.completions.create(model="m", messages=USER, stream=True))  # type: ignore[arg-type]


def test_responses_stream_error() -> None:
    body = failed_stream("responses")
    event, data = frames(body)[-1]
    error = orjson.loads(data)
    assert event == "error"
    assert (error["type"], error["code"], error["message"], error["param"]) == ("error", "upstream_error", "boom", None)
    assert error["sequence_number"] == len(frames(body)) - 1
    openai_responses.ResponseErrorEvent.model_validate(error)
    with pytest.raises(openai.APIError, match="boom"), openai_client(body).responses.stream(model="m", input="hi") as s:
        s.get_final_response()


def test_messages_stream_error() -> None:
    body = failed_stream("messages")
    event, data = frames(body)[-1]
    assert (event, orjson.loads(data)) == ("error", ApiError(502, "upstream_error", "boom").body())
    client = anthropic_client(body)
    with (
        pytest.raises(anthropic.APIError, match="boom"),
        client.messages.stream(model="m", max_tokens=8, messages=USER) as s,
    ):
        s.get_final_message()


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


def test_chat_tool_message_without_its_id_is_left_to_the_upstream() -> None:
    req = parse("chat", {"messages": [*USER, {"role": "tool", "content": "x"}]})
    assert req.messages[-1] == Message("tool", [ToolResult("", "x")])


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
    assert req.tools is not None and all(not t.portable and t.format == fmt for t in req.tools)
    assert [t.raw for t in req.tools] == body["tools"]
