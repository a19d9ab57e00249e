"""The chat format as an upstream speaks it: the body rendered for it (passthrough or from canonical) and its
answers and streams read back."""

from __future__ import annotations

from typing import Any

import openai.types.chat as openai_chat
import orjson
import pytest
from openai.types.chat import completion_create_params
from pydantic import TypeAdapter

from handlers.errors import ApiError
from handlers.inference.canonical import (
    CacheMark,
    Document,
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
    ToolCallStart,
    ToolResult,
    Unknown,
    Usage,
    UsageReport,
)
from handlers.inference.formats import chat
from handlers.inference.formats.base import Traits, UpstreamOptions
from tests.formats_support import USER, parse
from tests.test_formats_chat import EPHEMERAL, EVERY_EXTRA, PDF, PNG

# --- upstream body: a chat caller's own body, passed through ---------------------------------------------------------

REASONING = Traits(reasoning=True)
PLAIN = Traits()
OPTIONS = UpstreamOptions()


def sdk_checked(body: dict[str, Any]) -> dict[str, Any]:
    """`body` through the SDK's own request type, every message and part included (the SDK validates lazily)."""
    TypeAdapter(completion_create_params.CompletionCreateParamsNonStreaming).validate_python(body)
    message_type = TypeAdapter(openai_chat.ChatCompletionMessageParam)
    for message in body["messages"]:
        checked: Any = message_type.validate_python(message)
        if not isinstance(checked.get("content"), str | None):
            list(checked["content"])
        list(checked.get("tool_calls") or [])
    return body


def test_chat_passthrough_keeps_every_chat_field_as_sent_and_drops_what_no_format_defines() -> None:
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "Rules.", "cache_control": EPHEMERAL}]},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}],
            "name": "ann",
        },
        {"role": "assistant", "content": "x", "reasoning_content": "Think."},
    ]
    tools = [{"type": "custom", "custom": {"name": "grammar"}}]
    body = {"model": "alias", "messages": messages, "tools": tools, "tool_choice": {"type": "allowed_tools"},
            "stream": True, "stream_options": {"include_usage": False}, "temperature": 0.3, "seed": 1.5,
            "response_format": {"type": "json_object"}, "not_a_chat_field": 1, **EVERY_EXTRA}  # fmt: skip
    sent = chat.upstream_body(parse("chat", body), "gpt-up", OPTIONS, PLAIN)
    expected = {k: v for k, v in body.items() if k not in {"stream", "stream_options", "not_a_chat_field"}}
    assert sent == {**expected, "model": "gpt-up"}
    kept = chat.upstream_body(parse("chat", body), "gpt-up", UpstreamOptions(passthrough=True), PLAIN)
    assert kept["not_a_chat_field"] == 1 and "stream" not in kept


@pytest.mark.parametrize(
    ("fields", "traits", "expected"),
    [
        ({"max_tokens": 50}, PLAIN, {"max_tokens": 50}),
        ({"max_completion_tokens": 50}, PLAIN, {"max_tokens": 50}),
        ({"max_tokens": 50.0}, REASONING, {"max_completion_tokens": 50}),
        ({"max_completion_tokens": 50, "reasoning_effort": "xhigh"}, REASONING,
         {"max_completion_tokens": 50, "reasoning_effort": "xhigh"}),
        ({"reasoning_effort": "high"}, PLAIN, {}),  # routing read it; a model that takes no effort never sees it
        ({}, REASONING, {}),
    ],
)  # fmt: skip
def test_chat_passthrough_rewrites_the_token_limit_and_the_effort(
    fields: dict[str, Any], traits: Traits, expected: dict[str, Any]
) -> None:
    request = parse("chat", {"messages": USER, **fields})
    request.effort = "high" if "reasoning_effort" in fields else None  # the relay's normalised tier
    sent = chat.upstream_body(request, "m", OPTIONS, traits)
    owned = {"max_tokens", "max_completion_tokens", "reasoning_effort"}
    assert {k: v for k, v in sent.items() if k in owned} == expected
    assert all(type(v) is int for k, v in sent.items() if k.startswith("max_"))


def test_chat_effort_from_routing_reaches_a_reasoning_model() -> None:
    request = Request(format="messages", messages=[Message("user", [Text("hi")])], effort="low", max_tokens=9)
    assert chat.upstream_body(request, "o", OPTIONS, REASONING) == sdk_checked(
        {"model": "o", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 9,
         "reasoning_effort": "low"}
    )  # fmt: skip
    assert "reasoning_effort" not in chat.upstream_body(request, "o", OPTIONS, PLAIN)


@pytest.mark.parametrize("n", [2, 128])
def test_chat_more_than_one_choice_is_refused(n: int) -> None:
    with pytest.raises(ApiError) as caught:
        chat.upstream_body(parse("chat", {"messages": USER, "n": n}), "m", OPTIONS, PLAIN)
    assert (caught.value.status, caught.value.code, caught.value.param) == (400, "unsupported_parameter", "n")
    assert chat.upstream_body(parse("chat", {"messages": USER, "n": 1}), "m", OPTIONS, PLAIN)["n"] == 1


# --- upstream body: another format's request, rendered from canonical ------------------------------------------------


def other(fmt: str = "messages", **fields: Any) -> Request:
    """A request from another format (canonical only: no caller body a chat upstream could take as it is)."""
    fields.setdefault("messages", [Message("user", [Text("hi")])])
    return Request(format=fmt, **fields)  # type: ignore[arg-type]


def test_chat_renders_images_documents_and_reasoning_from_another_format() -> None:
    marked = CacheMark("1h")
    request = other(
        system="Rules.",
        system_parts=[Text("Rules.", marked)],
        messages=[
            Message("user", [
                Text("See", marked),
                Image(url="https://x/a.png", detail="low", cache=marked),
                Image(data=PNG, media_type="image/png"),
                Document(data=PDF, media_type="application/pdf", cache=marked),
                Document(data="aGk=", media_type="text/plain", filename="notes.txt"),
            ]),
            Message("assistant", [Thinking("Mine.", format="chat"), Thinking("Claude's.", "sig", format="messages"),
                                  Text("Seen."), ToolCall("c1", "f", "{}", marked)]),
            Message("tool", [ToolResult("c1", "ok", marked)]),
        ],
        tools=[Tool("f", "d", {"type": "object"}, {"name": "f"}, "messages", marked)],
    )  # fmt: skip
    sent = sdk_checked(chat.upstream_body(request, "m", OPTIONS, PLAIN))
    assert sent["messages"] == [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": [
            {"type": "text", "text": "See"},
            {"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "low"}},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {"type": "file", "file": {"filename": "document.pdf", "file_data": f"data:application/pdf;base64,{PDF}"}},
            {"type": "file", "file": {"filename": "notes.txt", "file_data": "data:text/plain;base64,aGk="}},
        ]},
        {"role": "assistant", "content": "Seen.", "reasoning_content": "Mine.",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]  # fmt: skip
    # OpenAI caches prompt prefixes by itself: a cache mark has no words here.
    assert b"cache_control" not in orjson.dumps(sent)
    assert sent["tools"] == [{"type": "function", "function": {"name": "f", "description": "d",
                                                                "parameters": {"type": "object"}}}]  # fmt: skip


@pytest.mark.parametrize(
    ("output", "response_format"),
    [
        (OutputFormat("json_schema", {"type": "object"}, "weather", True, "d"),
         {"type": "json_schema", "json_schema": {"name": "weather", "description": "d", "schema": {"type": "object"},
                                                 "strict": True}}),
        (OutputFormat("json_schema", {"type": "object"}),
         {"type": "json_schema", "json_schema": {"name": "output", "schema": {"type": "object"}}}),
        (OutputFormat("json_object"), {"type": "json_object"}),
    ],
)  # fmt: skip
def test_chat_renders_structured_output_as_response_format(output: OutputFormat, response_format: Any) -> None:
    sent = sdk_checked(chat.upstream_body(other("responses", output=output), "m", OPTIONS, PLAIN))
    assert sent["response_format"] == response_format


@pytest.mark.parametrize(
    ("fmt", "block", "param"),
    [
        ("messages", Image(file_id="file_1"), "image.file_id"),
        ("messages", Document(url="https://x/a.pdf"), "document.url"),
        ("messages", Document(file_id="file_1"), "document.file_id"),
        ("responses", Unknown({"type": "input_audio"}, "responses"), "input_audio"),
        ("messages", Unknown({"type": "search_result"}, "messages"), "search_result"),
    ],
)
def test_chat_refuses_what_it_has_no_words_for(fmt: str, block: Any, param: str) -> None:
    with pytest.raises(ApiError) as caught:
        chat.upstream_body(other(fmt, messages=[Message("user", [block])]), "m", OPTIONS, PLAIN)
    assert (caught.value.status, caught.value.code, caught.value.param) == (400, "unsupported_parameter", param)
    assert "openai upstream" in caught.value.message


def test_chat_takes_a_responses_callers_openai_file_by_id() -> None:
    request = other("responses", messages=[Message("user", [Document(file_id="file-1", filename="a.pdf")])])
    sent = sdk_checked(chat.upstream_body(request, "m", OPTIONS, PLAIN))
    assert sent["messages"][0]["content"] == [{"type": "file", "file": {"file_id": "file-1", "filename": "a.pdf"}}]


def test_chat_leaves_out_advisory_fields_and_refuses_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller's format says which of its fields are advisory or inert; any other is refused by name."""
    from handlers.inference.formats import messages

    monkeypatch.setattr(messages, "ADVISORY", frozenset({"metadata"}), raising=False)
    monkeypatch.setattr(messages, "INERT", {"mcp_servers": []}, raising=False)
    sent = chat.upstream_body(other(extra={"metadata": {"user_id": "u"}, "mcp_servers": [], "top_k": None}), "m",
                              OPTIONS, PLAIN)  # fmt: skip
    assert set(sent) == {"model", "messages"}
    with pytest.raises(ApiError) as caught:
        chat.upstream_body(other(extra={"top_k": 5}), "m", OPTIONS, PLAIN)
    assert (caught.value.code, caught.value.param) == ("unsupported_parameter", "top_k")


@pytest.mark.parametrize(("verbosity", "sent"), [("low", {"verbosity": "low"}), ("high", {"verbosity": "high"}),
                                                 ("medium", {}), (None, {})])
def test_chat_takes_a_responses_callers_text_verbosity_as_its_verbosity(verbosity: str | None,
                                                                       sent: dict[str, str]) -> None:
    """Codex sends text.verbosity for a model whose metadata says it supports verbosity; chat has the same word."""
    request = parse("responses", {"input": "hi", "text": {"verbosity": verbosity}})
    body = sdk_checked(chat.upstream_body(request, "m", OPTIONS, PLAIN))
    assert {k: v for k, v in body.items() if k == "verbosity"} == sent


def test_chat_sets_are_what_another_kind_leaves_out_of_a_chat_request() -> None:
    request = parse("chat", {"messages": USER, "user": "u", "metadata": {}, "n": 1, "logprobs": False, "store": False})
    assert all(k in chat.ADVISORY or chat.INERT.get(k, object()) == v for k, v in request.extra.items())
    refused = parse("chat", {"messages": USER, "logit_bias": {"1": 5}, "n": 2, "store": True, "verbosity": "low"})
    assert not any(k in chat.ADVISORY or chat.INERT.get(k, object()) == v for k, v in refused.extra.items())


# --- upstream answers ------------------------------------------------------------------------------------------------


def test_chat_upstream_result_reads_reasoning_and_cache_usage() -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 9, "total_tokens": 109,
             "prompt_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 30}}  # fmt: skip
    message = {"role": "assistant", "content": "42", "reasoning_content": "Think."}
    payload = {"id": "x", "model": "deepseek", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
               "usage": usage}  # fmt: skip
    assert chat.upstream_result(payload) == Result(
        [Thinking("Think.", format="chat"), Text("42")], FinishReason.STOP, Usage(100, 9, 60, 30), "deepseek"
    )
    message = {"role": "assistant", "content": "42", "reasoning": "Hm."}  # OpenRouter's and newer vLLM's word
    deepseek = {"prompt_tokens": 10, "completion_tokens": 1, "prompt_cache_hit_tokens": 8}
    payload = {"choices": [{"message": message, "finish_reason": "stop"}], "usage": deepseek}
    result = chat.upstream_result(payload)
    assert (result.content[0], result.usage) == (Thinking("Hm.", format="chat"), Usage(10, 1, 8))


def test_chat_upstream_reader_reads_reasoning_deltas() -> None:
    reader = chat.UpstreamReader()
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None, "reasoning_content": "Th"}}]},
        {"choices": [{"index": 0, "delta": {"reasoning": "ink."}}]},
        {"choices": [{"index": 0, "delta": {"content": "42"}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2,
                                  "prompt_tokens_details": {"cached_tokens": 3}}},
    ]  # fmt: skip
    events = [ev for chunk in chunks for ev in reader.read("message", orjson.dumps(chunk).decode())]
    assert events == [
        ThinkingDelta("Th", format="chat"),
        ThinkingDelta("ink.", format="chat"),
        TextDelta("42"),
        ToolCallStart(0, "c", "f"),
        Finish(FinishReason.TOOL_CALLS),
        UsageReport(Usage(5, 2, 3)),
    ]
    assert not reader.done and reader.read("message", "[DONE]") == [] and reader.done
