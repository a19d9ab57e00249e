"""The Responses format's stream for callers: reasoning items and their events, read back by the SDK."""

from __future__ import annotations

from typing import Any

import openai.types.responses as openai_responses
from pydantic import TypeAdapter

from handlers.inference.canonical import (
    Event,
    Finish,
    FinishReason,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStart,
    Usage,
    UsageReport,
    fold,
)
from tests.formats_support import render
from tests.test_formats_streams import events_of, openai_client, stream

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
