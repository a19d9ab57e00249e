"""Anthropic Messages: the request, the message answer, the event stream and its errors."""

from __future__ import annotations

from typing import Any

import orjson

from generated.models import AnthropicMessage, MessagesRequest
from handlers.errors import ApiError
from handlers.inference.canonical import (
    Answer,
    Block,
    Event,
    FinishReason,
    Message,
    Request,
    Result,
    Role,
    Text,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolCallStart,
    ToolChoice,
    ToolResult,
    Usage,
    UsageReport,
)
from handlers.inference.formats.common import (
    TEXT_PARTS,
    ChoiceTable,
    PartReader,
    StreamState,
    blocks,
    conversation,
    count,
    effort,
    function_tool,
    join_system,
    opt_float,
    opt_int,
    opt_str_list,
    other_tool,
    required_str,
    split_extra,
    sse,
    text_of,
    tool_choice,
    tool_list,
    whole,
)

STOP_REASONS = {
    FinishReason.STOP: "end_turn",
    FinishReason.STOP_SEQUENCE: "stop_sequence",
    FinishReason.LENGTH: "max_tokens",
    FinishReason.TOOL_CALLS: "tool_use",
    FinishReason.CONTENT_FILTER: "refusal",
    FinishReason.UNKNOWN: "end_turn",
}

_ROLES: dict[str, Role] = {"user": "user", "assistant": "assistant"}
_READ_EXTRA = ("top_p", "stop_sequences", "tools", "tool_choice")
_CHOICES: ChoiceTable = ({}, {"auto": "auto", "none": "none", "any": "required", "tool": "tool"})  # objects only


# --- request -------------------------------------------------------------------------------------------------------


def parse(body: MessagesRequest) -> Request:
    read, extra = split_extra(body, _READ_EXTRA)
    messages = _conversation(body.messages)
    thinking_effort, budget = _thinking(body.thinking)
    return Request(
        format="messages",
        messages=messages,
        system=join_system([_system(body.system)]),
        model=body.model,
        effort=thinking_effort,
        thinking_budget=budget,
        max_tokens=whole(body.max_tokens, "max_tokens"),
        temperature=body.temperature,
        top_p=opt_float(read["top_p"]),
        stop=opt_str_list(read["stop_sequences"]),
        stream=bool(body.stream),
        tools=tool_list(read["tools"], "messages", _tool),
        tool_choice=_tool_choice(read["tool_choice"]),
        extra=extra,
    )


def _tool_choice(raw: Any) -> ToolChoice | None:
    """Anthropic says "at most one call" inside tool_choice; the OpenAI formats say it in parallel_tool_calls."""
    disable = raw.get("disable_parallel_tool_use") if isinstance(raw, dict) else None
    return tool_choice(raw, "messages", _CHOICES, ("name",), None if not isinstance(disable, bool) else not disable)


def _system(value: str | list[Any] | None) -> str | None:
    """A string, or {type:text} blocks joined like separate system messages are; other block types are left out."""
    if value is None or isinstance(value, str):
        return value
    return join_system(b.text for b in blocks(value, "system", TEXT_PARTS, "messages") if isinstance(b, Text))


def _thinking(value: str | dict[str, Any] | None) -> tuple[str | None, int | None]:
    """(effort, budget): a plain effort word, {effort: word}, or Anthropic's {type: enabled, budget_tokens: N}."""
    if not isinstance(value, dict):
        return effort(value), None
    if "effort" in value:
        return effort(value["effort"]), None
    return None, (opt_int(value.get("budget_tokens")) if value.get("type") == "enabled" else None)


def _conversation(messages: list[AnthropicMessage]) -> list[Message]:
    """The turns; the spec admits only user and assistant roles, as Anthropic does."""
    out: list[Message] = []
    for i, message in enumerate(messages):
        out.extend(_turn(_ROLES[message.role], blocks(message.content, f"messages.{i}.content", _PARTS, "messages")))
    return conversation(out, "messages")


def _turn(role: Role, content: list[Block]) -> list[Message]:
    """Canonical keeps each tool result in its own "tool" message; they come first, as Anthropic requires."""
    results = [Message("tool", [block]) for block in content if isinstance(block, ToolResult)]
    rest = [block for block in content if not isinstance(block, ToolResult)]
    if rest or not results:
        results.append(Message(role, rest))
    return results


def _tool_use(part: dict[str, Any], where: str) -> list[Block]:
    call_id = part.get("id")
    name = required_str(part, "name", where)
    return [ToolCall(call_id if isinstance(call_id, str) else "", name, orjson.dumps(part.get("input") or {}).decode())]


def _tool_result(part: dict[str, Any], where: str) -> list[Block]:
    call_id = required_str(part, "tool_use_id", where)
    return [ToolResult(call_id, text_of(part.get("content"), f"{where}.content", "messages"))]


_PARTS: dict[str, PartReader] = {**TEXT_PARTS, "tool_use": _tool_use, "tool_result": _tool_result}


def _tool(raw: dict[str, Any], where: str) -> Tool:
    # Client tools have no type (or "custom"); typed ones (web_search_20250305, bash_...) are Anthropic's own.
    if raw.get("type", "custom") != "custom":
        return other_tool(raw, "messages")
    return function_tool(raw, where, raw, "messages", "input_schema")


# --- answer --------------------------------------------------------------------------------------------------------


def render(result: Result, answer: Answer, request: Request) -> dict[str, Any]:
    content = [block for b in result.content if (block := _block(b)) is not None] or [_text("")]
    return {
        **_head(answer),
        "content": content,
        **_stop(result.finish_reason, result.stop_sequence),
        "usage": usage(result.usage),
    }


def _stop(reason: FinishReason, sequence: str | None) -> dict[str, Any]:
    """stop_reason, and stop_sequence: the sequence matched (null when the upstream did not say which)."""
    return {
        "stop_reason": STOP_REASONS[reason],
        "stop_sequence": sequence if reason is FinishReason.STOP_SEQUENCE else None,
    }


def _head(answer: Answer) -> dict[str, Any]:
    return {"id": f"msg_{answer.decision_id}", "type": "message", "role": "assistant", "model": answer.model}


def _block(block: Block) -> dict[str, Any] | None:
    if isinstance(block, Text):
        return _text(block.text) if block.text else None
    if isinstance(block, ToolCall):
        return _tool_use_block(block.id, block.name, _input(block.arguments))
    return None


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _tool_use_block(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def _input(arguments: str) -> dict[str, Any]:
    """tool_use input must be an object: arguments that do not parse as one are {}."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def usage(value: Usage) -> dict[str, Any]:
    """Anthropic counts cache reads apart from input_tokens; canonical input counts every prompt token."""
    cached = value.cached_input_tokens
    out = {
        "input_tokens": max(0, count(value.input_tokens) - count(cached)),
        "output_tokens": count(value.output_tokens),
    }
    if cached is not None:
        out["cache_read_input_tokens"] = cached
    return out


# --- stream --------------------------------------------------------------------------------------------------------


class StreamRenderer(StreamState):
    """message_start, content blocks one after another (start, deltas, stop), message_delta, message_stop.

    message_start waits for the first event other than usage, so that it carries the input tokens of an upstream
    that reports them before its content (Anthropic does); the final counts come with message_delta.
    """

    def __init__(self, answer: Answer, request: Request) -> None:
        super().__init__()
        self._answer = answer
        self._started = False
        self._blocks = 0  # content blocks started so far
        self._open: int | None = None  # the index of the block open now
        self._text_open = False
        self._calls: dict[int, int] = {}  # canonical tool-call index -> content block index

    def start(self) -> bytes:
        return b""

    def event(self, ev: Event) -> bytes:
        return (b"" if isinstance(ev, UsageReport) else self._message_start()) + super().event(ev)

    def _message_start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        message = {
            **_head(self._answer),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage(self.usage),
        }
        return _frame("message_start", {"message": message})

    def finish(self) -> bytes:
        # A message with no block at all gets an empty text block: clients read content[0].
        out = self._message_start()
        out += self._close() if self._blocks else self._begin(_text("")) + self._close()
        delta = _stop(self.reason, self.stop_sequence)
        return out + _frame("message_delta", {"delta": delta, "usage": usage(self.usage)}) + _frame("message_stop", {})

    def error(self, err: ApiError) -> bytes:
        return self._message_start() + sse(err.body(), "error")

    def on_text(self, ev: TextDelta) -> bytes:
        if not ev.text:
            return b""
        out = b"" if self._text_open else self._begin(_text(""))
        self._text_open = True
        return out + _frame(
            "content_block_delta", {"index": self._open, "delta": {"type": "text_delta", "text": ev.text}}
        )

    def on_call_start(self, ev: ToolCallStart) -> bytes:
        out = self._begin(_tool_use_block(ev.id, ev.name, {}))
        self._calls[ev.index] = self._blocks - 1
        return out

    def on_call_delta(self, ev: ToolCallDelta) -> bytes:
        index = self._calls.get(ev.index)
        if index is None or not ev.arguments:
            return b""
        return _frame(
            "content_block_delta", {"index": index, "delta": {"type": "input_json_delta", "partial_json": ev.arguments}}
        )

    def _begin(self, block: dict[str, Any]) -> bytes:
        out = self._close()
        self._open = self._blocks
        self._blocks += 1
        return out + _frame("content_block_start", {"index": self._open, "content_block": block})

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        index, self._open, self._text_open = self._open, None, False
        return _frame("content_block_stop", {"index": index})


def _frame(kind: str, data: dict[str, Any]) -> bytes:
    return sse({"type": kind, **data}, kind)
