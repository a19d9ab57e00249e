"""A Bedrock upstream's answer read back into canonical: a ConverseResponse, or ConverseStream's events.

The stream's binary framing (application/vnd.amazon.eventstream) is the transport's to decode (botocore's parser,
checksums verified: upstreams/eventstream.py); this reader gets each message's event type (or exception type) and
its JSON payload, as the SSE formats' readers get an event's name and data.
"""

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
    UsageReport,
)
from handlers.inference.formats.base import UpstreamFault
from handlers.inference.formats.common import arguments_at_end, json_object
from handlers.inference.formats.converse.vocabulary import STOP_READ, STREAM_EXCEPTIONS, read_usage
from handlers.inference.formats.messages.vocabulary import is_output_tool


def upstream_result(payload: dict[str, Any]) -> Result:
    message = (payload.get("output") or {}).get("message") if isinstance(payload.get("output"), dict) else None
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        raise UpstreamFault(what="answered without output.message.content")
    blocks = [block for block in message["content"] if isinstance(block, dict)]
    content = [_block(block) for block in blocks]
    answered = any(_is_output(block.get("toolUse")) for block in blocks) and not any(
        isinstance(b, ToolCall) for b in content)
    return Result(content=content, finish_reason=_finish(payload.get("stopReason"), answered),
                  usage=read_usage(payload.get("usage")))


def _block(block: dict[str, Any]) -> Block:
    """Text, tool calls and reasoning as canonical; any other block (citations, images ...) kept as it came. The
    structured-output tool's input is the answer's text."""
    if isinstance(block.get("text"), str):
        return Text(block["text"])
    use = block.get("toolUse")
    if isinstance(use, dict):
        arguments = orjson.dumps(use.get("input") or {}).decode()
        if _is_output(use):
            return Text(arguments)
        return ToolCall(use.get("toolUseId") or "", use.get("name") or "", arguments)
    reasoning = block.get("reasoningContent")
    if isinstance(reasoning, dict) and isinstance(reasoning.get("redactedContent"), str):
        return Thinking("", redacted=reasoning["redactedContent"], format="converse")
    if isinstance(reasoning, dict) and isinstance(reasoning.get("reasoningText"), dict):
        said = reasoning["reasoningText"]
        return Thinking(said.get("text") or "", signature=said.get("signature") or None, format="converse")
    return Unknown(block, "converse")


def _is_output(use: Any) -> bool:
    return isinstance(use, dict) and is_output_tool(use.get("name"))


def _finish(word: Any, answered: bool) -> FinishReason:
    """The stop reason; `answered`: only the structured-output tool was called, which ends the answer (it is no
    tool call for the caller to run)."""
    reason = STOP_READ.get(word, FinishReason.UNKNOWN) if isinstance(word, str) else FinishReason.UNKNOWN
    return FinishReason.STOP if reason is FinishReason.TOOL_CALLS and answered else reason


def is_exception(event: str) -> bool:
    return event in STREAM_EXCEPTIONS or event.endswith("Exception")


class UpstreamReader:
    """Turns ConverseStream events into canonical events, until metadata (which follows messageStop and carries the
    usage). An exception event is the upstream's error, with the status its type has (STREAM_EXCEPTIONS).

    Content blocks other than text, tool use and reasoning (citations ...) have no canonical stream event: a
    streamed answer leaves them out (a whole answer keeps them, see upstream_result).
    """

    def __init__(self) -> None:
        self.done = False
        self._tools: dict[int, int] = {}  # content block index -> tool call index (tool calls count from 0)
        self._outputs: set[int] = set()  # content block indexes of the structured-output tool
        self._with_arguments: set[int] = set()  # content block indexes whose input came

    def read(self, event: str, data: str) -> list[Event]:
        payload = json_object(data)
        if is_exception(event):
            raise UpstreamFault(payload={"error": {"type": event, "message": payload.get("message")
                                                   or payload.get("Message") or event}})
        self.done = event == "metadata"
        handler = self._HANDLERS.get(event)
        return handler(self, payload) if handler else []  # messageStart, and event types added later

    def _block_start(self, payload: dict[str, Any]) -> list[Event]:
        use = (payload.get("start") or {}).get("toolUse")
        index = payload.get("contentBlockIndex", 0)
        if not isinstance(use, dict):
            return []
        if _is_output(use):
            self._outputs.add(index)
            return []
        call = self._tools[index] = len(self._tools)
        return [ToolCallStart(call, use.get("toolUseId") or "", use.get("name") or "")]

    def _block_delta(self, payload: dict[str, Any]) -> list[Event]:
        delta = payload.get("delta") or {}
        index = payload.get("contentBlockIndex", 0)
        if isinstance(delta.get("text"), str):
            return [TextDelta(delta["text"])] if delta["text"] else []
        reasoning = delta.get("reasoningContent")
        if isinstance(reasoning, dict):
            return _reasoning_delta(reasoning)
        pieces = (delta.get("toolUse") or {}).get("input")
        if not isinstance(pieces, str) or not pieces:
            return []
        if index in self._outputs:
            self._with_arguments.add(index)
            return [TextDelta(pieces)]
        if index in self._tools:
            self._with_arguments.add(index)
            return [ToolCallDelta(self._tools[index], pieces)]
        return []

    def _block_stop(self, payload: dict[str, Any]) -> list[Event]:
        index = payload.get("contentBlockIndex", 0)
        return arguments_at_end(index, self._tools, self._outputs, self._with_arguments)

    def _message_stop(self, payload: dict[str, Any]) -> list[Event]:
        answered = bool(self._outputs) and not self._tools
        return [Finish(_finish(payload.get("stopReason"), answered))]

    def _metadata(self, payload: dict[str, Any]) -> list[Event]:
        return [UsageReport(read_usage(payload.get("usage")))]

    _HANDLERS: ClassVar[dict[str, Callable[[UpstreamReader, dict[str, Any]], list[Event]]]] = {
        "contentBlockStart": _block_start,
        "contentBlockDelta": _block_delta,
        "contentBlockStop": _block_stop,
        "messageStop": _message_stop,
        "metadata": _metadata,
    }


def _reasoning_delta(reasoning: dict[str, Any]) -> list[Event]:
    if reasoning.get("text"):
        return [ThinkingDelta(reasoning["text"], format="converse")]
    if reasoning.get("signature"):
        return [ThinkingDelta(signature=reasoning["signature"], format="converse")]
    if reasoning.get("redactedContent"):
        return [ThinkingDelta(redacted=reasoning["redactedContent"], format="converse")]
    return []
