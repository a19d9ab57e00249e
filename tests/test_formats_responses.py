"""The OpenAI responses wire format: parse rules and the rendered answer, which echoes the request."""

from __future__ import annotations

from typing import Any

import openai
import openai.types.responses as openai_responses
import orjson
import pytest
from openai.types.responses import response_create_params
from pydantic import TypeAdapter

from generated import models as g
from handlers.errors import ApiError
from handlers.inference.canonical import (
    CacheMark,
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
from handlers.inference.formats.common import refuse_untranslatable
from tests.formats_support import ANSWER, RESULTS, USER, bad, parse, render
from tests.test_formats_streams import events_of, frames, openai_client, stream

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
            "store": False,
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
    # Declared fields canonical does not model; previous_response_id is refused now (test_state_is_refused).
    assert request.extra == {"store": False, "reasoning.summary": "auto"}


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
    # Images and reasoning items are modelled now (issue 14): an Image, and Thinking that goes back to OpenAI only.
    assert request.messages == [
        Message("user", [Text("Hi"), Image(url="u")]),
        Message(
            "assistant", [Text("Let me see."), Thinking("", id="rs_1", format="responses"), ToolCall("c1", "f", "{}")]
        ),
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


# --- parse: what issue 14 added -------------------------------------------------------------------------------------


def test_responses_parse_images_and_files() -> None:
    breakpoint_ = {"mode": "explicit"}
    request = parse(
        "responses",
        {
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Look", "prompt_cache_breakpoint": breakpoint_},
                        {"type": "input_image", "image_url": "https://x/cat.png", "detail": "high"},
                        {"type": "input_image", "image_url": "data:image/png;base64,iVBOR", "detail": "low"},
                        {"type": "input_image", "file_id": "file-img", "detail": "auto",
                         "prompt_cache_breakpoint": breakpoint_},
                        {"type": "input_file", "file_data": "data:application/pdf;base64,JVBER", "filename": "a.pdf"},
                        {"type": "input_file", "file_data": "JVBER", "filename": "b.pdf"},
                        {"type": "input_file", "file_url": "https://x/c.pdf"},
                        {"type": "input_file", "file_id": "file-doc", "filename": "d.txt"},
                    ],
                }
            ]
        },
    )  # fmt: skip
    assert request.messages == [
        Message(
            "user",
            [
                Text("Look", cache=CacheMark()),
                Image(url="https://x/cat.png", detail="high"),
                Image(data="iVBOR", media_type="image/png", detail="low"),
                Image(file_id="file-img", detail="auto", cache=CacheMark()),
                Document(data="JVBER", media_type="application/pdf", filename="a.pdf"),
                Document(data="JVBER", media_type="application/pdf", filename="b.pdf"),  # raw base64: type by name
                Document(url="https://x/c.pdf"),
                Document(file_id="file-doc", filename="d.txt"),
            ],
        )
    ]


def test_responses_parse_reasoning_items_and_tool_outputs_with_images() -> None:
    request = parse(
        "responses",
        {
            "input": [
                {"role": "user", "content": "Weather?"},
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [{"type": "summary_text", "text": "Need"}, {"type": "summary_text", "text": "a tool."}],
                    "encrypted_content": "gAAA",
                },
                {"type": "function_call", "call_id": "c1", "name": "snap", "arguments": "{}"},
                {
                    "type": "function_call_output",
                    "call_id": "c1",
                    "output": [
                        {"type": "input_text", "text": "Here:"},
                        {"type": "input_image", "image_url": "https://x/sky.png"},
                    ],
                },
                {
                    "type": "reasoning",
                    "id": "rs_2",
                    "summary": [],
                    "content": [{"type": "reasoning_text", "text": "raw"}],
                },
                {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]},
            ]
        },
    )
    assert request.messages[1:] == [
        Message(
            "assistant",
            [
                Thinking("Need\n\na tool.", encrypted="gAAA", id="rs_1", format="responses"),
                ToolCall("c1", "snap", "{}"),
            ],
        ),
        Message("tool", [ToolResult("c1", "Here:"), Image(url="https://x/sky.png")]),
        Message("assistant", [Thinking("raw", id="rs_2", format="responses"), Text("No.")]),
    ]


@pytest.mark.parametrize(
    ("text", "output"),
    [
        (None, None),
        ({"format": {"type": "text"}}, None),
        ({"format": {"type": "json_object"}}, OutputFormat("json_object")),
        (
            {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": True,
                        "description": "d"}},
            OutputFormat("json_schema", {"type": "object"}, "w", True, "d"),
        ),
        ({"format": {"type": "json_schema", "schema": {}}}, OutputFormat("json_schema", {})),
        ({"verbosity": "low"}, None),
    ],
)  # fmt: skip
def test_responses_parse_structured_output(text: dict[str, Any] | None, output: OutputFormat | None) -> None:
    body = {"input": "x", **({"text": text} if text else {})}
    assert parse("responses", body).output == output


def test_responses_parse_keeps_declared_fields_it_does_not_model_in_extra_and_the_whole_body() -> None:
    body = {
        "input": "x", "max_output_tokens": 100, "include": ["reasoning.encrypted_content"], "truncation": "auto",
        "metadata": {"k": "v"}, "user": "u", "service_tier": "flex", "top_logprobs": 0, "max_tool_calls": 3,
        "prompt": {"id": "pmpt_1"}, "reasoning": {"effort": "low", "summary": "auto", "mode": "standard"},
        "text": {"format": {"type": "grammar", "grammar": "g"}, "verbosity": "high"},
        "parallel_tool_calls": False, "not_in_any_spec": 1, "store": False, "background": False,
    }  # fmt: skip
    request = parse("responses", body)
    assert request.body == body and isinstance(request.body["max_output_tokens"], int)
    assert request.extra == {
        "include": ["reasoning.encrypted_content"], "truncation": "auto", "metadata": {"k": "v"}, "user": "u",
        "service_tier": "flex", "top_logprobs": 0, "max_tool_calls": 3, "prompt": {"id": "pmpt_1"},
        "parallel_tool_calls": False, "store": False, "background": False, "reasoning.summary": "auto",
        "reasoning.mode": "standard", "text.verbosity": "high", "text.format": {"type": "grammar", "grammar": "g"},
    }  # fmt: skip
    assert (request.effort, request.output, request.thinking) == ("low", None, None)
    assert parse("responses", {"input": "x", "reasoning": {"effort": "none"}}).thinking is False


def test_responses_sets_are_what_another_kind_leaves_out_of_a_responses_request() -> None:
    """ADVISORY and INERT as refuse_untranslatable reads them: identification, caching, billing and what only OpenAI
    adds to an answer are left out; a field that changes the answer is refused by name."""
    fine = parse("responses", {
        "input": "x", "user": "u", "metadata": {}, "include": ["reasoning.encrypted_content"], "truncation": "auto",
        "store": False, "background": False, "top_logprobs": 0, "parallel_tool_calls": True, "service_tier": "auto",
        "prompt_cache_key": "k", "safety_identifier": "s", "max_tool_calls": 2,
        "reasoning": {"summary": "detailed", "mode": "standard", "context": "auto"}, "text": {"verbosity": "medium"},
    })  # fmt: skip
    refuse_untranslatable(fine, "openai")
    for field, body in [
        ("prompt", {"prompt": {"id": "pmpt_1"}}),
        ("moderation", {"moderation": {"model": "omni-moderation-latest"}}),
        ("top_logprobs", {"top_logprobs": 3}),
        ("text.verbosity", {"text": {"verbosity": "low"}}),
        ("text.format", {"text": {"format": {"type": "grammar"}}}),
        ("reasoning.mode", {"reasoning": {"mode": "pro"}}),
        ("context_management", {"context_management": [{"type": "compaction"}]}),
    ]:
        with pytest.raises(ApiError) as caught:
            refuse_untranslatable(parse("responses", {"input": "x", **body}), "openai")  # fmt: skip
        assert (caught.value.code, caught.value.param) == ("unsupported_parameter", field)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"conversation": {"id": "conv_1"}}, "conversation"),
        ({"store": True}, "store"),
        ({"background": True}, "background"),
    ],
)
def test_state_is_refused(body: dict[str, Any], param: str) -> None:
    """Specway keeps no response state (and its response ids are decision ids): these are refused whatever the
    upstream, with a message that says what to do instead."""
    err = bad("responses", {"input": "x", **body})
    assert (err.code, err.param) == ("unsupported_parameter", param)
    assert "not supported" in err.message and ("input" in err.message or "stream" in err.message)


def test_state_that_asks_for_nothing_is_fine() -> None:
    body = {"input": "x", "previous_response_id": None, "conversation": None, "store": False, "background": None}
    assert parse("responses", body).messages == [Message("user", [Text("x")])]


@pytest.mark.parametrize(
    ("part", "param"),
    [
        ({"type": "input_image", "detail": "auto"}, "input.0.content.0.image_url"),
        ({"type": "input_image", "image_url": {"url": "u"}}, "input.0.content.0.image_url"),
        ({"type": "input_file", "filename": "a.pdf"}, "input.0.content.0.file_data"),
        ({"type": "refusal"}, "input.0.content.0.refusal"),
    ],
)
def test_responses_parse_bad_parts_name_the_field(part: dict[str, Any], param: str) -> None:
    assert bad("responses", {"input": [{"role": "user", "content": [part]}]}).param == param


def test_responses_parse_a_schema_that_is_not_an_object_is_a_400() -> None:
    body = {"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": "no"}}}
    assert bad("responses", body).param == "text.format.schema"


# --- render: reasoning and usage -------------------------------------------------------------------------------------

THOUGHT = Thinking("Let me think.", encrypted="gAAA", id="rs_up", format="responses")


def test_render_responses_reasoning_comes_before_the_message() -> None:
    result = Result([THOUGHT, Text("Hello"), CALL_IN_RESULT], FinishReason.TOOL_CALLS, Usage(100, 20, 60, 30))
    rendered = render("responses", result)
    openai_responses.Response.model_validate(rendered)
    g.ResponseObject.model_validate(rendered)
    thought, message, call = rendered["output"]
    assert thought == {
        "id": "rs_up",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "Let me think."}],
        "encrypted_content": "gAAA",
    }
    assert (message["type"], call["type"], rendered["output_text"]) == ("message", "function_call", "Hello")
    assert rendered["usage"] == {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 30},
        "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 120,
    }


CALL_IN_RESULT = ToolCall("call_1", "f", "{}")


def test_render_responses_joins_a_run_of_text_into_one_message() -> None:
    # adjacent text blocks (an upstream that split its text) make one message item; caught by `make mutate`
    rendered = render("responses", Result([Text("Hel"), Text("lo")], FinishReason.STOP, Usage(1, 2)))
    (message,) = rendered["output"]
    assert (message["content"][0]["text"], rendered["output_text"]) == ("Hello", "Hello")


def test_render_responses_keeps_the_text_after_a_block_it_has_no_item_for() -> None:
    # a block with no item (an empty text, Anthropic's redacted thinking) is skipped, not the end of the answer;
    # caught by `make mutate` (`continue` as `break`)
    redacted = Thinking("", redacted="opaque", format="messages")
    rendered = render("responses", Result([Text(""), Text("Hel"), redacted, Text("lo")], FinishReason.STOP, Usage()))
    (message,) = rendered["output"]
    assert (message["content"][0]["text"], rendered["output_text"]) == ("Hello", "Hello")


def test_render_responses_another_providers_thinking_has_our_id_and_no_encrypted_content() -> None:
    anthropic = Thinking("Hmm.", signature="sig", format="messages")
    redacted = Thinking("", redacted="opaque", format="messages")  # nothing a Responses caller can read: left out
    rendered = render("responses", Result([anthropic, redacted, Text("Hi")], FinishReason.STOP, Usage()))
    assert rendered["output"][0] == {
        "id": "rs_dec123",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "Hmm."}],
    }
    assert [item["type"] for item in rendered["output"]] == ["reasoning", "message"]


def test_render_responses_gives_back_openai_items_it_does_not_model() -> None:
    search = {
        "id": "ws_1",
        "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search", "query": "q"},
    }
    empty = Thinking("", id="rs_0", format="responses")  # OpenAI's reasoning without a summary: still its item
    result = Result([empty, Unknown(search, "responses"), Text("Found.")], FinishReason.STOP, Usage())
    rendered = render("responses", result)
    openai_responses.Response.model_validate(rendered)
    assert rendered["output"][:2] == [{"id": "rs_0", "type": "reasoning", "summary": []}, search]


def test_render_responses_only_reasoning_still_has_a_message() -> None:
    rendered = render("responses", Result([THOUGHT], FinishReason.STOP, Usage()))
    assert [item["type"] for item in rendered["output"]] == ["reasoning", "message"] and rendered["output_text"] == ""


# --- stream: reasoning ---------------------------------------------------------------------------------------------

THINKING_STREAM: list[Event] = [
    ThinkingDelta(id="rs_up", format="responses"),
    ThinkingDelta("Let me ", id="rs_up", format="responses"),
    ThinkingDelta("think.", id="rs_up", format="responses"),
    ThinkingDelta(encrypted="gAAA", id="rs_up", format="responses"),
    TextDelta("Hello"),
    Finish(FinishReason.STOP),
    UsageReport(Usage(10, 5, 2, 1)),
]


def test_responses_stream_reasoning_events() -> None:
    events = events_of(stream("responses", THINKING_STREAM))
    adapter: TypeAdapter[Any] = TypeAdapter(openai_responses.ResponseStreamEvent)
    for event in events:
        adapter.validate_python(event)
    assert [e["type"] for e in events][2:9] == [
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
    ]
    added, done = events[2], events[8]
    assert added["item"] == {"id": "rs_up", "type": "reasoning", "summary": []}
    assert done["item"] == THOUGHT_ITEM and events[6]["text"] == "Let me think."
    assert all(e["item_id"] == "rs_up" and e["summary_index"] == 0 for e in events[3:8])
    completed = events[-1]["response"]
    assert completed == render("responses", fold(THINKING_STREAM))
    assert completed["usage"]["input_tokens_details"] == {"cached_tokens": 2, "cache_write_tokens": 1}


THOUGHT_ITEM = {
    "id": "rs_up",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "Let me think."}],
    "encrypted_content": "gAAA",
}


def test_responses_stream_reasoning_through_the_sdk() -> None:
    with openai_client(stream("responses", THINKING_STREAM)).responses.stream(model="m", input="hi") as events:
        kinds = [event.type for event in events]
        final = events.get_final_response()
    assert "response.reasoning_summary_text.delta" in kinds
    thought, message = final.output
    assert thought.type == "reasoning" and (thought.id, thought.encrypted_content) == ("rs_up", "gAAA")
    assert [s.text for s in thought.summary] == ["Let me think."]
    assert message.type == "message" and final.output_text == "Hello"
    assert final.usage is not None and final.usage.input_tokens_details.cached_tokens == 2


def test_responses_stream_thinking_of_another_provider_and_a_second_reasoning_item() -> None:
    events: list[Event] = [
        ThinkingDelta("Claude ", format="messages"),
        ThinkingDelta("thinks.", format="messages"),
        ThinkingDelta(signature="sig", format="messages"),
        ThinkingDelta(id="rs_a", format="responses"),  # a new id: a new item
        ThinkingDelta("A", id="rs_a", format="responses"),
        ThinkingDelta(id="rs_b", format="responses"),
        ToolCallStart(0, "call_1", "f"),
        ToolCallDelta(0, "{}"),
        Finish(FinishReason.TOOL_CALLS),
    ]
    with openai_client(stream("responses", events)).responses.stream(model="m", input="hi") as s:
        final = s.get_final_response()
    assert [(item.type, item.id) for item in final.output] == [
        ("reasoning", "rs_dec123"),
        ("reasoning", "rs_a"),
        ("reasoning", "rs_b"),
        ("function_call", "fc_dec123_0"),
    ]
    first = final.output[0]
    assert first.type == "reasoning" and first.summary[0].text == "Claude thinks." and first.encrypted_content is None


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
               Tool("", None, {}, {"type": "web_search_20250305"}, "messages")],
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
                   "parameters": {"type": "object"}, "strict": False}],
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
        Usage(100, 20, 60, 5),
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
        UsageReport(Usage(100, 20, 60, 5)),
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
        UsageReport(Usage(100, 20, 60, 5)),
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
    assert reader.done and fold(got) == fold(THINKING_STREAM)


def test_the_sdk_raises_on_our_error_event() -> None:
    renderer = responses.StreamRenderer(ANSWER, parse("responses", {"input": "hi", "stream": True}))
    body = renderer.start() + renderer.event(ThinkingDelta("x", format="messages")) + renderer.error(
        ApiError(502, "upstream_error", "boom"))  # fmt: skip
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
