"""An Anthropic upstream's answer read back into canonical: a whole message, or its event stream."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import orjson

from handlers.inference.canonical import (
    Block,
    Event,
    Finish,
    FinishReason,
    Result,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallStart,
    Unknown,
    Usage,
    UsageReport,
)
from handlers.inference.formats.base import UpstreamFault
from handlers.inference.formats.common import json_object
from handlers.inference.formats.messages.vocabulary import STOP_READ, is_output_tool, read_usage


def upstream_result(payload: dict[str, Any]) -> Result:
    if payload.get("type") == "error":
        raise UpstreamFault(payload=payload)
    if not isinstance(payload.get("content"), list):
        raise UpstreamFault(what="answered without content")
    blocks = [block for block in payload["content"] if isinstance(block, dict)]
    content = [_block(block) for block in blocks]
    answered = any(_is_output(block) for block in blocks) and not any(isinstance(b, ToolCall) for b in content)
    return Result(
        content=content,
        finish_reason=_finish(payload.get("stop_reason"), answered),
        usage=read_usage(payload.get("usage") or {}),
        upstream_model=payload.get("model"),
        stop_sequence=_stop_sequence(payload),
    )


def _block(block: dict[str, Any]) -> Block:
    """Text, tool calls and thinking as canonical; any other block (server tools and their results) kept as it came,
    for a Messages caller. The structured-output tool's input is the answer's text."""
    kind = block.get("type")
    if kind == "text":
        return Text(block.get("text") or "")
    if _is_output(block):
        return Text(orjson.dumps(block.get("input") or {}).decode())
    if kind == "tool_use":
        arguments = orjson.dumps(block.get("input") or {}).decode()
        return ToolCall(block.get("id") or "", block.get("name") or "", arguments)
    if kind == "thinking":
        signature = block.get("signature")
        return Thinking(block.get("thinking") or "", signature=signature or None, format="messages")
    if kind == "redacted_thinking":
        return Thinking("", redacted=block.get("data") or "", format="messages")
    return Unknown(block, "messages")


def _is_output(block: dict[str, Any]) -> bool:
    return block.get("type") == "tool_use" and is_output_tool(block.get("name"))


def _finish(word: Any, answered: bool) -> FinishReason:
    """The stop reason; `answered`: only the structured-output tool was called, which ends the answer (it is no
    tool call for the caller to run)."""
    reason = STOP_READ.get(word, FinishReason.UNKNOWN) if isinstance(word, str) else FinishReason.UNKNOWN
    return FinishReason.STOP if reason is FinishReason.TOOL_CALLS and answered else reason


def _stop_sequence(fields: dict[str, Any]) -> str | None:
    sequence = fields.get("stop_sequence")
    return sequence if isinstance(sequence, str) else None


class UpstreamReader:
    """Turns Messages stream events into canonical events, until message_stop. Usage arrives in two halves:
    message_start's (the input counts) is reported with the first content, and the whole at the end.

    Blocks other than text, tool_use and thinking (server tools and their results) have no canonical stream event:
    a streamed answer leaves them out (a whole answer keeps them, see upstream_result).
    """

    def __init__(self) -> None:
        self.done = False
        self._tools: dict[int, int] = {}  # content block index -> tool call index (tool calls count from 0)
        self._outputs: set[int] = set()  # content block indexes of the structured-output tool
        self._with_arguments: set[int] = set()  # content block indexes whose input came
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
        self._early = read_usage(self._usage) if "input_tokens" in self._usage else None
        return []

    def _block_start(self, payload: dict[str, Any]) -> list[Event]:
        block = payload.get("content_block") or {}
        index = payload.get("index", 0)
        kind = block.get("type")
        if kind == "tool_use" and is_output_tool(block.get("name")):
            self._outputs.add(index)
            return []
        if kind == "tool_use":
            call = self._tools[index] = len(self._tools)
            return [ToolCallStart(call, block.get("id") or "", block.get("name") or "")]
        if kind == "text" and block.get("text"):
            return [TextDelta(block["text"])]
        if kind == "thinking":  # the start of a block, even an empty one: consecutive pieces are one block
            return [ThinkingDelta(block.get("thinking") or "", signature=block.get("signature") or None,
                                  format="messages")]
        if kind == "redacted_thinking":
            return [ThinkingDelta(redacted=block.get("data") or "", format="messages")]
        return []

    def _block_delta(self, payload: dict[str, Any]) -> list[Event]:
        delta = payload.get("delta") or {}
        index = payload.get("index", 0)
        kind = delta.get("type")
        if kind == "text_delta" and delta.get("text"):
            return [TextDelta(delta["text"])]
        if kind == "thinking_delta" and delta.get("thinking"):
            return [ThinkingDelta(delta["thinking"], format="messages")]
        if kind == "signature_delta" and delta.get("signature"):
            return [ThinkingDelta(signature=delta["signature"], format="messages")]
        if kind != "input_json_delta" or not delta.get("partial_json"):
            return []
        if index in self._outputs:
            self._with_arguments.add(index)
            return [TextDelta(delta["partial_json"])]
        if index in self._tools:
            self._with_arguments.add(index)
            return [ToolCallDelta(self._tools[index], delta["partial_json"])]
        return []

    def _block_stop(self, payload: dict[str, Any]) -> list[Event]:
        # A call without arguments streams no JSON at all; callers of the chat format expect "{}".
        index = payload.get("index", 0)
        if index in self._with_arguments:
            return []
        if index in self._outputs:
            return [TextDelta("{}")]
        return [ToolCallDelta(self._tools[index], "{}")] if index in self._tools else []

    def _message_delta(self, payload: dict[str, Any]) -> list[Event]:
        self._add_usage(payload.get("usage"))
        delta = payload.get("delta") or {}
        reason = delta.get("stop_reason")
        answered = bool(self._outputs) and not self._tools
        return [Finish(_finish(reason, answered), _stop_sequence(delta))] if reason else []

    def _message_stop(self, payload: dict[str, Any]) -> list[Event]:
        return [UsageReport(read_usage(self._usage))]

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
