"""The Anthropic messages wire format: parse rules and the rendered answer."""

from __future__ import annotations

from typing import Any

import anthropic
import anthropic.types as anthropic_types
import httpx2
import orjson
import pytest
from pydantic import TypeAdapter

from generated import models as g
from handlers.inference.canonical import (
    Answer,
    CacheMark,
    Document,
    Event,
    Finish,
    FinishReason,
    HostedTool,
    Image,
    Message,
    OutputFormat,
    Result,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolCallStart,
    ToolChoice,
    ToolResult,
    Unknown,
    Usage,
    UsageReport,
)
from handlers.inference.formats import messages
from tests.formats_support import ANSWER, RESULTS, USER, bad, messages_delta_usage, messages_usage, parse, render

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
    # Images are modelled now (they were Unknown), and a tool result keeps its is_error.
    assert request.messages == [
        Message("user", [Text("See"), Image(data="", media_type="image/png")]),
        Message("assistant", [Text("Checking."), ToolCall("t1", "f", '{"a":1}')]),
        Message("tool", [ToolResult("t1", "42")]),
        Message("tool", [ToolResult("t2", "7", is_error=True)]),
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
        HostedTool("web_search", "web_search_20250305", search, "messages"),
    ]
    assert request.extra == {"metadata": {"user_id": "u"}, "top_k": 5}


def test_a_system_turn_stays_at_its_place() -> None:
    """Claude Code sends its environment as a system message in the middle of the conversation (string or blocks);
    it is an instruction at that place, not the system prompt."""
    request = parse("messages", {"system": "A", "messages": [*USER, {"role": "system", "content": "B"},
                                                             {"role": "system", "content": [{"type": "text", "text": "C"}]}]})
    assert request.system == "A"
    assert [(m.role, m.text()) for m in request.messages] == [("user", "hi"), ("system", "B"), ("system", "C")]


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
    assert render("messages", RESULTS["text"])["usage"] == messages_usage(8, 5, read=2)
    empty = render("messages", RESULTS["unknown"])
    assert empty["content"] == [{"type": "text", "text": ""}] and empty["usage"] == messages_usage(0, 0)
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


# --- parse: media, thinking, cache marks, output, extra -------------------------------------------------------------

PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
EPHEMERAL = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}


def test_messages_parse_images_and_documents() -> None:
    content = [
        {"type": "image", "source": PNG, "cache_control": EPHEMERAL},
        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
        {"type": "image", "source": {"type": "file", "file_id": "file_1"}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="},
         "title": "Report", "context": "Q3 figures", "citations": {"enabled": True}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain words"},
         "cache_control": HOUR},
        {"type": "document", "source": {"type": "url", "url": "https://x.test/a.pdf"}},
        {"type": "document", "source": {"type": "file", "file_id": "file_2"}},
        {"type": "document", "source": {"type": "content", "content": "chunked"}},
    ]  # fmt: skip
    [message] = parse("messages", {"messages": [{"role": "user", "content": content}]}).messages
    assert message.content == [
        Image(data="iVBORw0KGgo=", media_type="image/png", cache=CacheMark()),
        Image(url="https://x.test/a.png"),
        Image(file_id="file_1"),
        Document(data="JVBERi0=", media_type="application/pdf", filename="Report"),
        Text("Q3 figures"),  # a document's context is more text for the model
        Document(text="plain words", media_type="text/plain", cache=CacheMark("1h")),  # kept as text
        Document(url="https://x.test/a.pdf"),
        Document(file_id="file_2"),
        Unknown(content[-1], "messages"),  # a document made of blocks is Anthropic's own
    ]


def test_messages_parse_thinking_blocks() -> None:
    turn = [
        {"type": "thinking", "thinking": "Hmm.", "signature": "sig=="},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "thinking", "thinking": "From elsewhere.", "signature": ""},  # what we gave another provider's
        {"type": "text", "text": "Done."},
    ]
    request = parse("messages", {"messages": [*USER, {"role": "assistant", "content": turn}, *USER]})
    assert request.messages[1].content == [
        Thinking("Hmm.", signature="sig==", format="messages"),
        Thinking("", redacted="opaque", format="messages"),
        Thinking("From elsewhere.", signature=None, format=None),
        Text("Done."),
    ]


def test_messages_parse_a_tool_result_with_images() -> None:
    result: dict[str, Any] = {
        "type": "tool_result", "tool_use_id": "t1", "is_error": True, "cache_control": EPHEMERAL,
        "content": [{"type": "text", "text": "Screenshot:"}, {"type": "image", "source": PNG},
                    {"type": "search_result", "source": "s", "title": "t", "content": []}],
    }  # fmt: skip
    request = parse("messages", {"messages": [{"role": "user", "content": [result, {"type": "text", "text": "Ok"}]}]})
    assert request.messages == [
        # The images of a result follow it in the same tool message: ToolResult carries only text.
        Message("tool", [ToolResult("t1", "Screenshot:", CacheMark(), is_error=True),
                         Image(data=PNG["data"], media_type="image/png"), Unknown(result["content"][2], "messages")]),
        Message("user", [Text("Ok")]),
    ]  # fmt: skip


def test_messages_parse_cache_marks() -> None:
    request = parse(
        "messages",
        {
            "system": [{"type": "text", "text": "Rules.", "cache_control": HOUR}, {"type": "text", "text": "More."}],
            "tools": [{"name": "f", "input_schema": {"type": "object"}, "cache_control": EPHEMERAL}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Q", "cache_control": EPHEMERAL}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {}, "cache_control": EPHEMERAL}]},
            ],
        },
    )  # fmt: skip
    assert request.system == "Rules.\n\nMore."
    assert request.system_parts == [Text("Rules.", CacheMark("1h")), Text("More.")]
    assert request.tools is not None and request.tools[0].cache == CacheMark()
    assert request.messages == [
        Message("user", [Text("Q", CacheMark())]),
        Message("assistant", [ToolCall("t1", "f", "{}", CacheMark())]),
    ]
    assert parse("messages", {"system": "Plain.", "messages": USER}).system_parts is None


@pytest.mark.parametrize(
    ("thinking", "expected"),
    [
        ({"type": "enabled", "budget_tokens": 4096}, (None, 4096, True)),
        ({"type": "adaptive"}, (None, None, True)),
        ({"type": "disabled"}, (None, None, False)),
        ("max", ("max", None, None)),
    ],
)
def test_messages_parse_thinking_turns_reasoning_on_and_off(thinking: Any, expected: tuple[Any, ...]) -> None:
    request = parse("messages", {"messages": USER, "thinking": thinking})
    assert (request.effort, request.thinking_budget, request.thinking) == expected


def test_messages_parse_output_config() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    request = parse(
        "messages",
        {"messages": USER, "thinking": "low", "output_config": {"format": {"type": "json_schema", "schema": schema},
                                                                 "effort": "High"}},
    )  # fmt: skip
    assert (request.output, request.effort) == (OutputFormat("json_schema", schema=schema), "high")
    assert "output_config" not in request.extra
    # An output setting canonical has no word for stays in extra, so another kind refuses it by name.
    odd = parse("messages", {"messages": USER, "output_config": {"format": {"type": "grammar"}, "verbosity": "low"}})
    assert (odd.output, odd.extra["output_config"]) == (None, {"format": {"type": "grammar"}, "verbosity": "low"})


def test_messages_parse_keeps_the_body_and_the_fields_canonical_does_not_model() -> None:
    body = {
        "model": "m", "messages": USER, "max_tokens": 64, "top_k": 5, "service_tier": "auto", "speed": "fast",
        "container": "c1", "inference_geo": "us", "mcp_servers": [], "cache_control": EPHEMERAL,
        "context_management": {"edits": []}, "metadata": {"user_id": "u"}, "undeclared": {"x": 1}, "speed_hint": None,
    }  # fmt: skip
    request = parse("messages", body)
    assert request.extra == {key: body[key] for key in (
        "top_k", "service_tier", "speed", "container", "inference_geo", "mcp_servers", "cache_control",
        "context_management", "metadata")}  # fmt: skip
    assert request.body == {**body, "max_tokens": 64.0}  # every field as sent, undeclared ones too
    assert request.headers == {}  # the endpoint fills them


@pytest.mark.parametrize(
    ("content", "param"),
    [
        ({"type": "text", "text": "x", "cache_control": {"type": "persistent"}}, "messages.0.content.0.cache_control"),
        ({"type": "text", "text": "x", "cache_control": "ephemeral"}, "messages.0.content.0.cache_control"),
        ({"type": "image"}, "messages.0.content.0.source"),
        ({"type": "image", "source": {"type": "svg"}}, "messages.0.content.0.source.type"),
        ({"type": "image", "source": {"type": "base64", "data": "x"}}, "messages.0.content.0.source.media_type"),
        ({"type": "document", "source": {"type": "text"}}, "messages.0.content.0.source.data"),
        ({"type": "thinking", "signature": "s"}, "messages.0.content.0.thinking"),
        ({"type": "redacted_thinking"}, "messages.0.content.0.data"),
        ({"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": 1}]},
         "messages.0.content.0.content.0.source"),
    ],
)  # fmt: skip
def test_messages_parse_block_errors(content: dict[str, Any], param: str) -> None:
    assert bad("messages", {"messages": [{"role": "user", "content": [content]}]}).param == param


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"output_config": {"format": {"type": "json_schema", "schema": "x"}}}, "output_config.format.schema"),
        ({"output_config": {"effort": 3}}, "output_config.effort"),
        ({"system": [{"type": "text", "text": "A", "cache_control": {}}]}, "system.0.cache_control"),
        ({"top_k": 2.5}, "top_k"),
    ],
)
def test_messages_parse_field_errors(fields: dict[str, Any], param: str) -> None:
    assert bad("messages", {"messages": USER, **fields}).param == param


# --- render: thinking, cache usage, Anthropic's own blocks --------------------------------------------------------

SEARCH = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}


def test_render_messages_thinking_and_cache_usage() -> None:
    result = Result(
        [
            Thinking("Plan.", signature="sig==", format="messages"),
            Thinking("", redacted="opaque", format="messages"),
            Thinking("From another provider.", encrypted="enc", format="responses"),
            Thinking(""),  # nothing to show
            Unknown(SEARCH, "messages"),
            Unknown({"type": "reasoning"}, "responses"),
            Text("Answer."),
        ],
        FinishReason.STOP,
        Usage(input_tokens=100, output_tokens=7, cached_input_tokens=60, cache_write_tokens=30),
    )
    rendered = render("messages", result)
    assert rendered["content"] == [
        {"type": "thinking", "thinking": "Plan.", "signature": "sig=="},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "thinking", "thinking": "From another provider.", "signature": ""},
        SEARCH,
        {"type": "text", "text": "Answer."},
    ]
    assert rendered["usage"] == messages_usage(10, 7, read=60, write=30)
    sdk = anthropic_types.Message.model_validate(rendered)
    assert [block.type for block in sdk.content] == ["thinking", "redacted_thinking", "thinking", "server_tool_use",
                                                     "text"]  # fmt: skip
    g.Message.model_validate(rendered)
    # What the caller sends back next parses to the same reasoning (the unsigned one belongs to no provider).
    back = parse("messages", {"messages": [*USER, {"role": "assistant", "content": rendered["content"]}, *USER]})
    assert back.messages[1].content[:3] == [
        Thinking("Plan.", signature="sig==", format="messages"),
        Thinking("", redacted="opaque", format="messages"),
        Thinking("From another provider."),
    ]


# --- the stream a Messages caller gets ------------------------------------------------------------------------------

THINKING_STREAM: list[Event] = [
    UsageReport(Usage(50, 1, cached_input_tokens=30, cache_write_tokens=10)),
    ThinkingDelta("", format="messages"),
    ThinkingDelta("Let me ", format="messages"),
    ThinkingDelta("see.", format="messages"),
    ThinkingDelta(signature="EuYB", format="messages"),
    ThinkingDelta(signature="CkQ=", format="messages"),
    ThinkingDelta(redacted="opaque", format="messages"),
    ThinkingDelta(encrypted="for OpenAI only", format="responses"),
    TextDelta("Hi"),
    ThinkingDelta("Later thoughts, unsigned."),
    ToolCallStart(0, "toolu_1", "f"),
    ToolCallDelta(0, "{}"),
    Finish(FinishReason.TOOL_CALLS),
    UsageReport(Usage(50, 9, cached_input_tokens=30, cache_write_tokens=10)),
]


def render_stream(events: list[Event], answer: Answer = ANSWER) -> bytes:
    renderer = messages.StreamRenderer(answer, parse("messages", {"messages": USER, "stream": True}))
    return renderer.start() + b"".join(renderer.event(ev) for ev in events) + renderer.finish()


def stream_events(body: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(frame.split(b"data: ", 1)[1]) for frame in body.split(b"\n\n") if frame]


def sdk_message(body: bytes) -> anthropic_types.Message:
    reply = httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})
    http = httpx2.Client(transport=httpx2.MockTransport(lambda _: reply))
    client = anthropic.Anthropic(api_key="k", base_url="http://gateway", http_client=http, max_retries=0)
    with client.messages.stream(model="m", max_tokens=64, messages=USER) as events:  # type: ignore[arg-type]
        return events.get_final_message()


def test_messages_stream_thinking_through_the_sdk() -> None:
    body = render_stream(THINKING_STREAM)
    adapter: TypeAdapter[Any] = TypeAdapter(anthropic_types.RawMessageStreamEvent)
    events = stream_events(body)
    for event in events:
        adapter.validate_python(event)
    assert events[1] == {"type": "content_block_start", "index": 0,
                         "content_block": {"type": "thinking", "thinking": "", "signature": ""}}  # fmt: skip
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta" and e["index"] == 0]
    assert deltas == [{"type": "thinking_delta", "thinking": "Let me "}, {"type": "thinking_delta", "thinking": "see."},
                      {"type": "signature_delta", "signature": "EuYBCkQ="}]  # fmt: skip
    final = sdk_message(body)
    assert [block.to_dict() for block in final.content] == [
        {"type": "thinking", "thinking": "Let me see.", "signature": "EuYBCkQ="},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "Hi"},
        {"type": "thinking", "thinking": "Later thoughts, unsigned.", "signature": ""},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
    ]
    assert events[0]["message"]["usage"] == messages_usage(10, 1, read=30, write=10)
    assert (final.usage.input_tokens, final.usage.cache_creation_input_tokens, final.usage.output_tokens) == (10, 10, 9)
    assert final.stop_reason == "tool_use"


def test_messages_stream_starts_with_the_gateways_estimate_when_usage_comes_late() -> None:
    late: list[Event] = [TextDelta("Hi"), Finish(FinishReason.STOP), UsageReport(Usage(12, 2))]
    events = stream_events(render_stream(late, Answer("dec1", "pub/model", 0, input_estimate=11)))
    assert events[0]["message"]["usage"] == messages_usage(11, 0)
    assert events[-2]["usage"] == messages_delta_usage(12, 2)
    early: list[Event] = [UsageReport(Usage(40, 1)), *late]  # the upstream's own count wins
    assert stream_events(render_stream(early, Answer("d", "m", 0, 11)))[0]["message"]["usage"]["input_tokens"] == 40


def test_read_usage_counts_cache_tokens_into_input_only_when_given() -> None:
    from handlers.inference.formats.messages.vocabulary import read_usage

    plain = read_usage({"input_tokens": 10, "output_tokens": 5})
    cached = read_usage({"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 2,
                         "cache_creation_input_tokens": 1})
    assert (plain.input_tokens, cached.input_tokens, cached.cached_input_tokens) == (10, 13, 2)
    assert read_usage({"output_tokens": 5}).input_tokens is None  # unknown stays unknown (caught by `make mutate`)
