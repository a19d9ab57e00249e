"""SDK conformance, tool calls: an upstream's tool call as the caller's, and the caller's tools, tool choice,
parallel-call setting and tool results in the upstream's format (fixtures and drivers in tests/sdk_support.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import Live
from tests.fake_upstream import FakeUpstream
from tests.sdk_support import (
    MAX_TOKENS,
    MODEL,
    PROMPT,
    SYSTEM,
    TOOLS,
    USAGE,
    WEATHER_DESC,
    WEATHER_SCHEMA,
    Clients,
    check_answer,
    check_received,
    expected_usage,
    fixture_clients,  # noqa: F401  (a fixture)
    fixture_fake,  # noqa: F401  (a fixture)
    fixture_fresh,  # noqa: F401  (a fixture)
    fixture_live,  # noqa: F401  (a fixture)
    matrix,
    request_args,
    run,
)


@pytest.mark.parametrize(("fmt", "kind", "mode"), matrix(with_modes=True))
def test_upstream_tool_call_arrives_as_the_callers_tool_call(clients: Clients, fake: FakeUpstream, live: Live,
                                                              fmt: str, kind: str, mode: str) -> None:
    paris, tokyo = {"city": "Paris", "unit": "celsius"}, {"city": "Tokyo"}
    fake.script(text="Let me check.", usage=USAGE, tool_calls=[
        {"id": "call_w1", "name": "get_weather", "arguments": json.dumps(paris)},
        {"id": "call_w2", "name": "get_weather", "arguments": json.dumps(tokyo)},
    ])
    o = run(clients, fmt, mode, request_args(fmt, MODEL[kind], tools=TOOLS[fmt]))
    check_answer(o, fmt, kind, text="Let me check.")
    assert o.calls == [("call_w1", "get_weather", paris), ("call_w2", "get_weather", tokyo)]
    assert o.stop == {"chat": "tool_calls", "messages": "tool_use", "responses": "completed"}[fmt]
    assert o.usage == expected_usage(fmt, kind)
    body = check_received(fake, live, kind, stream=mode != "create")
    if kind == "openai":
        assert body["tools"] == [{"type": "function", "function": {"name": "get_weather", "description": WEATHER_DESC,
                                                                   "parameters": WEATHER_SCHEMA}}]
    else:
        assert body["tools"] == [{"name": "get_weather", "description": WEATHER_DESC, "input_schema": WEATHER_SCHEMA}]


@pytest.mark.parametrize("mode", ["create", "stream"])
@pytest.mark.parametrize(("fmt", "kind"), matrix())
def test_a_tool_call_without_text(clients: Clients, fake: FakeUpstream, fmt: str, kind: str, mode: str) -> None:
    fake.script(text="", usage=USAGE, tool_calls=[{"id": "call_x", "name": "get_weather", "arguments": "{}"}])
    o = run(clients, fmt, mode, request_args(fmt, MODEL[kind], tools=TOOLS[fmt]))
    check_answer(o, fmt, kind, text="")
    assert o.calls == [("call_x", "get_weather", {})]
    assert o.stop == {"chat": "tool_calls", "messages": "tool_use", "responses": "completed"}[fmt]


TOOL_CHOICES = [  # caller format, upstream kind, what the caller sends, what the upstream must receive
    pytest.param("chat", "openai", "required", "required", id="chat-openai-required"),
    pytest.param("messages", "anthropic", {"type": "tool", "name": "get_weather"},
                 {"type": "tool", "name": "get_weather"}, id="messages-anthropic-named"),
    pytest.param("chat", "anthropic", {"type": "function", "function": {"name": "get_weather"}},
                 {"type": "tool", "name": "get_weather"}, id="chat-anthropic-named"),
    pytest.param("chat", "anthropic", "required", {"type": "any"}, id="chat-anthropic-required"),
    pytest.param("messages", "openai", {"type": "tool", "name": "get_weather"},
                 {"type": "function", "function": {"name": "get_weather"}}, id="messages-openai-named"),
    pytest.param("messages", "openai", {"type": "any"}, "required", id="messages-openai-any"),
    pytest.param("responses", "openai", {"type": "function", "name": "get_weather"},
                 {"type": "function", "function": {"name": "get_weather"}}, id="responses-openai-named"),
    pytest.param("responses", "openai", "required", "required", id="responses-openai-required"),
    pytest.param("responses", "anthropic", "required", {"type": "any"}, id="responses-anthropic-required"),
    pytest.param("responses", "anthropic", {"type": "function", "name": "get_weather"},
                 {"type": "tool", "name": "get_weather"}, id="responses-anthropic-named"),
    pytest.param("chat", "anthropic", "none", {"type": "none"}, id="chat-anthropic-none"),
    pytest.param("messages", "openai", {"type": "auto"}, "auto", id="messages-openai-auto"),
]


@pytest.mark.parametrize(("fmt", "kind", "choice", "upstream_choice"), TOOL_CHOICES)
def test_tool_choice_reaches_the_upstream_in_its_format(clients: Clients, fake: FakeUpstream, fmt: str, kind: str,
                                                        choice: Any, upstream_choice: Any) -> None:
    fake.script(text="", tool_calls=[{"id": "call_x", "name": "get_weather", "arguments": '{"city": "Paris"}'}])
    run(clients, fmt, "create", request_args(fmt, MODEL[kind], tools=TOOLS[fmt], tool_choice=choice))
    assert fake.requests[0].body.get("tool_choice") == upstream_choice


PARALLEL = [  # caller format, upstream kind, what the caller sends, what the upstream must receive
    pytest.param("messages", "openai", {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
                 {"tool_choice": "auto", "parallel_tool_calls": False}, id="messages-openai"),
    pytest.param("chat", "anthropic", {"parallel_tool_calls": False},
                 {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}, id="chat-anthropic"),
    pytest.param("responses", "anthropic", {"tool_choice": "required", "parallel_tool_calls": False},
                 {"tool_choice": {"type": "any", "disable_parallel_tool_use": True}}, id="responses-anthropic"),
]


@pytest.mark.parametrize(("fmt", "kind", "sent", "received"), PARALLEL)
def test_one_call_at_most_reaches_the_upstream_in_its_format(clients: Clients, fake: FakeUpstream, fmt: str,
                                                             kind: str, sent: Any, received: Any) -> None:
    run(clients, fmt, "create", request_args(fmt, MODEL[kind], tools=TOOLS[fmt], **sent))
    body = fake.requests[0].body
    assert {key: body.get(key) for key in received} == received
    assert "parallel_tool_calls" not in body or kind == "openai"


def tool_round_trip(fmt: str, model: str) -> dict[str, Any]:
    """A second turn: the assistant called get_weather(city=Paris) as call_7 and the caller sends its result."""
    call = {"city": "Paris"}
    if fmt == "chat":
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": PROMPT},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_7", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(call)}}
            ]},
            {"role": "tool", "tool_call_id": "call_7", "content": "18C and sunny"},
        ]
        return {"model": model, "messages": messages, "tools": TOOLS[fmt], "max_tokens": MAX_TOKENS}
    if fmt == "responses":
        items = [
            {"role": "user", "content": PROMPT},
            {"type": "function_call", "call_id": "call_7", "name": "get_weather", "arguments": json.dumps(call)},
            {"type": "function_call_output", "call_id": "call_7", "output": "18C and sunny"},
        ]
        return {"model": model, "instructions": SYSTEM, "input": items, "tools": TOOLS[fmt],
                "max_output_tokens": MAX_TOKENS}
    messages = [
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call_7", "name": "get_weather", "input": call}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_7", "content": "18C and sunny"}]},
    ]
    return {"model": model, "system": SYSTEM, "messages": messages, "tools": TOOLS[fmt], "max_tokens": MAX_TOKENS}


@pytest.mark.parametrize(("fmt", "kind"), matrix())
def test_tool_results_reach_the_upstream_in_its_format(clients: Clients, fake: FakeUpstream, fmt: str,
                                                       kind: str) -> None:
    fake.script(text="It is 18C and sunny in Paris.")
    o = run(clients, fmt, "create", tool_round_trip(fmt, MODEL[kind]))
    assert o.text == "It is 18C and sunny in Paris."
    body = fake.requests[0].body
    if kind == "openai":
        assert body["messages"][0] == {"role": "system", "content": SYSTEM}
        call, result = body["messages"][-2:]
        assert call["role"] == "assistant" and not call.get("content")
        assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in call["tool_calls"]] \
            == [("call_7", "get_weather", {"city": "Paris"})]
        assert result == {"role": "tool", "tool_call_id": "call_7", "content": "18C and sunny"}
    else:
        assert body["system"] == SYSTEM
        # A Messages caller's body passes through as written (its string content stays a string).
        prompt = PROMPT if fmt == "messages" else [{"type": "text", "text": PROMPT}]
        assert body["messages"] == [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "call_7", "name": "get_weather",
                                               "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_7", "content": "18C and sunny"}]},
        ]
