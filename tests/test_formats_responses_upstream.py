"""The responses format as an upstream speaks it: the body rendered for it (passthrough or from canonical) and its
answers and streams read back."""

from __future__ import annotations

from typing import Any

import openai
import openai.types.responses as openai_responses
import orjson
import pytest
from openai.types.responses import response_create_params
from pydantic import TypeAdapter

from generated import errors as codes
from handlers.errors import ApiError
from handlers.inference.canonical import (
    CacheMark,
    Document,
    Event,
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
    ToolChoice,
    ToolResult,
    Unknown,
    Usage,
    UsageReport,
    fold,
)
from handlers.inference.formats import responses
from handlers.inference.formats.base import Traits, UpstreamFault, UpstreamOptions
from tests.formats_support import ANSWER, parse, render
from tests.test_formats_responses_stream import THINKING_STREAM
from tests.test_formats_streams import frames, openai_client, stream

# --- upstream body: a Responses caller (passthrough) ----------------------------------------------------------------

REASONING = Traits(reasoning=True)
PLAIN = Traits()
OPTIONS = UpstreamOptions()


def sdk_checked(body: dict[str, Any]) -> dict[str, Any]:
    """`body` through the SDK's own request type, and each input item through the item type."""
    TypeAdapter(response_create_params.ResponseCreateParamsNonStreaming).validate_python(body)
    if isinstance(body["input"], list):
        for item in body["input"]:
            checked: Any = TypeAdapter(openai_responses.ResponseInputItemParam).validate_python(item)
            if isinstance(checked.get("content"), list):
                list(checked["content"])
    return body


CALLER = {
    "model": "alias",
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "hi", "prompt_cache_breakpoint": {"mode": "explicit"}},
                                     {"type": "input_image", "image_url": "https://x/cat.png", "detail": "low"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
    ],
    "instructions": "Be brief.", "max_output_tokens": 100, "temperature": 0.2, "top_p": 0.9,
    "tools": [{"type": "web_search"}, {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}],
    "tool_choice": {"type": "function", "name": "f"}, "parallel_tool_calls": False,
    "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}, "verbosity": "low"},
    "reasoning": {"effort": "xhigh", "summary": "auto"}, "metadata": {"k": "v"}, "user": "u", "truncation": "auto",
    "include": ["message.output_text.logprobs"], "store": False, "stream": True, "stream_options": {"include_obfuscation": False},
    "not_in_any_spec": {"x": 1},
}  # fmt: skip


def caller(**fields: Any) -> Request:
    request = parse("responses", {**CALLER, **fields})
    request.effort = "high"  # what the relay sets: the routing tier of "xhigh"
    return request


def test_responses_passthrough_keeps_every_field_as_sent_and_drops_what_no_format_defines() -> None:
    sent = sdk_checked(responses.upstream_body(caller(), "gpt-up", OPTIONS, REASONING))
    expected = {k: v for k, v in CALLER.items() if k not in ("stream", "stream_options", "not_in_any_spec")}
    expected |= {"model": "gpt-up", "reasoning": {"summary": "auto", "effort": "high"}, "store": False}
    expected["include"] = ["message.output_text.logprobs", "reasoning.encrypted_content"]
    assert sent == expected
    assert "not_in_any_spec" in responses.upstream_body(caller(), "m", UpstreamOptions(passthrough=True), PLAIN)


def test_responses_passthrough_forces_store_false_and_effort_only_for_reasoning_models() -> None:
    plain = responses.upstream_body(caller(store=None), "m", OPTIONS, PLAIN)
    assert plain["store"] is False and plain["reasoning"] == {"summary": "auto"}  # no effort: a routing input only
    assert plain["include"] == ["message.output_text.logprobs"]
    bare = parse("responses", {"input": "x", "reasoning": {"effort": "low"}})
    assert "reasoning" not in responses.upstream_body(bare, "m", OPTIONS, PLAIN)
    bare.effort = "low"
    sent = responses.upstream_body(bare, "m", OPTIONS, REASONING)
    assert (sent["reasoning"], sent["include"]) == ({"effort": "low"}, ["reasoning.encrypted_content"])


# --- upstream body: another format (rendered from canonical) --------------------------------------------------------


def other(fmt: str = "messages", **fields: Any) -> Request:
    fields.setdefault("messages", [Message("user", [Text("hi")])])
    return Request(format=fmt, **fields)  # type: ignore[arg-type]


def test_responses_renders_a_conversation_from_another_format() -> None:
    marked = CacheMark("1h")
    request = other(
        "messages",
        system="Be brief.",
        system_parts=[Text("Be brief.", cache=marked)],
        messages=[
            Message("user", [
                Text("Look", cache=marked),
                Image(url="https://x/cat.png"),
                Image(data="iVBOR", media_type="image/png", detail="high"),
                Document(data="JVBER", media_type="application/pdf"),
                Document(url="https://x/a.pdf", filename="a.pdf"),
            ]),
            Message("assistant", [
                Thinking("Hmm.", signature="sig", format="messages"),  # Anthropic's: left out
                Text("Checking."),
                ToolCall("call_1", "get_weather", '{"city":"Paris"}'),
            ]),
            Message("tool", [ToolResult("call_1", "18C", is_error=True), Text("Thanks!")]),
        ],
        tools=[Tool("get_weather", "Weather", {"type": "object"}, {"raw": 1}, "messages", cache=marked),
               HostedTool("web_search", "web_search_20250305", {"type": "web_search_20250305"}, "messages")],
        tool_choice=ToolChoice("tool", {"type": "tool", "name": "get_weather"}, "messages", name="get_weather",
                               parallel=False),
        max_tokens=200, temperature=0.5, top_p=0.9, effort="medium", thinking_budget=5000,
    )  # fmt: skip
    sent = sdk_checked(responses.upstream_body(request, "gpt-up", OPTIONS, REASONING))
    assert sent == {
        "model": "gpt-up",
        "input": [
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Look"},
                {"type": "input_image", "detail": "auto", "image_url": "https://x/cat.png"},
                {"type": "input_image", "detail": "high", "image_url": "data:image/png;base64,iVBOR"},
                {"type": "input_file", "file_data": "data:application/pdf;base64,JVBER", "filename": "document.pdf"},
                {"type": "input_file", "file_url": "https://x/a.pdf", "filename": "a.pdf"},
            ]},
            {"type": "message", "role": "assistant", "content": "Checking."},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks!"}]},
        ],
        "instructions": "Be brief.",  # cache marks need no words: OpenAI caches prompt prefixes by itself
        "max_output_tokens": 200, "temperature": 0.5, "top_p": 0.9,
        "tools": [{"type": "function", "name": "get_weather", "description": "Weather",
                   "parameters": {"type": "object"}, "strict": False},
                  {"type": "web_search"}],  # Anthropic's web search tool is OpenAI's web search
        "tool_choice": {"type": "function", "name": "get_weather"}, "parallel_tool_calls": False,
        "reasoning": {"effort": "medium"},
        "store": False,
    }  # fmt: skip


def test_responses_renders_openai_reasoning_and_files_back_and_effort_only_for_reasoning_models() -> None:
    thought = Thinking("Plan.", encrypted="gAAA", id="rs_1", format="responses")
    bare = Thinking("", format="responses")  # no encrypted content: nothing OpenAI could take back
    request = other("chat", messages=[
        Message("user", [Image(file_id="file-1", detail="low"), Document(file_id="file-2", filename="a.pdf")]),
        Message("assistant", [bare, thought, ToolCall("c", "f", "{}")]),
    ], effort="low")  # fmt: skip
    sent = sdk_checked(responses.upstream_body(request, "m", OPTIONS, PLAIN))
    assert sent["input"] == [
        {"type": "message", "role": "user", "content": [
            {"type": "input_image", "detail": "low", "file_id": "file-1"},
            {"type": "input_file", "file_id": "file-2"},
        ]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Plan."}],
         "encrypted_content": "gAAA"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
    ]  # fmt: skip
    assert "reasoning" not in sent and "include" not in sent  # not a reasoning model: effort was for routing only


@pytest.mark.parametrize(
    ("output", "fmt"),
    [
        (OutputFormat("json_object"), {"type": "json_object"}),
        (
            OutputFormat("json_schema", {"type": "object"}, "weather", True, "d"),
            {"type": "json_schema", "name": "weather", "schema": {"type": "object"}, "strict": True, "description": "d"},
        ),
        (OutputFormat("json_schema", {"type": "object"}), {"type": "json_schema", "name": "json_output",
                                                           "schema": {"type": "object"}}),
    ],
)  # fmt: skip
def test_responses_renders_structured_output_as_text_format(output: OutputFormat, fmt: dict[str, Any]) -> None:
    sent = sdk_checked(responses.upstream_body(other(output=output), "m", OPTIONS, PLAIN))
    assert sent["text"] == {"format": fmt}


def test_responses_carries_the_chat_fields_it_shares() -> None:
    extra = {"user": "u", "metadata": {"k": "v"}, "service_tier": "flex", "prompt_cache_key": "p", "verbosity": "low",
             "n": 1, "parallel_tool_calls": True}  # fmt: skip
    sent = sdk_checked(responses.upstream_body(other("chat", extra=extra), "m", OPTIONS, PLAIN))
    assert {k: sent.get(k) for k in ("user", "metadata", "service_tier", "prompt_cache_key", "text")} == {
        "user": "u", "metadata": {"k": "v"}, "service_tier": "flex", "prompt_cache_key": "p",
        "text": {"verbosity": "low"},
    }  # fmt: skip
    assert "n" not in sent and "parallel_tool_calls" not in sent  # inert, and advisory without tools


@pytest.mark.parametrize(
    ("request_", "param"),
    [
        (other("chat", stop=["END"]), "stop"),
        (other("messages", stop=["END"]), "stop_sequences"),
        (other("chat", seed=7), "seed"),
        (other(messages=[Message("user", [Image(file_id="file_anthropic")])]), "image file_id"),
        (other(messages=[Message("user", [Document(file_id="file_anthropic")])]), "document file_id"),
        (other(messages=[Message("user", [Unknown({"type": "search_result"}, "messages")])]), "search_result"),
        (other("chat", messages=[Message("user", [Unknown({"type": "input_audio"}, "chat")])]), "input_audio"),
        (other(messages=[Message("assistant", [Image(url="https://x/a.png")])]), "image"),
        (other("chat", extra={"logit_bias": {"1": 5}}), "logit_bias"),
    ],
)
def test_responses_refuses_what_it_has_no_words_for(request_: Request, param: str) -> None:
    with pytest.raises(ApiError) as caught:
        responses.upstream_body(request_, "m", OPTIONS, PLAIN)
    assert (caught.value.status, caught.value.code, caught.value.param) == (400, "unsupported_parameter", param)
    assert "responses upstream" in caught.value.message


def test_responses_tool_choice_needs_tools_and_other_tools_are_left_out() -> None:
    choice = ToolChoice("required", "any", "messages", parallel=False)
    sent = responses.upstream_body(other(tool_choice=choice), "m", OPTIONS, PLAIN)
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(sent)
    tools = [Tool("f", None, {}, {}, "chat")]
    sent = responses.upstream_body(other(tools=tools, tool_choice=ToolChoice("none", "none", "chat")), "m", OPTIONS,
                                   PLAIN)  # fmt: skip
    assert (sent["tools"], sent["tool_choice"]) == ([{"type": "function", "name": "f", "parameters": {},
                                                      "strict": False}], "none")  # fmt: skip


# --- upstream answers -----------------------------------------------------------------------------------------------

WHOLE = {
    "id": "resp_up", "object": "response", "created_at": 1, "status": "completed", "error": None,
    "incomplete_details": None, "model": "gpt-up-2025", "parallel_tool_calls": True, "tool_choice": "auto",
    "tools": [], "instructions": None, "metadata": {}, "temperature": 1.0, "top_p": 1.0,
    "output": [
        {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "A"},
                                                        {"type": "summary_text", "text": "B"}],
         "encrypted_content": "gAAA"},
        {"id": "ws_1", "type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "q"}},
        {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
         "content": [{"type": "output_text", "text": "Hi", "annotations": []}]},
        {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1", "name": "f",
         "arguments": "{}"},
    ],
    "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 5},
              "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 12}, "total_tokens": 120},
}  # fmt: skip


def test_responses_upstream_result_reads_everything() -> None:
    openai_responses.Response.model_validate(WHOLE)
    result = responses.upstream_result(WHOLE)
    assert result == Result(
        [
            Thinking("A\n\nB", encrypted="gAAA", id="rs_1", format="responses"),
            Unknown(WHOLE["output"][1], "responses"),
            Text("Hi"),
            ToolCall("call_1", "f", "{}"),
        ],
        FinishReason.TOOL_CALLS,
        Usage(100, 20, 60, 5, reasoning_tokens=12),
        "gpt-up-2025",
    )
    # A Responses caller gets OpenAI's items back as they came (reasoning summary parts joined into one).
    rendered = render("responses", result)
    assert [item["id"] for item in rendered["output"]] == ["rs_1", "ws_1", "msg_dec123", "fc_dec123_0"]


@pytest.mark.parametrize(
    ("status", "details", "reason"),
    [
        ("incomplete", {"reason": "max_output_tokens"}, FinishReason.LENGTH),
        ("incomplete", {"reason": "content_filter"}, FinishReason.CONTENT_FILTER),
        ("incomplete", {"reason": "something_new"}, FinishReason.UNKNOWN),
        ("cancelled", None, FinishReason.UNKNOWN),
    ],
)
def test_responses_upstream_result_finish(status: str, details: Any, reason: FinishReason) -> None:
    payload = {**WHOLE, "status": status, "incomplete_details": details, "output": WHOLE["output"][2:3]}
    assert responses.upstream_result(payload).finish_reason == reason


@pytest.mark.parametrize(
    ("payload", "error_type"),
    [
        ({**WHOLE, "status": "failed", "error": {"code": "server_error", "message": "boom"}}, "server_error"),
        ({**WHOLE, "status": "failed", "error": {"code": "rate_limit_exceeded", "message": "slow"}}, "rate_limit_error"),
        ({**WHOLE, "status": "failed", "error": {"code": "invalid_image_url", "message": "bad"}}, "invalid_request_error"),
        ({"error": {"type": "invalid_request_error", "message": "no"}}, "invalid_request_error"),
    ],
)  # fmt: skip
def test_responses_upstream_result_failures_are_error_payloads(payload: dict[str, Any], error_type: str) -> None:
    with pytest.raises(UpstreamFault) as caught:
        responses.upstream_result(payload)
    assert caught.value.payload is not None and caught.value.payload["error"]["type"] == error_type
    with pytest.raises(UpstreamFault, match="without output"):
        responses.upstream_result({"id": "x"})


def read(events: list[dict[str, Any]]) -> tuple[list[Event], bool]:
    reader = responses.UpstreamReader()
    out = [ev for n, event in enumerate(events) for ev in reader.read(event["type"], orjson.dumps(
        {**event, "sequence_number": n}).decode())]  # fmt: skip
    return out, reader.done


def test_responses_upstream_reader_reads_reasoning_text_and_calls() -> None:
    rs = {"id": "rs_1", "type": "reasoning", "summary": []}
    at = {"item_id": "rs_1", "output_index": 0}
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": "", "status": "x"}
    got, done = read([
        {"type": "response.created", "response": {**WHOLE, "status": "in_progress", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": rs},
        {"type": "response.reasoning_summary_text.delta", **at, "summary_index": 0, "delta": "A"},
        {"type": "response.reasoning_summary_text.delta", **at, "summary_index": 1, "delta": "B"},
        {"type": "response.output_item.done", "output_index": 0, "item": WHOLE["output"][0]},
        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1, "content_index": 0, "delta": "Hi"},
        {"type": "response.output_item.added", "output_index": 2, "item": call},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 2, "delta": '{"a"'},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 2, "delta": ":1}"},
        {"type": "response.output_item.done", "output_index": 2, "item": {**call, "arguments": '{"a":1}'}},
        {"type": "response.completed", "response": WHOLE},
    ])  # fmt: skip
    assert done and got == [
        ThinkingDelta(id="rs_1", format="responses"),
        ThinkingDelta("A", id="rs_1", format="responses"),
        ThinkingDelta("\n\nB", id="rs_1", format="responses"),
        ThinkingDelta(encrypted="gAAA", id="rs_1", format="responses"),
        TextDelta("Hi"),
        ToolCallStart(2, "call_1", "f"),
        ToolCallDelta(2, '{"a"'),
        ToolCallDelta(2, ":1}"),
        Finish(FinishReason.TOOL_CALLS),
        UsageReport(Usage(100, 20, 60, 5, reasoning_tokens=12)),
    ]
    assert fold(got).content[0] == Thinking("A\n\nB", encrypted="gAAA", id="rs_1", format="responses")


def test_responses_upstream_reader_fills_in_what_came_without_deltas() -> None:
    """Servers that send items whole (no deltas) and raw reasoning text (gpt-oss behind vLLM) read the same."""
    got, done = read([
        {"type": "response.output_item.done", "output_index": 0,
         "item": {"id": "rs_1", "type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "R"}]}},
        {"type": "response.reasoning_text.delta", "item_id": "rs_2", "output_index": 1, "content_index": 0, "delta": "S"},
        {"type": "response.output_item.done", "output_index": 2, "item": WHOLE["output"][2]},
        {"type": "response.output_item.done", "output_index": 3, "item": WHOLE["output"][3]},
        {"type": "response.incomplete", "response": {**WHOLE, "status": "incomplete",
                                                     "incomplete_details": {"reason": "max_output_tokens"}}},
    ])  # fmt: skip
    assert done and got == [
        ThinkingDelta("R", id="rs_1", format="responses"),
        ThinkingDelta("S", id="rs_2", format="responses"),
        TextDelta("Hi"),
        ToolCallStart(3, "call_1", "f"),
        ToolCallDelta(3, "{}"),
        Finish(FinishReason.LENGTH),
        UsageReport(Usage(100, 20, 60, 5, reasoning_tokens=12)),
    ]


@pytest.mark.parametrize(
    ("event", "error_type"),
    [
        ({"type": "error", "code": "rate_limit_exceeded", "message": "slow", "param": None}, "rate_limit_error"),
        ({"type": "error", "code": None, "message": "boom", "param": None}, "server_error"),
        ({"type": "error", "error": {"type": "invalid_request_error", "message": "no"}}, "invalid_request_error"),
        ({"type": "response.failed", "response": {**WHOLE, "status": "failed",
                                                  "error": {"code": "server_error", "message": "x"}}}, "server_error"),
    ],
)  # fmt: skip
def test_responses_upstream_reader_errors_are_error_payloads(event: dict[str, Any], error_type: str) -> None:
    with pytest.raises(UpstreamFault) as caught:
        read([event])
    assert caught.value.payload is not None and caught.value.payload["error"]["type"] == error_type
    assert caught.value.payload["error"]["message"]


def test_our_own_stream_reads_back_the_same() -> None:
    """What the stream renderer writes, the upstream reader reads back: a Responses upstream that is Specway."""
    reader = responses.UpstreamReader()
    got = [ev for name, data in frames(stream("responses", THINKING_STREAM)) for ev in reader.read(name or "", data)]
    want = fold(THINKING_STREAM)
    want.usage.reasoning_tokens = 0  # a count not reported is written as 0, which the SDK's type requires
    assert reader.done and fold(got) == want


def test_the_sdk_raises_on_our_error_event() -> None:
    renderer = responses.StreamRenderer(ANSWER, parse("responses", {"input": "hi", "stream": True}))
    body = renderer.start() + renderer.event(ThinkingDelta("x", format="messages")) + renderer.error(
        ApiError(codes.UPSTREAM_ERROR, "boom"))  # fmt: skip
    with pytest.raises(openai.APIError, match="boom"), openai_client(body).responses.stream(model="m", input="hi") as s:
        s.get_final_response()


def test_responses_parse_system_parts_keep_their_cache_marks() -> None:
    """Developer and system messages sent as parts are the system's parts too, with OpenAI's breakpoints as marks."""
    mark = {"mode": "explicit"}
    body = {
        "instructions": "Rules.",
        "input": [
            {
                "role": "developer",
                "content": [{"type": "input_text", "text": "Long.", "prompt_cache_breakpoint": mark}],
            },
            {"role": "system", "content": "More."},
            {"role": "user", "content": "hi"},
        ],
    }
    request = parse("responses", body)
    assert request.system == "Rules.\n\nLong.\n\nMore."
    assert request.system_parts == [Text("Rules."), Text("Long.", cache=CacheMark()), Text("More.")]
    plain = parse("responses", {"instructions": "Rules.", "input": [{"role": "system", "content": "More."}]})
    assert plain.system_parts is None  # no parts sent: the joined text says it all
