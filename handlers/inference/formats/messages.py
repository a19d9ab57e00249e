"""Anthropic Messages, both ways: as callers send it (request in, message or event stream out) and as an upstream
speaks it (request out, message or event stream in)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import orjson

from generated.models import AnthropicMessage, MessagesRequest
from handlers.errors import ApiError
from handlers.inference.canonical import (
    Answer,
    Block,
    Event,
    Finish,
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
    Unknown,
    Usage,
    UsageReport,
)
from handlers.inference.formats.base import Traits, UpstreamFault, UpstreamOptions
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
    json_object,
    merge_extra,
    opt_float,
    opt_int,
    opt_str_list,
    other_tool,
    present,
    required_str,
    split_extra,
    sse,
    text_of,
    tool_choice,
    tool_input,
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

_STOP_READ = {word: reason for reason, word in STOP_REASONS.items() if reason is not FinishReason.UNKNOWN}
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
        return _tool_use_block(block.id, block.name, tool_input(block.arguments))
    return None


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _tool_use_block(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def _read_usage(raw: dict[str, Any]) -> Usage:
    """Canonical input counts every prompt token, as OpenAI's prompt_tokens does; Anthropic counts cache reads
    and cache writes apart from input_tokens."""
    cached = raw.get("cache_read_input_tokens")
    written = raw.get("cache_creation_input_tokens")
    given = raw.get("input_tokens")
    total = None if given is None else given + (cached or 0) + (written or 0)
    return Usage(input_tokens=total, output_tokens=raw.get("output_tokens"), cached_input_tokens=cached,
                 cache_write_tokens=written)


def usage(value: Usage) -> dict[str, Any]:
    """Anthropic counts cache reads and writes apart from input_tokens; canonical input counts every prompt token."""
    cached, written = value.cached_input_tokens, value.cache_write_tokens
    out = {
        "input_tokens": max(0, count(value.input_tokens) - count(cached) - count(written)),
        "output_tokens": count(value.output_tokens),
    }
    if cached is not None:
        out["cache_read_input_tokens"] = cached
    if written is not None:
        out["cache_creation_input_tokens"] = written
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


# --- as an upstream's format ----------------------------------------------------------------------------------------

STREAM_FIELDS: dict[str, Any] = {"stream": True}
STREAM_END = "message_stop"
# A canonical tool choice as Anthropic's tool_choice type.
_CHOICE_TYPES = {mode: word for word, mode in _CHOICES[1].items()}
_EMPTY_SCHEMA = {"type": "object", "properties": {}}


def upstream_body(request: Request, model: str, options: UpstreamOptions, traits: Traits) -> dict[str, Any]:
    """The Messages body for `request` (without the streaming flag)."""
    max_tokens = request.max_tokens if request.max_tokens is not None else options.default_max_tokens
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": _upstream_messages(request.messages)}
    body.update(
        present(
            system=request.system or None,
            temperature=request.temperature,
            top_p=request.top_p,
            stop_sequences=request.stop,
        )
    )
    tools = [_upstream_tool(t) for t in request.tools or () if t.format == "messages" or t.portable]
    if tools:
        body["tools"] = tools
    choice = request.tool_choice
    if request.format == "messages":
        body.update(present(tool_choice=choice.raw if choice else None))
        merge_extra(body, request.extra)
    elif tools and choice and choice.portable:  # Anthropic refuses a tool choice without tools
        body["tool_choice"] = _upstream_tool_choice(choice)
    return body


def upstream_result(payload: dict[str, Any]) -> Result:
    if payload.get("type") == "error":
        raise UpstreamFault(payload=payload)
    if not isinstance(payload.get("content"), list):
        raise UpstreamFault(what="answered without content")
    return _result(payload)


def _upstream_messages(conversation: list[Message]) -> list[dict[str, Any]]:
    """Messages API messages: tool results go in user turns, and consecutive same-role turns merge (it alternates)."""
    out: list[dict[str, Any]] = []
    for message in conversation:
        role = "assistant" if message.role == "assistant" else "user"
        blocks = [converted for block in message.content if (converted := _upstream_block(block)) is not None]
        if not blocks:
            continue  # an empty content list is rejected
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _text_block(block: Text) -> dict[str, Any] | None:
    return {"type": "text", "text": block.text} if block.text else None  # empty text blocks are rejected


def _upstream_tool_use(block: ToolCall) -> dict[str, Any]:
    return _tool_use_block(block.id, block.name, tool_input(block.arguments))


def _upstream_tool_result(block: ToolResult) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": block.tool_call_id, "content": block.content}


def _unknown(block: Unknown) -> dict[str, Any] | None:
    return block.data if block.format == "messages" else None


_BLOCKS: dict[type, Callable[[Any], dict[str, Any] | None]] = {
    Text: _text_block,
    ToolCall: _upstream_tool_use,
    ToolResult: _upstream_tool_result,
    Unknown: _unknown,
}


def _upstream_block(block: Block) -> dict[str, Any] | None:
    return _BLOCKS[type(block)](block)


def _upstream_tool(tool: Tool) -> dict[str, Any]:
    if tool.format == "messages":
        return tool.raw
    return {
        "name": tool.name,
        **present(description=tool.description),
        "input_schema": tool.parameters or _EMPTY_SCHEMA,
    }


def _upstream_tool_choice(choice: ToolChoice) -> dict[str, Any]:
    """Another format's tool choice; "at most one call" (parallel_tool_calls false) goes inside it."""
    out = {"type": _CHOICE_TYPES[choice.mode or "auto"], **present(name=choice.name)}
    if choice.parallel is False and choice.mode != "none":
        out["disable_parallel_tool_use"] = True
    return out


def _result(answer: dict[str, Any]) -> Result:
    content: list[Block] = []
    for block in answer["content"]:
        if block.get("type") == "text":
            content.append(Text(block.get("text") or ""))
        elif block.get("type") == "tool_use":
            arguments = orjson.dumps(block.get("input") or {}).decode()
            content.append(ToolCall(block.get("id") or "", block.get("name") or "", arguments))
    return Result(
        content=content,
        finish_reason=_STOP_READ.get(answer.get("stop_reason"), FinishReason.UNKNOWN),
        usage=_read_usage(answer.get("usage") or {}),
        upstream_model=answer.get("model"),
        stop_sequence=_stop_sequence(answer),
    )


def _stop_sequence(fields: dict[str, Any]) -> str | None:
    sequence = fields.get("stop_sequence")
    return sequence if isinstance(sequence, str) else None


class UpstreamReader:
    """Turns Messages stream events into canonical events, until message_stop. Usage arrives in two halves:
    message_start's (the input counts) is reported with the first content, and the whole at the end."""

    def __init__(self) -> None:
        self.done = False
        self._tools: dict[int, int] = {}  # content block index -> tool call index (tool calls count from 0)
        self._with_arguments: set[int] = set()
        self._usage: dict[str, Any] = {}
        self._early: Usage | None = None  # message_start's usage, until content comes

    def read(self, event: str, data: str) -> list[Event]:
        payload = json_object(data)
        kind = payload.get("type") or event
        if kind == "error":
            raise UpstreamFault(payload=payload)
        self.done = kind == "message_stop"
        handler = self._HANDLERS.get(kind)
        events = handler(self, payload) if handler else []  # ping, and event types added later
        if events and self._early is not None:
            # Not at message_start itself: a stream that fails before any content has not started, and falls back.
            events.insert(0, UsageReport(self._early))
            self._early = None
        return events

    def _message_start(self, payload: dict[str, Any]) -> list[Event]:
        self._add_usage((payload.get("message") or {}).get("usage"))
        self._early = _read_usage(self._usage) if "input_tokens" in self._usage else None
        return []

    def _block_start(self, payload: dict[str, Any]) -> list[Event]:
        block = payload.get("content_block") or {}
        if block.get("type") == "tool_use":
            index = self._tools[payload.get("index", 0)] = len(self._tools)
            return [ToolCallStart(index, block.get("id") or "", block.get("name") or "")]
        if block.get("type") == "text" and block.get("text"):
            return [TextDelta(block["text"])]
        return []

    def _block_delta(self, payload: dict[str, Any]) -> list[Event]:
        delta = payload.get("delta") or {}
        if delta.get("type") == "text_delta" and delta.get("text"):
            return [TextDelta(delta["text"])]
        index = self._tools.get(payload.get("index", 0))
        if delta.get("type") == "input_json_delta" and index is not None and delta.get("partial_json"):
            self._with_arguments.add(index)
            return [ToolCallDelta(index, delta["partial_json"])]
        return []

    def _block_stop(self, payload: dict[str, Any]) -> list[Event]:
        # A call without arguments streams no JSON at all; callers of the chat format expect "{}".
        index = self._tools.get(payload.get("index", 0))
        if index is not None and index not in self._with_arguments:
            return [ToolCallDelta(index, "{}")]
        return []

    def _message_delta(self, payload: dict[str, Any]) -> list[Event]:
        self._add_usage(payload.get("usage"))
        delta = payload.get("delta") or {}
        reason = delta.get("stop_reason")
        return [Finish(_STOP_READ.get(reason, FinishReason.UNKNOWN), _stop_sequence(delta))] if reason else []

    def _message_stop(self, payload: dict[str, Any]) -> list[Event]:
        return [UsageReport(_read_usage(self._usage))]

    def _add_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self._usage.update({key: value for key, value in usage.items() if value is not None})

    _HANDLERS: ClassVar[dict[str, Callable[[UpstreamReader, dict[str, Any]], list[Event]]]] = {
        "message_start": _message_start,
        "content_block_start": _block_start,
        "content_block_delta": _block_delta,
        "content_block_stop": _block_stop,
        "message_delta": _message_delta,
        "message_stop": _message_stop,
    }
