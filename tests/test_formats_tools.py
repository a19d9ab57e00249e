"""Tools across formats (handlers/inference/formats/tools.py): what an upstream of another format is offered of a
caller's function, custom, namespace and hosted tools, and how the calls come back as what the caller offered."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from handlers.errors import ApiError
from handlers.inference.canonical import (
    Event,
    Finish,
    FinishReason,
    Message,
    Request,
    Result,
    ToolCall,
    ToolCallDelta,
    ToolCallStart,
    ToolResult,
    Usage,
    fold,
)
from handlers.inference.formats import chat, messages, responses
from handlers.inference.formats.base import Traits, UpstreamOptions
from handlers.inference.formats.tools import Crossing
from tests.formats_support import parse

PATCH = "*** Begin Patch\n*** Add File: out.txt\n+hello\n*** End Patch\n"
GRAMMAR = {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch hunk+ end_patch"}
# What Codex offers a model it knows (its shell function, apply_patch, a namespace of agent tools, web search).
CODEX_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": "exec_command", "description": "Run a command.", "strict": False,
     "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}},
    {"type": "custom", "name": "apply_patch", "description": "Edit files.", "format": GRAMMAR},
    {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.", "tools": [
        {"type": "function", "name": "spawn_agent", "parameters": {"type": "object", "properties": {}}},
        {"type": "custom", "name": "send_note"},
    ]},
    {"type": "web_search", "external_web_access": True},
]  # fmt: skip


def codex(**fields: Any) -> Request:
    return parse("responses", {"input": "Make out.txt", "tools": CODEX_TOOLS, **fields})


def test_codex_tools_to_anthropic_are_functions_and_its_web_search() -> None:
    body = messages.upstream_body(codex(), "claude", UpstreamOptions(), Traits())
    tools = {tool["name"]: tool for tool in body["tools"]}
    assert list(tools) == ["exec_command", "apply_patch", "multi_agent_v1__spawn_agent", "multi_agent_v1__send_note",
                           "web_search"]
    patch = tools["apply_patch"]
    assert patch["input_schema"]["properties"] == {"input": {"type": "string"}}
    assert "Edit files." in patch["description"] and GRAMMAR["definition"] in patch["description"]
    assert tools["web_search"] == {"type": "web_search_20250305", "name": "web_search"}  # Anthropic's own


def test_codex_tools_to_chat_leave_web_search_out_and_say_so() -> None:
    request = codex()
    body = chat.upstream_body(request, "gpt", UpstreamOptions(), Traits())
    assert [t["function"]["name"] for t in body["tools"]] == [
        "exec_command", "apply_patch", "multi_agent_v1__spawn_agent", "multi_agent_v1__send_note"]
    assert Crossing.of(request, "chat", "openai").omitted == ["web_search"]


def test_a_hosted_tool_is_refused_by_name_when_the_model_says_so() -> None:
    with pytest.raises(ApiError) as refused:
        chat.upstream_body(codex(), "gpt", UpstreamOptions(), Traits(refuse_hosted=True))
    assert (refused.value.code, refused.value.param) == ("unsupported_parameter", "tools.3")
    assert "web_search" in refused.value.message


def test_a_custom_call_comes_back_as_the_custom_tool_with_its_input() -> None:
    crossing = Crossing.of(codex(), "messages", "anthropic")
    made = Result([ToolCall("t1", "apply_patch", orjson.dumps({"input": PATCH}).decode()),
                   ToolCall("t2", "multi_agent_v1__spawn_agent", "{}"), ToolCall("t3", "exec_command", '{"cmd":"ls"}')],
                  FinishReason.TOOL_CALLS, Usage())  # fmt: skip
    assert crossing.result(made).content == [
        ToolCall("t1", "apply_patch", PATCH, custom=True),
        ToolCall("t2", "spawn_agent", "{}", namespace="multi_agent_v1"),
        ToolCall("t3", "exec_command", '{"cmd":"ls"}'),
    ]


async def _stream(events: list[Event]) -> AsyncIterator[Event]:
    for ev in events:
        yield ev


async def test_a_streamed_custom_call_comes_back_whole_as_its_input() -> None:
    crossing = Crossing.of(codex(), "chat", "openai")
    pieces = orjson.dumps({"input": PATCH}).decode()
    sent: list[Event] = [
        ToolCallStart(0, "c0", "apply_patch"),
        *(ToolCallDelta(0, pieces[i:i + 7]) for i in range(0, len(pieces), 7)),
        ToolCallStart(1, "c1", "multi_agent_v1__spawn_agent"), ToolCallDelta(1, "{}"),
        Finish(FinishReason.TOOL_CALLS),
    ]  # fmt: skip
    got = [ev async for ev in crossing.events(_stream(sent))]
    assert got[:3] == [ToolCallStart(0, "c0", "apply_patch", custom=True), ToolCallDelta(0, PATCH),  # whole, in one
                       ToolCallStart(1, "c1", "spawn_agent", namespace="multi_agent_v1")]
    assert fold(got).content == [ToolCall("c0", "apply_patch", PATCH, custom=True),
                                 ToolCall("c1", "spawn_agent", "{}", namespace="multi_agent_v1")]


def test_codex_history_with_custom_calls_goes_to_anthropic_as_tool_use() -> None:
    """Codex sends the whole conversation every turn, its custom calls and their outputs included."""
    request = codex(input=[
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Make out.txt"}]},
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "Success."},
        {"type": "function_call", "call_id": "c2", "name": "spawn_agent", "namespace": "multi_agent_v1",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": "spawned"},
    ])  # fmt: skip
    body = messages.upstream_body(request, "claude", UpstreamOptions(), Traits())
    uses = [b for m in body["messages"] for b in m["content"] if b["type"] == "tool_use"]
    assert [(u["name"], u["input"]) for u in uses] == [("apply_patch", {"input": PATCH}),
                                                       ("multi_agent_v1__spawn_agent", {})]
    results = [b for m in body["messages"] for b in m["content"] if b["type"] == "tool_result"]
    assert [(r["tool_use_id"], r["content"]) for r in results] == [("c1", "Success."), ("c2", "spawned")]


def test_a_custom_call_and_its_output_go_to_responses_as_custom_items() -> None:
    """A chat caller's custom tool reaches a Responses upstream as a custom tool, and its call history as one."""
    request = parse("chat", {"messages": [{"role": "user", "content": "x"}],
                             "tools": [{"type": "custom", "custom": {"name": "apply_patch", "format": GRAMMAR}}]})
    request.messages += [Message("assistant", [ToolCall("c1", "apply_patch", PATCH, custom=True)]),
                         Message("tool", [ToolResult("c1", "ok")])]
    body = responses.upstream_body(request, "gpt", UpstreamOptions(), Traits())
    assert body["tools"] == [{"type": "custom", "name": "apply_patch", "format": {**GRAMMAR}}]
    assert body["input"][1:] == [{"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": PATCH},
                                 {"type": "custom_tool_call_output", "call_id": "c1", "output": "ok"}]


def test_a_system_turn_goes_to_chat_and_responses_at_its_place() -> None:
    request = parse("messages", {"system": "S", "messages": [
        {"role": "user", "content": "a"}, {"role": "system", "content": "env"}, {"role": "user", "content": "b"}]})
    sent = chat.upstream_body(request, "gpt", UpstreamOptions(), Traits())
    assert [(m["role"], m["content"]) for m in sent["messages"]] == [("system", "S"), ("user", "a"),
                                                                      ("system", "env"), ("user", "b")]
    sent = responses.upstream_body(request, "gpt", UpstreamOptions(), Traits())
    assert [(i["role"], i["content"]) for i in sent["input"]] == [
        ("user", [{"type": "input_text", "text": "a"}]), ("developer", [{"type": "input_text", "text": "env"}]),
        ("user", [{"type": "input_text", "text": "b"}])]
    sent = messages.upstream_body(request, "claude", UpstreamOptions(), Traits())
    assert [m["role"] for m in sent["messages"]] == ["user", "system", "user"]  # Anthropic takes it as it came
