"""The converse format (Bedrock's Converse API, upstream side only): each caller's request in Converse's words, as
botocore's bedrock-runtime service model defines them, and Converse's answers and stream events read back."""

from __future__ import annotations

from typing import Any

import botocore.loaders
import orjson
import pytest

from handlers.errors import ApiError
from handlers.inference.canonical import (
    Document,
    Finish,
    FinishReason,
    Message,
    Request,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallStart,
    ToolChoice,
    ToolResult,
    Usage,
    UsageReport,
    fold,
)
from handlers.inference.formats import converse, messages
from handlers.inference.formats.base import Traits, UpstreamFault, UpstreamOptions
from tests.formats_support import ANSWER, REQUESTS, parse

CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
NOVA = "amazon.nova-pro-v1:0"
REASONING = Traits(reasoning=True, thinking_budgets=(1000, 2000, 4000))
PLAIN = Traits()
OPTIONS = UpstreamOptions()
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}}
PNG = "iVBORw0KGgo="
SHAPES = botocore.loaders.Loader().load_service_model("bedrock-runtime", "service-2")["shapes"]


def body(fmt: str, request: dict[str, Any], model: str = CLAUDE, traits: Traits = PLAIN) -> dict[str, Any]:
    return converse.upstream_body(parse(fmt, request), model, OPTIONS, traits)


def refused(fmt: str, request: dict[str, Any], model: str = CLAUDE) -> ApiError:
    with pytest.raises(ApiError) as info:
        body(fmt, request, model)
    assert info.value.code == "unsupported_parameter"
    return info.value


def members(shape: str) -> set[str]:
    return set(SHAPES[shape]["members"])


def test_a_body_uses_only_the_service_models_members() -> None:
    """Every key rendered is a member of its shape in botocore's bedrock-runtime model."""
    sent = body("chat", {"model": "m", "max_tokens": 9, "temperature": 0.2, "top_p": 0.9, "stop": ["END"],
                         "messages": [{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": [{"type": "text", "text": "Hi"}, {
                                          "type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]}],
                         "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}],
                         "tool_choice": "required"})
    assert set(sent) <= members("ConverseRequest")
    assert set(sent["inferenceConfig"]) <= members("InferenceConfiguration")
    assert sent["inferenceConfig"] == {"maxTokens": 9, "temperature": 0.2, "topP": 0.9, "stopSequences": ["END"]}
    assert sent["system"] == [{"text": "Be brief."}]
    assert sent["messages"] == [{"role": "user", "content": [
        {"text": "Hi"}, {"image": {"format": "png", "source": {"bytes": PNG}}}]}]
    assert sent["toolConfig"] == {"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": WEATHER}}}],
                                  "toolChoice": {"any": {}}}
    assert set(sent["toolConfig"]["tools"][0]["toolSpec"]) <= members("ToolSpecification")


def test_a_tool_loop_in_converse_words() -> None:
    request = Request(format="chat", messages=[
        Message("user", [Text("Weather?")]),
        Message("assistant", [ToolCall("call_1", "get_weather", '{"city": "Paris"}')]),
        Message("tool", [ToolResult("call_1", "18C"), ToolResult("call_2", "boom", is_error=True)]),
    ])
    sent = converse.upstream_body(request, NOVA, OPTIONS, PLAIN)
    assert sent["messages"] == [
        {"role": "user", "content": [{"text": "Weather?"}]},
        {"role": "assistant", "content": [{"toolUse": {"toolUseId": "call_1", "name": "get_weather",
                                                       "input": {"city": "Paris"}}}]},
        {"role": "user", "content": [{"toolResult": {"toolUseId": "call_1", "content": [{"text": "18C"}]}},
                                     {"toolResult": {"toolUseId": "call_2", "content": [{"text": "boom"}],
                                                     "status": "error"}}]},
    ]


def test_a_pdf_goes_as_bytes_with_a_name_converse_allows() -> None:
    request = Request(format="chat", messages=[Message("user", [
        Document(data="JVBERi0=", media_type="application/pdf", filename="Q3 report_final (v2).pdf"),
        Document(text="plain notes"), Document(data="JVBERi0=", filename="Q3 report final (v2).pdf"),
        Text("Summarise.")])])
    content = converse.upstream_body(request, NOVA, OPTIONS, PLAIN)["messages"][0]["content"]
    assert content[0] == {"document": {"format": "pdf", "name": "Q3 report final (v2)", "source": {"bytes": "JVBERi0="}}}
    assert content[1] == {"document": {"format": "txt", "name": "document 2", "source": {"bytes": "cGxhaW4gbm90ZXM="}}}
    assert content[2]["document"]["name"] == "Q3 report final (v2) (3)"  # each document its own name


@pytest.mark.parametrize(("fmt", "request_body", "param"), [
    ("chat", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://x.test/cat.png"}}]}]}, "messages.0.content.0.image_url.url"),
    ("messages", {"max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "url", "url": "https://x.test/a.pdf"}}]}]},
     "messages.0.content.0.source.url"),
    ("chat", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/bmp;base64,Qk0="}}]}]}, "messages.0.content.0.image_url.url"),
], ids=["image-url", "document-url", "bmp"])
def test_what_converse_cannot_take_is_refused_by_name(fmt: str, request_body: dict[str, Any], param: str) -> None:
    error = refused(fmt, {"model": "m", **request_body})
    assert error.param == param and "bedrock" in error.message


def test_cache_marks_are_cache_points_after_their_blocks() -> None:
    mark = {"type": "ephemeral"}
    sent = body("messages", {
        "model": "m", "max_tokens": 5,
        "system": [{"type": "text", "text": "Rules.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Long context", "cache_control": mark}]}],
        "tools": [{"name": "t", "input_schema": WEATHER, "cache_control": mark}]})
    point = {"cachePoint": {"type": "default"}}
    assert sent["system"] == [{"text": "Rules."}, {"cachePoint": {"type": "default", "ttl": "1h"}}]
    assert sent["messages"][0]["content"] == [{"text": "Long context"}, point]
    assert sent["toolConfig"]["tools"][1] == point
    assert set(point["cachePoint"]) <= members("CachePointBlock")


def test_thinking_is_claudes_own_field_and_keeps_room_for_the_answer() -> None:
    sent = body("chat", {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 300,
                         "reasoning_effort": "medium"}, traits=REASONING)
    assert sent["additionalModelRequestFields"] == {"thinking": {"type": "enabled", "budget_tokens": 2000}}
    assert sent["inferenceConfig"]["maxTokens"] == 2300
    plain = body("chat", {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "high"},
                 model=NOVA, traits=REASONING)
    assert "additionalModelRequestFields" not in plain  # not Claude: effort only routed


def test_a_messages_callers_betas_go_to_claude_less_those_converse_says_itself() -> None:
    request = parse("messages", {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]})
    request.headers = {"anthropic-beta": "interleaved-thinking-2025-05-14, prompt-caching-2024-07-31"}
    sent = converse.upstream_body(request, CLAUDE, OPTIONS, PLAIN)
    assert sent["additionalModelRequestFields"] == {"anthropic_beta": ["interleaved-thinking-2025-05-14"]}


def test_a_messages_callers_top_k_goes_to_claude_and_is_refused_elsewhere() -> None:
    request = {"model": "m", "max_tokens": 5, "top_k": 40, "messages": [{"role": "user", "content": "Hi"}]}
    assert body("messages", request)["additionalModelRequestFields"] == {"top_k": 40}
    assert refused("messages", request, model=NOVA).param == "top_k"


def test_reasoning_goes_back_only_to_bedrock() -> None:
    request = Request(format="messages", messages=[
        Message("user", [Text("Hi")]),
        Message("assistant", [Thinking("mine", signature="c2ln", format="converse"),
                              Thinking("", redacted="cmVk", format="converse"),
                              Thinking("theirs", signature="b3RoZXI=", format="messages"), Text("Hello")]),
        Message("user", [Text("More")])])
    content = converse.upstream_body(request, CLAUDE, OPTIONS, PLAIN)["messages"][1]["content"]
    assert content == [{"reasoningContent": {"reasoningText": {"text": "mine", "signature": "c2ln"}}},
                       {"reasoningContent": {"redactedContent": "cmVk"}}, {"text": "Hello"}]


def test_bedrocks_reasoning_reaches_a_messages_caller_unsealed_block_by_block() -> None:
    """Claude's reasoning on Bedrock, streamed to a Messages caller: each block its own thinking block, its text
    without Bedrock's signature (which goes back only to Bedrock), the same blocks as the whole answer."""
    events = [ThinkingDelta("First.", format="converse"), ThinkingDelta(signature="c2ln", format="converse"),
              ThinkingDelta("Second.", format="converse"), ThinkingDelta(signature="c2lnMg==", format="converse"),
              ThinkingDelta(redacted="cmVk", format="converse"), TextDelta("Hi"), Finish(FinishReason.STOP)]
    renderer = messages.StreamRenderer(ANSWER, parse("messages", REQUESTS["messages"]))
    sent = renderer.start() + b"".join(renderer.event(ev) for ev in events) + renderer.finish()
    frames = [orjson.loads(line[5:]) for line in sent.split(b"\n") if line.startswith(b"data:")]
    started = [f["content_block"] for f in frames if f["type"] == "content_block_start"]
    assert [b["type"] for b in started] == ["thinking", "thinking", "text"]
    deltas = [f["delta"] for f in frames if f["type"] == "content_block_delta"]
    assert [d.get("thinking") for d in deltas if d["type"] == "thinking_delta"] == ["First.", "Second."]
    assert not [d for d in deltas if d["type"] == "signature_delta"] and b"c2ln" not in sent and b"cmVk" not in sent
    whole = messages.render(fold(events), ANSWER, parse("messages", REQUESTS["messages"]))["content"]
    assert [(b["type"], b.get("thinking"), b.get("signature")) for b in whole] == [
        ("thinking", "First.", ""), ("thinking", "Second.", ""), ("text", None, None)]


def test_structured_output_is_a_forced_tool() -> None:
    sent = body("chat", {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "response_format": {
        "type": "json_schema", "json_schema": {"name": "reply", "schema": WEATHER}}})
    assert sent["toolConfig"]["toolChoice"] == {"tool": {"name": "specway_json_reply"}}
    assert sent["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"] == {"json": WEATHER}


def test_tool_choices_converse_cannot_say_are_refused_by_name() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": WEATHER}}]
    history = [{"role": "user", "content": "Hi"},
               {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                     "function": {"name": "f", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "c", "content": "ok"}]
    assert refused("chat", {"model": "m", "messages": history, "tools": tools, "tool_choice": "none"}).param == \
        "tool_choice"
    fresh = body("chat", {"model": "m", "messages": history[:1], "tools": tools, "tool_choice": "none"})
    assert "toolConfig" not in fresh  # no tool may be called, and none was: none is offered
    assert refused("chat", {"model": "m", "messages": history[:1], "tools": tools,
                            "parallel_tool_calls": False}).param == "parallel_tool_calls"


# --- reading ----------------------------------------------------------------------------------------------------------


def test_a_whole_answer_is_read() -> None:
    result = converse.upstream_result({
        "output": {"message": {"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "Hmm.", "signature": "c2ln"}}},
            {"text": "Calling."},
            {"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {"city": "Paris"}}}]}},
        "stopReason": "tool_use", "metrics": {"latencyMs": 3},
        "usage": {"inputTokens": 10, "outputTokens": 4, "totalTokens": 19, "cacheReadInputTokens": 5}})
    assert result.content == [Thinking("Hmm.", signature="c2ln", format="converse"), Text("Calling."),
                              ToolCall("t1", "get_weather", '{"city":"Paris"}')]
    assert result.finish_reason is FinishReason.TOOL_CALLS
    assert result.usage == Usage(input_tokens=15, output_tokens=4, cached_input_tokens=5)


@pytest.mark.parametrize(("word", "reason"), [
    ("end_turn", FinishReason.STOP), ("max_tokens", FinishReason.LENGTH), ("stop_sequence", FinishReason.STOP_SEQUENCE),
    ("guardrail_intervened", FinishReason.CONTENT_FILTER), ("content_filtered", FinishReason.CONTENT_FILTER),
    ("malformed_tool_use", FinishReason.UNKNOWN)])
def test_stop_reasons(word: str, reason: FinishReason) -> None:
    assert set(converse.vocabulary.STOP_READ) | {"malformed_model_output", "malformed_tool_use"} == set(
        SHAPES["StopReason"]["enum"])
    answer = {"output": {"message": {"role": "assistant", "content": []}}, "stopReason": word, "usage": {}}
    assert converse.upstream_result(answer).finish_reason is reason


def test_the_forced_tool_is_read_as_the_answers_text() -> None:
    answer = {"output": {"message": {"role": "assistant", "content": [
        {"toolUse": {"toolUseId": "t", "name": "specway_json_reply", "input": {"a": 1}}}]}}, "stopReason": "tool_use"}
    result = converse.upstream_result(answer)
    assert (result.content, result.finish_reason) == ([Text('{"a":1}')], FinishReason.STOP)


def test_an_answer_without_a_message_cannot_be_read() -> None:
    with pytest.raises(UpstreamFault):
        converse.upstream_result({"message": "nope"})


def test_stream_events_are_read() -> None:
    reader = converse.UpstreamReader()
    said = [
        ("messageStart", '{"role": "assistant"}'),
        ("contentBlockDelta", '{"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "Hm"}}}'),
        ("contentBlockDelta", '{"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "c2ln"}}}'),
        ("contentBlockDelta", '{"contentBlockIndex": 1, "delta": {"text": "Hi"}}'),
        ("contentBlockStart", '{"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "t", "name": "f"}}}'),
        ("contentBlockStop", '{"contentBlockIndex": 2}'),
        ("messageStop", '{"stopReason": "tool_use"}'),
        ("metadata", '{"usage": {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5}, "metrics": {}}'),
    ]
    got = [event for name, data in said for event in reader.read(name, data)]
    assert got == [ThinkingDelta("Hm", format="converse"), ThinkingDelta(signature="c2ln", format="converse"),
                   TextDelta("Hi"), ToolCallStart(0, "t", "f"), ToolCallDelta(0, "{}"),
                   Finish(FinishReason.TOOL_CALLS), UsageReport(Usage(3, 2, None, None))]
    assert reader.done


def test_an_exception_event_is_the_upstreams_error() -> None:
    with pytest.raises(UpstreamFault) as info:
        converse.UpstreamReader().read("throttlingException", '{"message": "Slow down."}')
    assert info.value.payload == {"error": {"type": "throttlingException", "message": "Slow down."}}
    assert set(converse.STREAM_EXCEPTIONS) == {m for m in members("ConverseStreamOutput") if m.endswith("Exception")}


def test_a_tool_choice_of_another_format_only_is_refused() -> None:
    request = Request(format="responses", messages=[Message("user", [Text("Hi")])],
                      tool_choice=ToolChoice(None, {"type": "allowed_tools"}, "responses"))
    with pytest.raises(ApiError):
        converse.upstream_body(request, NOVA, OPTIONS, PLAIN)
