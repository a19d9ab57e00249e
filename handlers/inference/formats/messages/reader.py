"""An Anthropic upstream's answer read back into canonical: a whole message, or its event stream.

Text, tool calls and thinking are canonical; any other content block (a server tool's call and its result, an MCP
call ...) is kept whole as Unknown, and streamed as ItemStart, ItemProgress (its deltas) and ItemDone: a Messages
caller gets it as it came, at its place, and a caller of another format gets the rest, with the block left out by name
in the decision record (serving/relay.py). Every stream event, block and delta type Anthropic's SDKs define is in
these tables, read or ignored on purpose with the reason (tests/test_anthropic_stream_types.py checks that); any other
type is counted and logged (specway_upstream_unread), and a block of an unknown type is still relayed as an item.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from handlers.inference.canonical import (
    Block,
    Event,
    Finish,
    FinishReason,
    ItemDone,
    ItemProgress,
    ItemStart,
    Result,
    Text,
    TextDelta,
    TextEnd,
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
from handlers.inference.formats.common import arguments_at_end, json_object, unread
from handlers.inference.formats.messages.vocabulary import STOP_READ, is_output_tool, read_usage

# The content block types canonical models.
MODELLED = frozenset({"text", "thinking", "redacted_thinking", "tool_use"})
_CALL = "a call of a tool Anthropic runs: relayed whole to a Messages caller, left out (and said) for another"
_RESULT = "what a tool Anthropic runs gave back: relayed whole to a Messages caller, left out (and said) for another"
# The content block types canonical has no word for, and what they are: items (whole answers keep them as Unknown).
ITEMS: dict[str, str] = {
    "server_tool_use": _CALL,
    "mcp_tool_use": _CALL,
    "web_search_tool_result": _RESULT,
    "web_fetch_tool_result": _RESULT,
    "code_execution_tool_result": _RESULT,
    "bash_code_execution_tool_result": _RESULT,
    "text_editor_code_execution_tool_result": _RESULT,
    "tool_search_tool_result": _RESULT,
    "mcp_tool_result": _RESULT,
    "mcp_tool_listing": _RESULT,
    "advisor_tool_result": _RESULT,
    "container_upload": "a file the code execution container got: relayed to a Messages caller",
    "compaction": "the summary of earlier context (context management): relayed to a Messages caller, who sends it "
                  "back; another format's caller never asked for it",
    "fallback": "Anthropic's own marker of a model fallback: relayed to a Messages caller",
}

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
    kind = _type(block)
    if kind == "text":
        citations = block.get("citations")
        return Text(block.get("text") or "", citations=list(citations) if isinstance(citations, list) and citations
                    else None)
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
    if kind not in ITEMS:
        unread("messages", "block", kind)
    return Unknown(block, "messages")


def _type(value: dict[str, Any]) -> str:
    """An object's type as an upstream sent it: a string, or "unknown"."""
    kind = value.get("type")
    return kind[:64] if isinstance(kind, str) and kind else "unknown"


def _index(payload: dict[str, Any]) -> int:
    index = payload.get("index", 0)
    return index if isinstance(index, int) else 0


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
    message_start's (the input counts) is reported with the first content, and the whole at the end. Blocks come
    one after another, each started, filled by its deltas and stopped."""

    def __init__(self) -> None:
        self.done = False
        self._tools: dict[int, int] = {}  # content block index -> tool call index (tool calls count from 0)
        self._outputs: set[int] = set()  # content block indexes of the structured-output tool
        self._with_arguments: set[int] = set()  # content block indexes whose input came
        self._items: dict[int, _Item] = {}  # content block index -> a block canonical does not model, as it grows
        self._cited: set[int] = set()  # text blocks whose citations came
        self._usage: dict[str, Any] = {}
        self._early: Usage | None = None  # message_start's usage, until content comes

    def read(self, event: str, data: str) -> list[Event]:
        payload = json_object(data)
        kind = payload.get("type") or event
        kind = kind if isinstance(kind, str) else "unknown"
        self.done = kind == "message_stop"
        handler = HANDLED.get(kind)
        if handler is None:
            if kind not in IGNORED:
                unread("messages", "event", kind)
            return []
        events = handler(self, payload)
        if kind == "content_block_delta" and len(events) == 1 and isinstance(events[0], TextDelta):
            events[0].raw = data  # a Messages caller may get it as it came (stream.py checks its bytes)
        if events and self._early is not None:
            # Not at message_start itself: a stream that fails before any content has not started, and falls back.
            events.insert(0, UsageReport(self._early))
            self._early = None
        return events

    def _error(self, payload: dict[str, Any]) -> list[Event]:
        raise UpstreamFault(payload=payload)

    def _message_start(self, payload: dict[str, Any]) -> list[Event]:
        self._add_usage((payload.get("message") or {}).get("usage"))
        self._early = read_usage(self._usage) if "input_tokens" in self._usage else None
        return []

    def _block_start(self, payload: dict[str, Any]) -> list[Event]:
        block = payload.get("content_block")
        block = block if isinstance(block, dict) else {}
        index, kind = _index(payload), _type(block)
        if kind == "tool_use" and is_output_tool(block.get("name")):
            self._outputs.add(index)
            return []
        if kind == "tool_use":
            call = self._tools[index] = len(self._tools)
            return [ToolCallStart(call, block.get("id") or "", block.get("name") or "")]
        if kind == "text":
            return self._text_start(index, block)
        if kind == "thinking":  # the start of a block, even an empty one: a signature ends it
            return [ThinkingDelta(block.get("thinking") or "", signature=block.get("signature") or None,
                                  format="messages")]
        if kind == "redacted_thinking":
            return [ThinkingDelta(redacted=block.get("data") or "", format="messages")]
        if kind not in ITEMS:
            unread("messages", "block", kind)
        self._items[index] = _Item(dict(block))
        return [ItemStart(Unknown(dict(block), "messages"))]

    def _text_start(self, index: int, block: dict[str, Any]) -> list[Event]:
        citations = block.get("citations")
        events: list[Event] = [TextDelta("", citation=c) for c in citations or [] if isinstance(c, dict)]
        if events:
            self._cited.add(index)
        return [*events, TextDelta(block["text"])] if block.get("text") else events

    def _block_delta(self, payload: dict[str, Any]) -> list[Event]:
        delta = payload.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        index, kind = _index(payload), _type(delta)
        if kind not in DELTAS:
            unread("messages", "delta", kind)
        if index in self._items:
            self._items[index].add(delta)
            return [ItemProgress({"type": "content_block_delta", "delta": delta}, "messages")]
        reader = DELTAS.get(kind)
        if reader is None:  # a delta of a type added later, in a block canonical models: a Messages caller gets it
            return [ItemProgress({"type": "content_block_delta", "delta": delta}, "messages")]
        return reader(self, index, delta)

    def _text(self, index: int, delta: dict[str, Any]) -> list[Event]:
        return [TextDelta(delta["text"])] if delta.get("text") else []

    def _citation(self, index: int, delta: dict[str, Any]) -> list[Event]:
        citation = delta.get("citation")
        if not isinstance(citation, dict):
            return []
        self._cited.add(index)
        return [TextDelta("", citation=citation)]

    def _thinking(self, index: int, delta: dict[str, Any]) -> list[Event]:
        return [ThinkingDelta(delta["thinking"], format="messages")] if delta.get("thinking") else []

    def _signature(self, index: int, delta: dict[str, Any]) -> list[Event]:
        return [ThinkingDelta(signature=delta["signature"], format="messages")] if delta.get("signature") else []

    def _arguments(self, index: int, delta: dict[str, Any]) -> list[Event]:
        if not delta.get("partial_json"):
            return []
        if index in self._outputs:
            self._with_arguments.add(index)
            return [TextDelta(delta["partial_json"])]
        if index in self._tools:
            self._with_arguments.add(index)
            return [ToolCallDelta(self._tools[index], delta["partial_json"])]
        return []

    def _block_stop(self, payload: dict[str, Any]) -> list[Event]:
        index = _index(payload)
        if index in self._items:
            return [ItemDone(Unknown(self._items.pop(index).whole(), "messages"))]
        if index in self._cited:
            self._cited.discard(index)
            return [TextEnd()]
        return arguments_at_end(index, self._tools, self._outputs, self._with_arguments)

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


class _Item:
    """A block canonical does not model, as its deltas fill it: a server tool call's input comes as JSON pieces, a
    compaction's fields whole."""

    def __init__(self, block: dict[str, Any]) -> None:
        self.block = block
        self._json: list[str] = []

    def add(self, delta: dict[str, Any]) -> None:
        if delta.get("type") == "input_json_delta":
            self._json.append(str(delta.get("partial_json") or ""))
        elif delta.get("type") == "compaction_delta":
            self.block.update({k: v for k, v in delta.items() if k != "type"})

    def whole(self) -> dict[str, Any]:
        if "".join(self._json).strip():
            try:
                self.block["input"] = orjson.loads("".join(self._json))
            except orjson.JSONDecodeError:
                pass  # the block as it started; a Messages caller got every piece as it came
        return self.block


Reader = Callable[[UpstreamReader, dict[str, Any]], list[Event]]

# The stream event types read into canonical events.
HANDLED: dict[str, Reader] = {
    "message_start": UpstreamReader._message_start,
    "content_block_start": UpstreamReader._block_start,
    "content_block_delta": UpstreamReader._block_delta,
    "content_block_stop": UpstreamReader._block_stop,
    "message_delta": UpstreamReader._message_delta,
    "message_stop": UpstreamReader._message_stop,
    "error": UpstreamReader._error,
}
# The stream event types read on purpose into nothing, and why nothing of the answer is lost with them.
IGNORED: dict[str, str] = {
    "ping": "a keep-alive: nothing of the answer in it",
}
# The delta types of a block canonical models, read into canonical events; in a block it does not model, every delta
# is relayed as it came (compaction_delta fills a compaction block).
DELTAS: dict[str, Callable[[UpstreamReader, int, dict[str, Any]], list[Event]]] = {
    "text_delta": UpstreamReader._text,
    "citations_delta": UpstreamReader._citation,
    "thinking_delta": UpstreamReader._thinking,
    "signature_delta": UpstreamReader._signature,
    "input_json_delta": UpstreamReader._arguments,
    "compaction_delta": lambda reader, index, delta: [],  # only ever in a compaction block (an item)
}
