"""The chat completions wire format: parse rules and the rendered answer."""

from __future__ import annotations

from typing import Any

import httpx2
import openai
import openai.types.chat as openai_chat
import orjson
import pytest

from generated import models as g
from handlers.errors import ApiError
from handlers.inference.canonical import (
    CacheMark,
    CustomTool,
    Document,
    Event,
    Finish,
    FinishReason,
    Image,
    Message,
    OutputFormat,
    Request,
    Result,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
    Unknown,
    Usage,
    UsageReport,
)
from handlers.inference.formats import chat
from tests.formats_support import ANSWER, RESULTS, USER, bad, parse, render

# --- parse ---------------------------------------------------------------------------------------------------------


def test_chat_parse_content_and_roles() -> None:
    image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
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
        Message("user", [Text("Look: "), Image(url="https://example.com/cat.png"), Text("ok?")]),
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
        CustomTool("grammar", None, None, custom, "chat"),  # chat's custom tool: free-form input
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
    assert (choice["index"], choice["logprobs"], choice["message"]["refusal"]) == (0, None, None)
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


# --- parse: what canonical carries ---------------------------------------------------------------------------------

PNG = "iVBORw0KGgo="
PDF = "JVBERi0xLjQ="
EPHEMERAL = {"type": "ephemeral"}


def test_chat_parse_images_files_and_audio() -> None:
    audio = {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}}
    content = [
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "image_url", "image_url": "https://example.com/b.png"},  # the early shorthand
        {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}", "filename": "a.pdf"}},
        {"type": "file", "file": {"file_id": "file-abc"}},
        audio,
    ]
    request = parse("chat", {"messages": [{"role": "user", "content": content}]})
    assert request.messages[0].content == [
        Image(url="https://example.com/a.png", detail="high"),
        Image(data=PNG, media_type="image/png"),
        Image(url="https://example.com/b.png"),
        Document(data=PDF, media_type="application/pdf", filename="a.pdf"),
        Document(file_id="file-abc"),
        Unknown(audio, "chat"),
    ]


def test_chat_parse_cache_marks_on_parts_messages_tools_and_system() -> None:
    tool = {"type": "function", "function": {"name": "f"}, "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    request = parse(
        "chat",
        {
            "messages": [
                {"role": "system", "content": [{"type": "text", "text": "Rules.", "cache_control": EPHEMERAL}]},
                {"role": "developer", "content": "Be kind."},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "a", "prompt_cache_breakpoint": {"mode": "explicit"}},
                        {"type": "image_url", "image_url": {"url": "https://x/i.png"}, "cache_control": EPHEMERAL},
                    ],
                },
                {"role": "assistant", "content": "b", "cache_control": EPHEMERAL},  # on the message: its last block
                {"role": "tool", "tool_call_id": "c", "content": "r", "cache_control": EPHEMERAL},
            ],
            "tools": [tool],
        },
    )
    assert (request.system, request.system_parts) == (
        "Rules.\n\nBe kind.",
        [Text("Rules.", CacheMark()), Text("Be kind.")],
    )
    assert request.messages == [
        Message("user", [Text("a", CacheMark()), Image(url="https://x/i.png", cache=CacheMark())]),
        Message("assistant", [Text("b", CacheMark())]),
        Message("tool", [ToolResult("c", "r", CacheMark())]),
    ]
    assert request.tools == [Tool("f", None, {}, tool, "chat", CacheMark("1h"))]
    assert parse("chat", {"messages": [{"role": "system", "content": "plain"}, *USER]}).system_parts is None


@pytest.mark.parametrize(
    ("response_format", "output"),
    [
        (
            {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}, "strict": True,
                                                    "description": "d"}},
            OutputFormat("json_schema", {"type": "object"}, "w", True, "d"),
        ),
        ({"type": "json_schema", "json_schema": {"name": "w"}}, OutputFormat("json_schema", name="w")),
        ({"type": "json_object"}, OutputFormat("json_object")),
        ({"type": "text"}, None),
        (None, None),
    ],
)  # fmt: skip
def test_chat_parse_structured_output(response_format: dict[str, Any] | None, output: OutputFormat | None) -> None:
    request = parse("chat", {"messages": USER, "response_format": response_format})
    assert (request.output, request.response_format, request.extra) == (output, response_format, {})


def test_chat_parse_a_server_specific_response_format_is_kept_for_chat_upstreams_only() -> None:
    tag = {"type": "structural_tag", "structures": []}
    request = parse("chat", {"messages": USER, "response_format": tag})
    assert request.output is None and request.extra == {"response_format": tag}


def test_chat_parse_reasoning_and_refusals_of_assistant_turns() -> None:
    messages = [
        *USER,
        {"role": "assistant", "content": "42", "reasoning_content": "Think."},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}], "reasoning": "Hm."},
        {"role": "assistant", "content": None, "refusal": "Never."},
    ]
    turns = parse("chat", {"messages": messages}).messages[1:]
    assert [turn.content for turn in turns] == [
        [Thinking("Think.", format="chat"), Text("42")],
        [Thinking("Hm.", format="chat"), Text("No.")],
        [Text("Never.")],
    ]


EVERY_EXTRA: dict[str, Any] = {
    "n": 1, "logit_bias": {"50256": -100}, "logprobs": True, "top_logprobs": 2, "frequency_penalty": 0.5,
    "presence_penalty": -0.5, "audio": {"voice": "alloy", "format": "wav"}, "modalities": ["text", "audio"],
    "prediction": {"type": "content", "content": "x"}, "web_search_options": {}, "verbosity": "low",
    "moderation": {"model": "omni"}, "store": True, "metadata": {"k": "v"}, "user": "u", "safety_identifier": "s",
    "service_tier": "flex", "prompt_cache_key": "p", "prompt_cache_retention": "24h",
    "prompt_cache_options": {"ttl": "30m"}, "parallel_tool_calls": False,
}  # fmt: skip


def test_chat_parse_keeps_every_declared_field_it_does_not_model_in_extra_and_the_whole_body() -> None:
    body = {"messages": USER, "max_tokens": 12, "seed": 3, "temperature": 1, "not_a_chat_field": [1], **EVERY_EXTRA}
    request = parse("chat", body)
    assert request.extra == EVERY_EXTRA  # an undeclared field is not the format's: no other kind hears of it
    assert request.body == body  # as sent; integers stay integers
    assert all(type(request.body[k]) is int for k in ("max_tokens", "seed", "n", "top_logprobs"))
    assert (request.max_tokens, request.seed) == (12, 3)


def test_chat_parse_legacy_functions_are_tools_and_their_choice() -> None:
    spec = {"name": "f", "description": "d", "parameters": {"type": "object"}}
    request = parse("chat", {"messages": USER, "functions": [spec], "function_call": {"name": "f"}})
    assert request.tools == [Tool("f", "d", {"type": "object"}, {"type": "function", "function": spec}, "chat")]
    assert request.tool_choice == ToolChoice("tool", {"name": "f"}, "chat", name="f")
    assert request.extra == {}
    auto = parse("chat", {"messages": USER, "functions": [spec], "function_call": "auto"})
    assert auto.tool_choice == ToolChoice("auto", "auto", "chat")
    # With a tool_choice as well, or in a form canonical has no words for, function_call stays the format's own.
    both = parse("chat", {"messages": USER, "functions": [spec], "function_call": "none", "tool_choice": "auto"})
    assert (both.tool_choice.mode if both.tool_choice else None, both.extra) == ("auto", {"function_call": "none"})
    odd = parse("chat", {"messages": USER, "function_call": {"nom": "f"}})
    assert (odd.tool_choice, odd.extra) == (None, {"function_call": {"nom": "f"}})


@pytest.mark.parametrize(
    ("content", "param"),
    [
        ([{"type": "image_url"}], "messages.0.content.0.image_url"),
        ([{"type": "image_url", "image_url": {"detail": "low"}}], "messages.0.content.0.image_url.url"),
        ([{"type": "image_url", "image_url": {"url": "data:image/png,abc"}}], "messages.0.content.0.image_url.url"),
        ([{"type": "image_url", "image_url": {"url": "data:;base64,abc"}}], "messages.0.content.0.image_url.url"),
        ([{"type": "image_url", "image_url": {"url": "https://x", "detail": 1}}],
         "messages.0.content.0.image_url.detail"),
        ([{"type": "file", "file": "x"}], "messages.0.content.0.file"),
        ([{"type": "file", "file": {"filename": "a.pdf"}}], "messages.0.content.0.file"),
        ([{"type": "file", "file": {"file_data": PDF}}], "messages.0.content.0.file.file_data"),
        ([{"type": "file", "file": {"file_id": 5}}], "messages.0.content.0.file.file_id"),
        ([{"type": "file", "file": {"file_id": "f", "filename": 5}}], "messages.0.content.0.file.filename"),
        ([{"type": "text", "text": "x", "cache_control": {"type": "persistent"}}],
         "messages.0.content.0.cache_control"),
        ([{"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": 5}}],
         "messages.0.content.0.cache_control"),
        ([{"type": "text", "text": "x", "prompt_cache_breakpoint": {}}],
         "messages.0.content.0.prompt_cache_breakpoint"),
    ],
)  # fmt: skip
def test_chat_parse_bad_parts_name_the_field(content: list[Any], param: str) -> None:
    assert bad("chat", {"messages": [{"role": "user", "content": content}]}).param == param


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": "x"}}},
         "response_format.json_schema.schema"),
        ({"messages": [{"role": "assistant", "content": "x", "reasoning_content": 1}]}, "messages.0.reasoning_content"),
        ({"messages": [{"role": "user", "content": "x", "cache_control": "ephemeral"}]}, "messages.0.cache_control"),
        ({"tools": [{"type": "function", "function": {"name": "f"}, "cache_control": {}}]}, "tools.0.cache_control"),
        ({"n": 0}, "n"),
        ({"n": 2.0}, "n"),
        ({"top_logprobs": 21}, "top_logprobs"),
        ({"frequency_penalty": 3}, "frequency_penalty"),
        ({"user": 5}, "user"),
    ],
)  # fmt: skip
def test_chat_parse_bad_fields_name_the_field(body: dict[str, Any], param: str) -> None:
    assert bad("chat", {"messages": USER, **body}).param == param


# --- render: what a chat caller gets ---------------------------------------------------------------------------------

THOUGHTFUL = Result(
    [Thinking("First, ", signature="sig", format="messages"), Thinking("then."), Text("Done.")],
    FinishReason.STOP,
    Usage(100, 10, cached_input_tokens=60, cache_write_tokens=30),
)


def test_render_chat_reasoning_and_cache_usage_in_the_sdk_types() -> None:
    rendered = render("chat", THOUGHTFUL)
    g.ChatCompletion.model_validate(rendered)
    sdk = openai_chat.ChatCompletion.model_validate(rendered)
    message = sdk.choices[0].message
    assert (message.content, getattr(message, "reasoning_content", None)) == ("Done.", "First, \n\nthen.")
    assert sdk.usage is not None and sdk.usage.prompt_tokens_details is not None
    assert (sdk.usage.prompt_tokens, sdk.usage.prompt_tokens_details.cached_tokens) == (100, 60)
    assert sdk.usage.prompt_tokens_details.cache_write_tokens == 30
    assert "reasoning_content" not in render("chat", RESULTS["text"])["choices"][0]["message"]


def _chat_stream(events: list[Event], request: Request | None = None) -> bytes:
    renderer = chat.StreamRenderer(
        ANSWER, request or parse("chat", {"messages": USER, "stream": True, "stream_options": {"include_usage": True}})
    )
    return renderer.start() + b"".join(renderer.event(ev) for ev in events) + renderer.finish()


THINKING_STREAM: list[Event] = [
    ThinkingDelta("First, ", format="messages"),
    ThinkingDelta(signature="sig", format="messages"),
    TextDelta("Hmm"),
    ThinkingDelta("then."),  # a second thinking block
    TextDelta(" done."),
    Finish(FinishReason.STOP),
    UsageReport(Usage(100, 10, 60, 30)),
]


def test_chat_stream_reasoning_deltas_through_the_sdk() -> None:
    body = _chat_stream(THINKING_STREAM)
    chunks = [orjson.loads(line[6:]) for line in body.decode().split("\n\n") if line.startswith("data: {")]
    for chunk in chunks:
        openai_chat.ChatCompletionChunk.model_validate(chunk)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert [d["reasoning_content"] for d in deltas if "reasoning_content" in d] == ["First, ", "\n\nthen."]

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})

    client = openai.OpenAI(
        api_key="k",
        base_url="http://gateway/v1",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(answer)),
    )
    with client.chat.completions.stream(model="m", messages=USER) as events:  # type: ignore[arg-type]
        final = events.get_final_completion()
    message = final.choices[0].message
    assert (message.content, getattr(message, "reasoning_content", None)) == ("Hmm done.", "First, \n\nthen.")
    assert final.usage is not None and final.usage.prompt_tokens_details is not None
    assert final.usage.prompt_tokens_details.cached_tokens == 60
