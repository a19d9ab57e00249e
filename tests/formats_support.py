"""Shared by the wire tests (tests/test_wire_*.py): parse a body as the generated route does, render an answer, and the
plain requests and results each format is checked with."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from generated import models as g
from handlers.edge.glue import validation_error
from handlers.errors import ApiError
from handlers.inference.canonical import Answer, FinishReason, Request, Result, Text, ToolCall, Usage
from handlers.inference.formats import chat, messages, responses

ANSWER = Answer(decision_id="dec123", model="pub/model", created=1_700_000_000)
MODULES = {"chat": chat, "messages": messages, "responses": responses}
BODIES = {"chat": g.ChatCompletionRequest, "messages": g.MessagesRequest, "responses": g.ResponsesRequest}
USER = [{"role": "user", "content": "hi"}]
REQUESTS = {
    "chat": {"messages": USER, "stream": True, "stream_options": {"include_usage": True}},
    "messages": {"messages": USER, "stream": True, "max_tokens": 64},
    "responses": {"input": "hi", "stream": True},
}
CALL = ToolCall("call_1", "get_weather", '{"city":"Paris"}')
RESULTS = {
    "text": Result([Text("Hello.")], FinishReason.STOP, Usage(10, 5, 2)),
    "tools": Result([CALL], FinishReason.TOOL_CALLS, Usage(10, 5)),
    "both": Result(
        [Text("Checking."), CALL, ToolCall("call_2", "f", "not json")], FinishReason.TOOL_CALLS, Usage(3, 4)
    ),
    "length": Result([Text("Cut")], FinishReason.LENGTH, Usage()),
    "filter": Result([], FinishReason.CONTENT_FILTER, Usage(1, 0)),
    "unknown": Result([], FinishReason.UNKNOWN, Usage()),
}


def parse(fmt: str, body: dict[str, Any]) -> Request:
    """Validate as the generated route does (schema errors become ApiError 400), then parse."""
    try:
        model = BODIES[fmt].model_validate(body)
    except pydantic.ValidationError as exc:
        raise validation_error(exc) from None
    return MODULES[fmt].parse(model)


def render(fmt: str, result: Result, request: Request | None = None) -> dict[str, Any]:
    """A whole answer as `fmt` renders it, for `request` or a plain request of that format."""
    return MODULES[fmt].render(result, ANSWER, request or parse(fmt, REQUESTS[fmt]))


def bad(fmt: str, body: dict[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse(fmt, body)
    assert caught.value.status == 400
    return caught.value


def messages_usage(input_tokens: int, output_tokens: int, read: int = 0, write: int = 0, **native: Any
                   ) -> dict[str, Any]:
    """A Messages usage object as the gateway renders it: every field Anthropic's Usage has, cache counts as numbers,
    the upstream's own fields (server_tool_use ...) null unless it reported them."""
    nulls = dict.fromkeys(("cache_creation", "server_tool_use", "service_tier", "inference_geo", "speed",
                           "output_tokens_details", "fallback_credit", "iterations"))
    return {"input_tokens": input_tokens, "cache_creation_input_tokens": write, "cache_read_input_tokens": read,
            "output_tokens": output_tokens, **nulls, **native}


def messages_delta_usage(input_tokens: int, output_tokens: int, read: int = 0, write: int = 0) -> dict[str, Any]:
    """message_delta's usage: the counts, and the fields of Anthropic's MessageDeltaUsage the upstream did not say."""
    return {"input_tokens": input_tokens, "cache_creation_input_tokens": write, "cache_read_input_tokens": read,
            "output_tokens": output_tokens, "server_tool_use": None, "output_tokens_details": None,
            "fallback_credit": None, "iterations": None}
