"""The messages format as an upstream speaks it: the body rendered for it (passthrough or from canonical) and its
answers and streams read back."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from handlers.errors import ApiError
from handlers.inference.canonical import (
    CacheMark,
    Document,
    FinishReason,
    Image,
    Message,
    OutputFormat,
    Request,
    Text,
    Thinking,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
    Unknown,
    Usage,
)
from handlers.inference.formats import messages
from handlers.inference.formats.base import Traits, UpstreamOptions
from handlers.inference.routing import normalise_effort
from tests.formats_support import USER, messages_usage, parse, render
from tests.test_formats_messages import EPHEMERAL, HOUR, PNG, SEARCH

# --- upstream body: a Messages caller's own body ------------------------------------------------------------------

REASONING = Traits(reasoning=True, thinking_budgets=(1024, 4096, 16384))
PLAIN = Traits()
SIGNED = {"type": "thinking", "thinking": "Let me see.", "signature": "EuYBCkQYAiJA=="}
CALLER_BODY: dict[str, Any] = {
    "model": "alias",
    "stream": True,
    "system": [{"type": "text", "text": "Rules.", "cache_control": HOUR}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Look", "cache_control": EPHEMERAL},
                                     {"type": "image", "source": PNG},
                                     {"type": "document", "source": {"type": "file", "file_id": "file_9"}}]},
        {"role": "assistant", "content": [SIGNED, {"type": "redacted_thinking", "data": "x"},
                                          {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
    ],
    "tools": [{"name": "f", "input_schema": {"type": "object"}, "cache_control": EPHEMERAL},
              {"type": "web_search_20250305", "name": "web_search"}],
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
    "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
    "metadata": {"user_id": "u"},
    "top_k": 3,
    "cache_control": EPHEMERAL,
    "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
    "not_a_field": True,
}  # fmt: skip


def body_for(request: Request, traits: Traits = PLAIN, **options: Any) -> dict[str, Any]:
    return messages.upstream_body(request, "claude-up", UpstreamOptions(**options), traits)


def test_passthrough_keeps_the_callers_body_byte_for_byte() -> None:
    request = parse("messages", CALLER_BODY)
    body = body_for(request, default_max_tokens=999)
    expected = {key: value for key, value in CALLER_BODY.items() if key not in ("stream", "not_a_field")}
    assert body == {**expected, "model": "claude-up", "max_tokens": 999}
    assert orjson.dumps(body["messages"]) == orjson.dumps(CALLER_BODY["messages"])  # signatures and all
    assert body_for(request, passthrough=True)["not_a_field"] is True  # an upstream that takes everything
    assert request.body == CALLER_BODY  # nothing rewritten in place: the next candidate gets the same body


def test_passthrough_leaves_out_thinking_no_provider_signed() -> None:
    turn = [{"type": "thinking", "thinking": "From elsewhere.", "signature": ""}, {"type": "text", "text": "Hi"}]
    request = parse("messages", {"messages": [*USER, {"role": "assistant", "content": turn}, *USER], "max_tokens": 9})
    assert body_for(request)["messages"][1] == {"role": "assistant", "content": [{"type": "text", "text": "Hi"}]}


@pytest.mark.parametrize(
    ("thinking", "traits", "expected"),
    [
        # Anthropic's own words go as written to a reasoning model.
        ({"type": "enabled", "budget_tokens": 2048}, REASONING, {"type": "enabled", "budget_tokens": 2048}),
        ({"type": "adaptive", "display": "omitted"}, REASONING, {"type": "adaptive", "display": "omitted"}),
        ({"type": "disabled"}, REASONING, {"type": "disabled"}),
        # This gateway's own forms are not Anthropic's: the tier's budget.
        ("high", REASONING, {"type": "enabled", "budget_tokens": 16384}),
        ({"effort": "low"}, REASONING, {"type": "enabled", "budget_tokens": 1024}),
        ("minimal", REASONING, None),
        # No effort field at all for a model the catalog does not mark as reasoning.
        ({"type": "enabled", "budget_tokens": 2048}, Traits(), None),
        ("high", Traits(), None),
    ],
)
def test_passthrough_effort(thinking: Any, traits: Traits, expected: dict[str, Any] | None) -> None:
    request = parse("messages", {"messages": USER, "max_tokens": 100_000, "thinking": thinking})
    request.effort = routing_tier(request)
    assert body_for(request, traits).get("thinking") == expected


def routing_tier(request: Request) -> str | None:
    """What the relay sets request.effort to: routing's tier for the caller's effort or budget."""
    policy = SimpleNamespace(thinking_budget=SimpleNamespace(low=1024, medium=4096, high=16384))
    return normalise_effort(request, policy)  # type: ignore[arg-type]


def test_passthrough_gives_thinking_room_and_drops_output_effort_for_plain_models() -> None:
    request = parse("messages", {"messages": USER, "max_tokens": 500, "thinking": {"type": "enabled",
                                                                                  "budget_tokens": 2048}})  # fmt: skip
    assert body_for(request, REASONING)["max_tokens"] == 2548  # the budget plus the caller's room for the answer
    defaulted = parse("messages", {"messages": USER, "thinking": "high"})
    defaulted.effort = "high"
    assert body_for(defaulted, REASONING, default_max_tokens=4096)["max_tokens"] == 16384 + 4096
    effort = parse("messages", {"messages": USER, "output_config": {"effort": "max", "format": None}})
    assert body_for(effort, REASONING)["output_config"] == {"effort": "max", "format": None}
    assert body_for(effort)["output_config"] == {"format": None}
    only = parse("messages", {"messages": USER, "output_config": {"effort": "low"}})
    assert "output_config" not in body_for(only)


# --- upstream body: another format's request, from canonical --------------------------------------------------------

PDF = "JVBERi0xLjQ="
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}}
WEATHER_TOOL = Tool("get_weather", "Current weather", WEATHER, {"type": "function"}, "chat", cache=CacheMark())


def chat_request(*messages_: Message, **fields: Any) -> Request:
    return Request(format="chat", messages=list(messages_) or [Message("user", [Text("hi")])], **fields)


def test_translated_media_cache_marks_tool_results_and_thinking() -> None:
    request = chat_request(
        Message("user", [
            Text("Look", CacheMark("1h")),
            Image(data="iVBO", media_type="image/jpeg", detail="high", cache=CacheMark()),
            Image(url="https://x.test/a.png"),
            Document(data=PDF, media_type="application/pdf", filename="r.pdf", cache=CacheMark()),
            Document(data="aGVsbG8=", media_type="text/plain"),
            Document(url="data:application/pdf;base64," + PDF),
        ]),
        Message("assistant", [
            Thinking("Signed.", signature="sig", format="messages"),
            Thinking("OpenAI's own.", encrypted="enc", format="responses"),  # goes back to its own provider only
            ToolCall("c1", "get_weather", '{"city":"Paris"}', CacheMark()),
        ]),
        Message("tool", [ToolResult("c1", "Here:", CacheMark(), is_error=True), Image(url="https://x.test/b.png")]),
        Message("user", [Text("Thanks")]),
        system="Rules.\n\nMore.", system_parts=[Text("Rules.", CacheMark()), Text("More.")], tools=[WEATHER_TOOL],
    )  # fmt: skip
    body = body_for(request)
    assert body["system"] == [{"type": "text", "text": "Rules.", "cache_control": {"type": "ephemeral"}},
                              {"type": "text", "text": "More."}]  # fmt: skip
    assert body["tools"] == [{"name": "get_weather", "description": "Current weather", "input_schema": WEATHER,
                              "cache_control": {"type": "ephemeral"}}]  # fmt: skip
    ephemeral = {"cache_control": {"type": "ephemeral"}}
    assert body["messages"] == [
        {"role": "user", "content": [
            {"type": "text", "text": "Look", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "iVBO"}, **ephemeral},
            {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
             "title": "r.pdf", **ephemeral},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hello"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}},
        ]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Signed.", "signature": "sig"},
            {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Paris"}, **ephemeral},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "is_error": True, **ephemeral, "content": [
                {"type": "text", "text": "Here:"},
                {"type": "image", "source": {"type": "url", "url": "https://x.test/b.png"}},
            ]},
            {"type": "text", "text": "Thanks"},
        ]},
    ]  # fmt: skip
    # Without cache marks on it, the system is the plain text.
    assert body_for(chat_request(system="S", system_parts=[Text("S")]))["system"] == "S"


@pytest.mark.parametrize(
    ("block", "field"),
    [
        (Image(file_id="file-1"), "file_id"),
        (Document(file_id="file-2"), "file_id"),
        (Document(data="UEsDBA==", media_type="application/vnd.ms-excel"),
         "file_data"),
        (Document(data="not base64!", media_type="text/plain"), "file_data"),
        (Unknown({"type": "input_audio", "input_audio": {}}, "chat"), "input_audio"),
    ],
)
def test_translated_refuses_what_anthropic_cannot_take(block: Any, field: str) -> None:
    with pytest.raises(ApiError) as caught:
        body_for(chat_request(Message("user", [Text("x"), block])))
    assert (caught.value.status, caught.value.code, caught.value.param) == (400, "unsupported_parameter", field)
    assert "anthropic upstream" in caught.value.message


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"extra": {"logit_bias": {"1": 5}}}, "logit_bias"),
        ({"tools": [Tool("", None, {}, {"type": "function"}, "chat")]}, "tools.0"),  # a function without a name
        ({"tools": [WEATHER_TOOL], "tool_choice": ToolChoice(None, {"type": "allowed_tools"}, "chat")}, "tool_choice"),
    ],
)
def test_translated_refuses_fields_by_name(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(ApiError) as caught:
        body_for(chat_request(**fields))
    assert (caught.value.code, caught.value.param) == ("unsupported_parameter", field)


def test_translated_leaves_out_advisory_fields() -> None:
    assert set(body_for(chat_request(extra={"user": "u", "metadata": {"a": "b"}}))) == {"model", "max_tokens",
                                                                                        "messages"}  # fmt: skip


def test_messages_fields_for_another_kind_follow_advisory_and_inert() -> None:
    """The sets other formats' renderers read from this module (common.refuse_untranslatable)."""
    request = parse("messages", {"messages": USER, "metadata": {"user_id": "u"}, "speed": "fast", "mcp_servers": [],
                                 "billing_policy": {"type": "billing_policy", "bill_to": "self"}})  # fmt: skip
    assert set(request.extra) <= messages.ADVISORY | set(messages.INERT)
    assert all(request.extra[k] == messages.INERT[k] for k in request.extra if k in messages.INERT)
    for field in ("top_k", "inference_geo", "compaction", "thread"):
        assert field not in messages.ADVISORY and field not in messages.INERT


SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


@pytest.mark.parametrize(
    ("fields", "tool_choice"),
    [
        ({}, {"type": "tool", "name": "specway_json_answer"}),
        ({"tools": [WEATHER_TOOL]}, {"type": "any"}),  # a caller's tool, or the answer
        ({"tools": [WEATHER_TOOL], "tool_choice": ToolChoice("none", "none", "chat")},
         {"type": "tool", "name": "specway_json_answer"}),
        ({"tools": [WEATHER_TOOL], "tool_choice": ToolChoice("tool", {}, "chat", name="get_weather", parallel=False)},
         {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}),
        # With thinking on Anthropic takes only auto: the answer's tool is offered.
        ({"effort": "high"}, {"type": "auto"}),
    ],
)  # fmt: skip
def test_translated_structured_output_is_a_forced_tool(fields: dict[str, Any], tool_choice: dict[str, Any]) -> None:
    output = OutputFormat("json_schema", schema=SCHEMA, name="answer", strict=True, description="The answer.")
    body = body_for(chat_request(output=output, **fields), REASONING)
    assert body["tools"][-1] == {"name": "specway_json_answer", "description": "The answer.", "input_schema": SCHEMA,
                                 "strict": True}  # fmt: skip
    assert body["tool_choice"] == tool_choice


def test_translated_json_object_output() -> None:
    body = body_for(chat_request(output=OutputFormat("json_object")))
    assert body["tools"] == [{"name": "specway_json_output", "description": body["tools"][0]["description"],
                              "input_schema": {"type": "object"}}]  # fmt: skip
    assert body["tool_choice"] == {"type": "tool", "name": "specway_json_output"}


@pytest.mark.parametrize(
    ("fields", "traits", "thinking", "max_tokens"),
    [
        ({"effort": "high"}, REASONING, {"type": "enabled", "budget_tokens": 16384}, 16384 + 4096),
        ({"effort": "medium", "max_tokens": 10_000}, REASONING, {"type": "enabled", "budget_tokens": 4096}, 10_000),
        ({"effort": "low", "max_tokens": 500}, REASONING, {"type": "enabled", "budget_tokens": 1024}, 1524),
        ({"effort": "high", "thinking_budget": 3000, "max_tokens": 9000}, REASONING,
         {"type": "enabled", "budget_tokens": 3000}, 9000),
        ({"effort": "minimal"}, REASONING, None, 4096),
        ({"effort": "high", "thinking": False}, REASONING, {"type": "disabled"}, 4096),
        # Effort was a routing input only for a model not marked as reasoning.
        ({"effort": "high"}, Traits(), None, 4096),
    ],
)  # fmt: skip
def test_translated_effort_is_a_thinking_budget(
    fields: dict[str, Any], traits: Traits, thinking: dict[str, Any] | None, max_tokens: int
) -> None:
    body = body_for(chat_request(**fields), traits, default_max_tokens=4096)
    assert (body.get("thinking"), body["max_tokens"]) == (thinking, max_tokens)


def test_translated_no_thinking_in_the_middle_of_a_tool_loop_without_it() -> None:
    loop = [
        Message("user", [Text("Weather?")]),
        Message("assistant", [Thinking("OpenAI's.", format="chat"), ToolCall("c1", "get_weather", "{}")]),
        Message("tool", [ToolResult("c1", "18C")]),
    ]
    assert "thinking" not in body_for(chat_request(*loop, effort="high", tools=[WEATHER_TOOL]), REASONING)
    signed = [loop[0], Message("assistant", [Thinking("Mine.", "sig", format="messages"), *loop[1].content[1:]]),
              loop[2]]  # fmt: skip
    assert "thinking" in body_for(chat_request(*signed, effort="high", tools=[WEATHER_TOOL]), REASONING)
    new_turn = [*loop, Message("user", [Text("And tomorrow?")])]
    assert "thinking" in body_for(chat_request(*new_turn, effort="high", tools=[WEATHER_TOOL]), REASONING)


# --- upstream answers ---------------------------------------------------------------------------------------------


def anthropic_answer(*content: dict[str, Any], stop: str = "end_turn", **usage_: int) -> dict[str, Any]:
    return {"type": "message", "model": "claude-x", "content": list(content), "stop_reason": stop,
            "usage": {"input_tokens": 5, "output_tokens": 3, **usage_}}  # fmt: skip


def test_upstream_result_reads_thinking_server_blocks_and_cache_usage() -> None:
    result = messages.upstream_result(anthropic_answer(
        SIGNED, {"type": "redacted_thinking", "data": "opaque"}, SEARCH, {"type": "text", "text": "Hi"},
        cache_read_input_tokens=40, cache_creation_input_tokens=20,
    ))  # fmt: skip
    assert result.content == [
        Thinking("Let me see.", signature=SIGNED["signature"], format="messages"),
        Thinking("", redacted="opaque", format="messages"),
        Unknown(SEARCH, "messages"),
        Text("Hi"),
    ]
    assert result.usage == Usage(input_tokens=65, output_tokens=3, cached_input_tokens=40, cache_write_tokens=20)
    # A Messages caller gets it all back as it came, with its usage apart.
    rendered = render("messages", result)
    assert rendered["content"] == [SIGNED, {"type": "redacted_thinking", "data": "opaque"}, SEARCH,
                                   {"type": "text", "text": "Hi"}]  # fmt: skip
    assert rendered["usage"] == messages_usage(5, 3, read=40, write=20)


def test_upstream_result_reads_the_structured_output_tool_as_text() -> None:
    answer_tool = {"type": "tool_use", "id": "toolu_1", "name": "specway_json_answer", "input": {"answer": "42"}}
    result = messages.upstream_result(anthropic_answer(answer_tool, stop="tool_use"))
    assert (result.content, result.finish_reason) == ([Text('{"answer":"42"}')], FinishReason.STOP)
    call = {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}}
    both = messages.upstream_result(anthropic_answer(call, answer_tool, stop="tool_use"))
    assert both.finish_reason == FinishReason.TOOL_CALLS  # a real call is still the caller's to run
    assert messages.upstream_result(anthropic_answer(stop="tool_use")).finish_reason == FinishReason.TOOL_CALLS
