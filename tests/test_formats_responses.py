"""The OpenAI responses wire format: parse rules and the rendered answer, which echoes the request."""

from __future__ import annotations

from typing import Any

import openai.types.responses as openai_responses
import pytest

from generated import models as g
from handlers.errors import ApiError
from handlers.inference.canonical import (
    CacheMark,
    Document,
    FinishReason,
    HostedTool,
    Image,
    Message,
    OutputFormat,
    Result,
    Text,
    Thinking,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
    Unknown,
    Usage,
)
from handlers.inference.formats.common import refuse_untranslatable
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
            "store": False,
        },
    )
    assert request.messages == [Message("user", [Text("Hello")])]
    assert (request.system, request.max_tokens, request.temperature, request.effort) == ("Be kind.", 100, 0.2, "medium")
    assert (request.stream, request.top_p, request.instructions) == (True, 0.3, "Be kind.")
    assert request.tool_choice == ToolChoice("required", "required", "responses")
    assert request.tools == [
        Tool("f", "d", {"type": "object"}, tool, "responses"),
        HostedTool("web_search", "web_search", search, "responses"),
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


def test_responses_parse_a_reasoning_item_sent_back_with_null_content() -> None:
    """Codex sends each reasoning item of the last answer back with "content": null."""
    summary = [{"type": "summary_text", "text": "Run it."}]
    request = parse("responses", {"input": [
        {"role": "user", "content": "Go"},
        {"type": "reasoning", "id": "rs_1", "summary": summary, "content": None, "encrypted_content": "gAAA"},
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
    ]})
    assert request.messages[1] == Message("assistant", [
        Thinking("Run it.", encrypted="gAAA", id="rs_1", format="responses"), ToolCall("c1", "exec_command", "{}")])


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
