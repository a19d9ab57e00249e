"""The three formats' stream renderers: frames checked against the SDKs' event types, and streams read back by the
SDKs' own stream machinery, including a stream that fails midway."""

from __future__ import annotations

from typing import Any

import anthropic
import anthropic.types as anthropic_types
import httpx2
import openai
import openai.types.chat as openai_chat
import openai.types.responses as openai_responses
import orjson
import pytest
from pydantic import TypeAdapter

from generated import errors as codes
from handlers.errors import ApiError
from handlers.inference.canonical import (
    Event,
    Finish,
    FinishReason,
    Request,
    Result,
    Text,
    TextDelta,
    ToolCallDelta,
    ToolCallStart,
    Usage,
    UsageReport,
    fold,
)
from handlers.inference.formats import messages
from tests.formats_support import ANSWER, MODULES, REQUESTS, USER, messages_delta_usage, messages_usage, parse, render

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
        + renderer.error(ApiError(codes.UPSTREAM_ERROR, "boom"))
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
    assert events[0]["message"]["usage"] == messages_usage(0, 0)
    assert events[-2]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert events[-2]["usage"] == messages_delta_usage(3, 2)


def test_messages_stream_starts_with_the_input_tokens_an_upstream_reports_first() -> None:
    early = [UsageReport(Usage(40, 1, 30)), TextDelta("Hi"), Finish(FinishReason.STOP_SEQUENCE, "END"),
             UsageReport(Usage(40, 6, 30))]  # fmt: skip
    events = events_of(stream("messages", early))
    assert [e["type"] for e in events][:2] == ["message_start", "content_block_start"]
    assert events[0]["message"]["usage"] == messages_usage(10, 1, read=30)
    assert events[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    with anthropic_client(stream("messages", early)).messages.stream(model="m", max_tokens=8, messages=USER) as s:
        final = s.get_final_message()
    assert (final.stop_reason, final.stop_sequence, final.usage.output_tokens) == ("stop_sequence", "END", 6)
    renderer = messages.StreamRenderer(ANSWER, parse("messages", REQUESTS["messages"]))
    assert renderer.start() + renderer.event(UsageReport(Usage(1, 0))) == b""  # message_start waits for content
    assert [e["type"] for e in events_of(renderer.error(ApiError(codes.UPSTREAM_ERROR, "x")))] == [
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
        orjson.dumps({"error": ApiError(codes.UPSTREAM_ERROR, "boom").body()["error"]}).decode(),
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
    assert (event, orjson.loads(data)) == ("error", ApiError(codes.UPSTREAM_ERROR, "boom").body())
    client = anthropic_client(body)
    with (
        pytest.raises(anthropic.APIError, match="boom"),
        client.messages.stream(model="m", max_tokens=8, messages=USER) as s,
    ):
        s.get_final_message()
