"""The gemini caller format: a GenerateContentRequest into the canonical Request (both of Google's spellings), and the
canonical answer, whole and streamed, into GenerateContentResponse (thought signatures on the parts they came with,
usage, finish reasons), Google's error shape, and what another upstream kind refuses by name."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pydantic
import pytest

from generated.models import GeminiCountTokensRequest, GeminiGenerateContentRequest
from handlers.errors import ApiError, bad_request, validation_error
from handlers.inference import formats  # noqa: F401  (fills FORMATS)
from handlers.inference.canonical import (
    Answer,
    Document,
    Finish,
    FinishReason,
    HostedTool,
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
    ToolCallDelta,
    ToolCallStart,
    ToolResult,
    Unknown,
    Usage,
    UsageReport,
)
from handlers.inference.formats import gemini, messages
from handlers.inference.formats.base import Traits, UpstreamOptions
from handlers.inference.formats.gemini.vocabulary import json_schema, read_usage, usage
from handlers.inference.formats.reasoning import goes_back, left_out


def parse(body: dict[str, Any]) -> Request:
    """The body as the route parses it: the generated model (its errors as the gateway answers them), then the
    format."""
    try:
        model = GeminiGenerateContentRequest.model_validate_json(orjson.dumps(body))
    except pydantic.ValidationError as exc:
        raise validation_error(exc) from None
    return gemini.parse(model)


def user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "parts": list(parts)}


def test_text_system_and_generation_config_in_either_spelling() -> None:
    req = parse({"contents": [user({"text": "Hi"})], "systemInstruction": {"parts": [{"text": "Be brief."}]},
                 "generationConfig": {"maxOutputTokens": 64, "temperature": 0.5, "top_p": 0.9, "stop_sequences": ["X"],
                                      "seed": 7}})
    assert req.format == "gemini" and req.system == "Be brief." and req.messages[0].text() == "Hi"
    assert (req.max_tokens, req.temperature, req.top_p, req.stop, req.seed) == (64, 0.5, 0.9, ["X"], 7)


@pytest.mark.parametrize(("config", "effort", "budget", "on"), [
    ({"thinkingLevel": "HIGH"}, "high", None, None),
    ({"thinking_budget": 2048, "include_thoughts": True}, None, 2048, True),
    ({"thinkingBudget": 0}, None, None, False),
    ({"thinkingBudget": -1}, None, None, True),
])
def test_thinking_config_is_the_effort(config: dict[str, Any], effort: str | None, budget: int | None,
                                       on: bool | None) -> None:
    req = parse({"contents": [user({"text": "Hi"})], "generationConfig": {"thinkingConfig": config}})
    assert (req.effort, req.thinking_budget, req.thinking) == (effort, budget, on)


def test_parts_become_blocks_in_place() -> None:
    req = parse({"contents": [
        user({"text": "Look"}, {"inlineData": {"mime_type": "image/png", "data": "iVBOR"}},
             {"inlineData": {"mimeType": "application/pdf", "data": "JVBER"}},
             {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/a.jpg"}},
             {"fileData": {"file_uri": "gs://bucket/b.pdf", "mime_type": "application/pdf"}},
             {"inlineData": {"mimeType": "audio/mp3", "data": "AAAA"}}),
    ]})
    blocks = req.messages[0].content
    assert blocks[1] == Image(data="iVBOR", media_type="image/png")
    assert blocks[2] == Document(data="JVBER", media_type="application/pdf")
    assert blocks[3] == Image(url="https://example.com/a.jpg")
    assert blocks[4] == Document(file_id="gs://bucket/b.pdf", media_type="application/pdf")
    assert isinstance(blocks[5], Unknown) and blocks[5].where == "contents.0.parts.5"


def test_function_calls_and_responses_with_and_without_ids() -> None:
    req = parse({"contents": [
        user({"text": "Weather?"}),
        {"role": "model", "parts": [{"functionCall": {"name": "w", "args": {"city": "Oslo"}},
                                     "thoughtSignature": "c2ln"},
                                    {"functionCall": {"id": "c9", "name": "w", "args": {"city": "Rome"}}}]},
        user({"functionResponse": {"name": "w", "response": {"output": "cold"}}},
             {"functionResponse": {"id": "c9", "name": "w", "response": {"error": "no data"}}},
             {"text": "Thanks"}),
    ]})
    model, first, second, rest = req.messages[1], req.messages[2], req.messages[3], req.messages[4]
    assert model.role == "assistant"
    seal, call, named = model.content
    assert seal == Thinking("", signature="c2ln", format="gemini")
    assert (call.id, call.name, json.loads(call.arguments)) == ("call_1_0", "w", {"city": "Oslo"})
    assert named.id == "c9"
    assert first.role == "tool" and first.content == [ToolResult("call_1_0", "cold")]
    assert second.content == [ToolResult("c9", "no data", is_error=True)]
    assert rest.role == "user" and rest.text() == "Thanks"


def test_tools_choice_and_structured_output() -> None:
    req = parse({"contents": [user({"text": "Hi"})],
                 "tools": [{"functionDeclarations": [
                     {"name": "f", "description": "d", "parameters": {"type": "OBJECT", "properties": {
                         "n": {"type": "INTEGER"}}}},
                     {"name": "g", "parameters_json_schema": {"type": "object"}}]}, {"googleSearch": {}},
                     {"codeExecution": {}}],
                 "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["g"]}},
                 "generationConfig": {"responseMimeType": "application/json", "responseSchema": {
                     "type": "ARRAY", "items": {"type": "STRING"}, "propertyOrdering": ["x"]}}})
    f, g, search, code = req.tools or []
    assert isinstance(f, Tool) and f.parameters == {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert isinstance(g, Tool) and g.parameters == {"type": "object"}
    assert isinstance(search, HostedTool) and search.kind == "web_search" and search.type == "googleSearch"
    assert isinstance(code, HostedTool) and code.kind is None
    assert req.tool_choice is not None and (req.tool_choice.mode, req.tool_choice.name) == ("tool", "g")
    assert req.output == OutputFormat("json_schema", schema={"type": "array", "items": {"type": "string"}})


@pytest.mark.parametrize(("config", "param"), [
    ({"generationConfig": {"candidateCount": 2}}, "generationConfig.candidateCount"),
    ({"generationConfig": {"responseMimeType": "text/plain", "responseJsonSchema": {}}},
     "generationConfig.responseMimeType"),
    ({"generationConfig": {"responseSchema": {}, "responseJsonSchema": {}}}, "generationConfig.responseJsonSchema"),
    ({"contents": [{"role": "system", "parts": []}]}, "contents.0.role"),
    ({"systemInstruction": {"parts": [{"inlineData": {}}]}}, "systemInstruction.parts.0.text"),
    ({"generationConfig": {"thinkingConfig": {"thinking_level": 3}}}, "generationConfig.thinkingConfig.thinkingLevel"),
])
def test_what_gemini_itself_refuses_is_a_400_naming_it(config: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as refused:
        parse({"contents": [user({"text": "Hi"})], **config})
    assert (refused.value.status, refused.value.param) == (400, param), refused.value.message


def test_untranslatable_fields_are_refused_by_name_elsewhere() -> None:
    req = parse({"contents": [user({"text": "Hi"})], "cachedContent": "cachedContents/x", "labels": {"a": "b"},
                 "safetySettings": [{"category": "X", "threshold": "BLOCK_NONE"}],
                 "generationConfig": {"topK": 3, "presencePenalty": 0}})
    assert set(req.extra) == {"cachedContent", "generationConfig.topK", "generationConfig.presencePenalty",
                              "labels", "safetySettings"}
    with pytest.raises(ApiError) as refused:
        messages.upstream_body(req, "claude", UpstreamOptions(), Traits())
    assert refused.value.param in ("cachedContent", "generationConfig.topK")
    req.extra.pop("cachedContent")
    req.extra.pop("generationConfig.topK")
    body = messages.upstream_body(req, "claude", UpstreamOptions(), Traits())  # the advisory and inert ones go
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]


def test_a_gemini_signature_goes_back_only_to_gemini() -> None:
    req = parse({"contents": [user({"text": "Hi"}), {"role": "model", "parts": [
        {"text": "thinking...", "thought": True, "thoughtSignature": "AAA"}, {"text": "Hello", "thoughtSignature": "BB"}]}]})
    thought, seal, text = req.messages[1].content
    assert thought == Thinking("thinking...", signature="AAA", format="gemini") and text == Text("Hello")
    assert goes_back(seal, "gemini") and not goes_back(seal, "messages")
    assert left_out(req, "messages", Traits()) == [
        "2 thought signatures from gemini: an anthropic upstream takes back only thinking it signed itself"]


def test_a_gemini_thought_summary_left_out_is_called_one() -> None:
    """A Gemini upstream's thought summary (no signature), in a conversation later sent elsewhere."""
    req = Request("messages", [Message("user", [Text("Hi")]),
                               Message("assistant", [Thinking("thinking...", format="gemini"), Text("Hello")])])
    assert left_out(req, "chat", Traits()) == [
        "1 thought summary from gemini: a chat completions upstream takes back only reasoning text it showed itself"]


ANSWER = Answer("d1", "acme/g", 0)


def test_the_whole_answer() -> None:
    result = Result([Thinking("", signature="SIG", format="gemini"), Text("Hi"),
                     ToolCall("c1", "f", '{"a": 1}'), Thinking("reasoned", signature="anthropic", format="messages")],
                    FinishReason.TOOL_CALLS, Usage(10, 5, 2, reasoning_tokens=3))
    body = gemini.render(result, ANSWER, parse({"contents": [user({"text": "x"})]}))
    assert body == {
        "candidates": [{"content": {"role": "model", "parts": [
            {"text": "Hi", "thoughtSignature": "SIG"},
            {"functionCall": {"id": "c1", "name": "f", "args": {"a": 1}}}]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 2, "totalTokenCount": 15,
                          "cachedContentTokenCount": 2, "thoughtsTokenCount": 3},
        "modelVersion": "acme/g", "responseId": "d1"}


def test_thoughts_show_when_asked() -> None:
    request = parse({"contents": [user({"text": "x"})], "generationConfig": {"thinkingConfig": {
        "includeThoughts": True}}})
    result = Result([Thinking("hmm", signature="anthropic", format="messages"), Text("Hi")], FinishReason.LENGTH,
                    Usage(1, 1))
    parts = gemini.render(result, ANSWER, request)["candidates"][0]
    assert parts["content"]["parts"] == [{"text": "hmm", "thought": True}, {"text": "Hi"}]
    assert parts["finishReason"] == "MAX_TOKENS"


def frames(chunks: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in chunks.decode().split("\n") if line.startswith("data: ")]


def test_the_stream() -> None:
    renderer = gemini.StreamRenderer(ANSWER, parse({"contents": [user({"text": "x"})]}))
    out = renderer.start()
    for ev in [TextDelta("Hel"), TextDelta("lo"), ThinkingDelta(signature="S", format="gemini"),
               ToolCallStart(0, "c1", "f"), ToolCallDelta(0, '{"a":'), ToolCallDelta(0, " 1}"),
               Finish(FinishReason.TOOL_CALLS), UsageReport(Usage(4, 2))]:
        out += renderer.event(ev)
    out += renderer.finish()
    chunks = frames(out)
    parts = [c["candidates"][0]["content"]["parts"] for c in chunks]
    assert parts == [[{"text": "Hel"}], [{"text": "lo"}],
                     [{"functionCall": {"id": "c1", "name": "f", "args": {"a": 1}}, "thoughtSignature": "S"}], []]
    assert [c["candidates"][0].get("finishReason") for c in chunks] == [None, None, None, "STOP"]
    assert chunks[-1]["usageMetadata"] == {"promptTokenCount": 4, "candidatesTokenCount": 2, "totalTokenCount": 6}
    assert {c["responseId"] for c in chunks} == {"d1"}


def test_an_error_mid_stream_is_googles_shape() -> None:
    renderer = gemini.StreamRenderer(ANSWER, parse({"contents": [user({"text": "x"})]}))
    error = frames(renderer.error(bad_request("broken", "contents.0")))[0]["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert error["details"][1]["fieldViolations"] == [{"field": "contents.0", "description": "broken"}]


def test_usage_both_ways() -> None:
    read = read_usage({"promptTokenCount": 10, "candidatesTokenCount": 4, "thoughtsTokenCount": 6,
                       "cachedContentTokenCount": 3, "totalTokenCount": 20})
    assert (read.input_tokens, read.output_tokens, read.cached_input_tokens) == (10, 10, 3)
    assert usage(read) == {"promptTokenCount": 10, "candidatesTokenCount": 4, "totalTokenCount": 20,
                           "cachedContentTokenCount": 3, "thoughtsTokenCount": 6}


def test_googles_schema_dialect() -> None:
    assert json_schema({"type": "OBJECT", "nullable": True, "any_of": [{"type": "STRING"}], "property_ordering": ["a"],
                        "properties": {"a": {"type": "NUMBER", "format": "float"}}}) == {
        "type": ["object", "null"], "anyOf": [{"type": "string"}], "properties": {"a": {"type": "number",
                                                                                         "format": "float"}}}


def test_count_tokens_takes_contents_or_a_whole_request() -> None:
    plain = gemini.parse_count(GeminiCountTokensRequest.model_validate({"contents": [user({"text": "a b"})]}))
    whole = gemini.parse_count(GeminiCountTokensRequest.model_validate(
        {"generateContentRequest": {"model": "models/x", "contents": [user({"text": "c"})],
                                    "systemInstruction": "s"}}))
    assert plain.messages[0].text() == "a b" and (whole.messages[0].text(), whole.system) == ("c", "s")
    assert gemini.count_body(3) == {"totalTokens": 3}
