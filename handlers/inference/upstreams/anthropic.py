"""Upstreams that speak the Anthropic Messages API."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, ClassVar

import httpx
import orjson

from handlers.inference.canonical import (
    Block,
    Event,
    Finish,
    FinishReason,
    Message,
    Request,
    Result,
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
from handlers.inference.upstreams.base import Timeouts
from handlers.inference.upstreams.http import DEFAULT_TIMEOUTS, HttpUpstream, merge_extra, present

PATH = "/v1/messages"

STOP_REASONS = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP_SEQUENCE,
    "max_tokens": FinishReason.LENGTH,
    "tool_use": FinishReason.TOOL_CALLS,
    "refusal": FinishReason.CONTENT_FILTER,
}

# A canonical tool choice as Anthropic's tool_choice type.
TOOL_CHOICES = {"auto": "auto", "none": "none", "required": "any", "tool": "tool"}

_EMPTY_SCHEMA = {"type": "object", "properties": {}}


class AnthropicUpstream(HttpUpstream):
    kind = "anthropic"

    def __init__(
        self,
        name: str,
        *,
        base_url: str,  # without /v1, like the Anthropic SDK
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        default_max_tokens: int = 4096,
        anthropic_version: str = "2023-06-01",
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        versioned = {"anthropic-version": anthropic_version, **(headers or {})}
        super().__init__(
            name, base_url=base_url, api_key=api_key, headers=versioned, timeouts=timeouts, transport=transport
        )
        self.default_max_tokens = default_max_tokens

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key}

    async def complete(self, request: Request, model: str) -> Result:
        answer = await self.post_json(PATH, self.body(request, model))
        if answer.get("type") == "error":
            raise self.event_error(answer)
        if not isinstance(answer.get("content"), list):
            raise self.protocol_error("answered without content")
        return _result(answer)

    async def stream(self, request: Request, model: str) -> AsyncIterator[Event]:
        reader = _EventReader()
        async with contextlib.aclosing(self.stream_sse(PATH, {**self.body(request, model), "stream": True})) as events:
            async for sse in events:
                payload = self.parse_json(sse.data)
                kind = payload.get("type") or sse.event
                if kind == "error":
                    raise self.event_error(payload)
                for event in reader.read(kind, payload):
                    yield event
                if kind == "message_stop":
                    return
        raise self.protocol_error("ended the stream before message_stop")

    def body(self, request: Request, model: str) -> dict[str, Any]:
        """The Messages body for `request` (without the streaming flag)."""
        max_tokens = request.max_tokens if request.max_tokens is not None else self.default_max_tokens
        body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": messages(request.messages)}
        body.update(
            present(
                system=request.system or None,
                temperature=request.temperature,
                top_p=request.top_p,
                stop_sequences=request.stop,
            )
        )
        tools = [_tool(t) for t in request.tools or () if t.format == "messages" or t.portable]
        if tools:
            body["tools"] = tools
        choice = request.tool_choice
        if request.format == "messages":
            body.update(present(tool_choice=choice.raw if choice else None))
            merge_extra(body, request.extra)
        elif tools and choice and choice.portable:  # Anthropic refuses a tool choice without tools
            body["tool_choice"] = _tool_choice(choice)
        return body


def messages(conversation: list[Message]) -> list[dict[str, Any]]:
    """Messages API messages: tool results go in user turns, and consecutive same-role turns merge (it alternates)."""
    out: list[dict[str, Any]] = []
    for message in conversation:
        role = "assistant" if message.role == "assistant" else "user"
        blocks = [converted for block in message.content if (converted := _block(block)) is not None]
        if not blocks:
            continue  # an empty content list is rejected
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _text_block(block: Text) -> dict[str, Any] | None:
    return {"type": "text", "text": block.text} if block.text else None  # empty text blocks are rejected


def _tool_use(block: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": _tool_input(block.arguments)}


def _tool_result(block: ToolResult) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": block.tool_call_id, "content": block.content}


def _unknown(block: Unknown) -> dict[str, Any] | None:
    return block.data if block.format == "messages" else None


_BLOCKS: dict[type, Callable[[Any], dict[str, Any] | None]] = {
    Text: _text_block,
    ToolCall: _tool_use,
    ToolResult: _tool_result,
    Unknown: _unknown,
}


def _block(block: Block) -> dict[str, Any] | None:
    return _BLOCKS[type(block)](block)


def _tool_input(arguments: str) -> dict[str, Any]:
    """tool_use input must be an object; arguments that are not one are kept as text rather than lost."""
    if not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        value = None
    return value if isinstance(value, dict) else {"arguments": arguments}


def _tool(tool: Tool) -> dict[str, Any]:
    if tool.format == "messages":
        return tool.raw
    return {
        "name": tool.name,
        **present(description=tool.description),
        "input_schema": tool.parameters or _EMPTY_SCHEMA,
    }


def _tool_choice(choice: ToolChoice) -> dict[str, Any]:
    """Another format's tool choice; "at most one call" (parallel_tool_calls false) goes inside it."""
    out = {"type": TOOL_CHOICES[choice.mode or "auto"], **present(name=choice.name)}
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
        finish_reason=STOP_REASONS.get(answer.get("stop_reason"), FinishReason.UNKNOWN),
        usage=_usage(answer.get("usage") or {}),
        upstream_model=answer.get("model"),
        stop_sequence=_stop_sequence(answer),
    )


def _stop_sequence(fields: dict[str, Any]) -> str | None:
    sequence = fields.get("stop_sequence")
    return sequence if isinstance(sequence, str) else None


def _usage(raw: dict[str, Any]) -> Usage:
    """Canonical input counts every prompt token, as OpenAI's prompt_tokens does; Anthropic counts cache reads
    and cache writes apart from input_tokens."""
    cached = raw.get("cache_read_input_tokens")
    given = raw.get("input_tokens")
    total = None if given is None else given + (cached or 0) + (raw.get("cache_creation_input_tokens") or 0)
    return Usage(input_tokens=total, output_tokens=raw.get("output_tokens"), cached_input_tokens=cached)


class _EventReader:
    """Turns Messages stream events into canonical events. Usage arrives in two halves: message_start's (the input
    counts) is reported with the first content, and the whole at the end."""

    def __init__(self) -> None:
        self._tools: dict[int, int] = {}  # content block index -> tool call index (tool calls count from 0)
        self._with_arguments: set[int] = set()
        self._usage: dict[str, Any] = {}
        self._early: Usage | None = None  # message_start's usage, until content comes

    def read(self, kind: str, payload: dict[str, Any]) -> list[Event]:
        handler = self._HANDLERS.get(kind)
        events = handler(self, payload) if handler else []  # ping, and event types added later
        if events and self._early is not None:
            # Not at message_start itself: a stream that fails before any content has not started, and falls back.
            events.insert(0, UsageReport(self._early))
            self._early = None
        return events

    def _message_start(self, payload: dict[str, Any]) -> list[Event]:
        self._add_usage((payload.get("message") or {}).get("usage"))
        self._early = _usage(self._usage) if "input_tokens" in self._usage else None
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
        return [Finish(STOP_REASONS.get(reason, FinishReason.UNKNOWN), _stop_sequence(delta))] if reason else []

    def _message_stop(self, payload: dict[str, Any]) -> list[Event]:
        return [UsageReport(_usage(self._usage))]

    def _add_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self._usage.update({key: value for key, value in usage.items() if value is not None})

    _HANDLERS: ClassVar[dict[str, Callable[[_EventReader, dict[str, Any]], list[Event]]]] = {
        "message_start": _message_start,
        "content_block_start": _block_start,
        "content_block_delta": _block_delta,
        "content_block_stop": _block_stop,
        "message_delta": _message_delta,
        "message_stop": _message_stop,
    }
