"""The answer as a Messages caller gets it streamed: message_start, content blocks, message_delta, message_stop."""

from __future__ import annotations

from typing import Any

import orjson

from handlers.errors import ApiError
from handlers.inference.canonical import (
    Answer,
    Event,
    ItemDone,
    ItemProgress,
    ItemStart,
    Request,
    TextDelta,
    TextEnd,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStart,
    Usage,
    UsageReport,
)
from handlers.inference.formats.common import StreamState, sse
from handlers.inference.formats.messages.answer import head, stop
from handlers.inference.formats.messages.vocabulary import DELTA_USAGE, text_block, tool_use_block, usage


class StreamRenderer(StreamState):
    """message_start, content blocks one after another (start, deltas, stop), message_delta, message_stop.

    message_start waits for the first event other than usage, so that it carries the input tokens of an upstream
    that reports them before its content (Anthropic does); without them it carries the gateway's own count of the
    prompt. The final counts come with message_delta.
    """

    def __init__(self, answer: Answer, request: Request) -> None:
        super().__init__()
        self._answer = answer
        self._started = False
        self._blocks = 0  # content blocks started so far
        self._open: int | None = None  # the index of the block open now
        self._text_open = False
        self._said = False  # the open text block has text (a citation after it starts another block)
        self._item_open = False  # the open block is one canonical does not model, relayed as it came
        self._thinking_open = False
        self._signature = ""  # a thinking block's signature, told whole when the block closes
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
            **head(self._answer),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage(self._early_usage()),
        }
        return _frame("message_start", {"message": message})

    def _early_usage(self) -> Usage:
        """What the upstream reported so far; an upstream that reports only at the end leaves the gateway's count."""
        if self.usage.input_tokens is None and self._answer.input_estimate is not None:
            return Usage(input_tokens=self._answer.input_estimate)
        return self.usage

    def finish(self) -> bytes:
        # A message with no block at all gets an empty text block: clients read content[0].
        out = self._message_start()
        out += self._close() if self._blocks else self._begin(text_block("")) + self._close()
        delta = stop(self.reason, self.stop_sequence)
        end = _frame("message_delta", {"delta": delta, "usage": usage(self.usage, DELTA_USAGE)})
        return out + end + _frame("message_stop", {})

    def error(self, err: ApiError) -> bytes:
        return self._message_start() + sse(err.body(), "error")

    def on_text(self, ev: TextDelta) -> bytes:
        """Text runs on in one block; Anthropic's citations open a block of their own (TextEnd ends it)."""
        if ev.citation is not None:
            out = b"" if self._text_open and not self._said else self._begin(text_block(""))
            self._text_open = True
            return out + self._delta({"type": "citations_delta", "citation": ev.citation})
        if not ev.text:
            return b""
        if self._text_open:
            self._said = True
            prefix = _TEXT_DELTA % self._open
            if ev.raw is not None and ev.raw.startswith(prefix) and ev.raw.endswith("}}"):
                # An Anthropic upstream's delta of this very block, in our words and order: relayed as it came.
                return b"event: content_block_delta\ndata: " + ev.raw.encode() + b"\n\n"
            return b"event: content_block_delta\ndata: " + prefix.encode() + orjson.dumps(ev.text) + b"}}\n\n"
        out = self._begin(text_block(""))
        self._text_open = self._said = True
        return out + self._delta({"type": "text_delta", "text": ev.text})

    def on_text_end(self, ev: TextEnd) -> bytes:
        return self._close() if self._text_open else b""

    def on_item_start(self, ev: ItemStart) -> bytes:
        """A block of an Anthropic upstream canonical does not model (a server tool's call, its result ...), as it
        came; another format's item is left out (the relay reports it)."""
        if ev.block.format != "messages":
            return b""
        out = self._begin(ev.block.data)
        self._item_open = True
        return out

    def on_item_progress(self, ev: ItemProgress) -> bytes:
        """A delta of the open block as it came (a server tool's input, a delta of a type added later)."""
        open_block = self._item_open or self._text_open  # a text block not begun yet has nothing to add a delta to
        if ev.format != "messages" or not open_block or not isinstance(ev.data.get("delta"), dict):
            return b""
        return self._delta(ev.data["delta"])

    def on_item(self, ev: ItemDone) -> bytes:
        if ev.block.format != "messages":
            return b""
        if self._item_open:
            return self._close()
        return self._begin(ev.block.data) + self._close()  # whole, with no start before it

    def on_thinking(self, ev: ThinkingDelta) -> bytes:
        """Consecutive pieces are one thinking block until a signature ends it; redacted data is a block of its own,
        whole at its start. Another provider's seal (Bedrock's signature, redacted data) goes back only to it: its
        text alone is shown, and its signature still ends its block, as in the whole answer."""
        if ev.format not in (None, "messages"):
            if ev.signature and not ev.text and self._thinking_open:
                return self._close()
            ev = ThinkingDelta(ev.text)
        if ev.redacted is not None:
            return self._begin({"type": "redacted_thinking", "data": ev.redacted}) + self._close()
        if not ev.text and not ev.signature:
            return b""  # what only another provider reads (encrypted content, item ids)
        more = self._thinking_open and not (self._signature and ev.signature is None)
        out = b"" if more else self._begin({"type": "thinking", "thinking": "", "signature": ""})
        self._thinking_open = True
        self._signature += ev.signature or ""
        return out + (self._delta({"type": "thinking_delta", "thinking": ev.text}) if ev.text else b"")

    def on_call_start(self, ev: ToolCallStart) -> bytes:
        out = self._begin(tool_use_block(ev.id, ev.name, {}))
        self._calls[ev.index] = self._blocks - 1
        return out

    def on_call_delta(self, ev: ToolCallDelta) -> bytes:
        index = self._calls.get(ev.index)
        if index is None or not ev.arguments:
            return b""
        return _frame(
            "content_block_delta", {"index": index, "delta": {"type": "input_json_delta", "partial_json": ev.arguments}}
        )

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return _frame("content_block_delta", {"index": self._open, "delta": delta})

    def _begin(self, block: dict[str, Any]) -> bytes:
        out = self._close()
        self._open = self._blocks
        self._blocks += 1
        return out + _frame("content_block_start", {"index": self._open, "content_block": block})

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        # The SDKs take a signature_delta as the whole signature, so the pieces are told once, at the end.
        out = self._delta({"type": "signature_delta", "signature": self._signature}) if self._signature else b""
        index, self._open, self._text_open, self._thinking_open, self._signature = self._open, None, False, False, ""
        self._said = self._item_open = False
        return out + _frame("content_block_stop", {"index": index})


# A text delta up to its text: what the renderer writes, and what an Anthropic upstream's delta it relays starts with.
_TEXT_DELTA = '{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":'


def _frame(kind: str, data: dict[str, Any]) -> bytes:
    return sse({"type": kind, **data}, kind)
