"""The answer as a Gemini caller gets it streamed (streamGenerateContent with alt=sse): server-sent events whose data
is each a GenerateContentResponse with the next parts; the last carries the finishReason and the usage."""

from __future__ import annotations

from handlers.errors import ApiError
from handlers.inference.canonical import (
    Answer,
    Block,
    ItemDone,
    Request,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallStart,
    Unknown,
)
from handlers.inference.formats.common import StreamState, sse
from handlers.inference.formats.gemini.answer import Parts, head, shows_thoughts
from handlers.inference.formats.gemini.vocabulary import FINISH_REASONS, candidate, usage


class StreamRenderer(StreamState):
    """Text and thoughts go out as they come; a function call goes out whole once its arguments are complete (Gemini
    streams no partial calls), when the next event that is not its arguments arrives."""

    def __init__(self, answer: Answer, request: Request) -> None:
        super().__init__()
        self._head = head(answer)
        self._parts = Parts(shows_thoughts(request))
        self._calls: dict[int, ToolCall] = {}  # calls whose arguments are still arriving, by canonical index

    def start(self) -> bytes:
        return b""

    def finish(self) -> bytes:
        out = self._flush()
        before = len(self._parts.parts)
        tail = self._parts.done()[before:]  # a signature that came with nothing after it, else no part
        last = {"candidates": [candidate(tail, FINISH_REASONS[self.reason])], "usageMetadata": usage(self.usage),
                **self._head}
        return out + sse(last)

    def error(self, err: ApiError) -> bytes:
        return self._flush() + sse(err.google_body())

    def on_text(self, ev: TextDelta) -> bytes:
        if not ev.text:
            return b""
        return self._flush() + self._send(Text(ev.text))

    def on_thinking(self, ev: ThinkingDelta) -> bytes:
        return self._flush() + self._send(Thinking(ev.text, signature=ev.signature, format=ev.format))

    def on_call_start(self, ev: ToolCallStart) -> bytes:
        out = self._flush()
        self._calls[ev.index] = ToolCall(ev.id, ev.name, "", custom=ev.custom, namespace=ev.namespace)
        return out

    def on_call_delta(self, ev: ToolCallDelta) -> bytes:
        if ev.index in self._calls:
            self._calls[ev.index].arguments += ev.arguments
        return b""

    def on_item(self, ev: ItemDone) -> bytes:
        return self._flush() + (self._send(ev.block) if isinstance(ev.block, Unknown) else b"")

    def _flush(self) -> bytes:
        """The calls complete now, each in a chunk of its own."""
        calls, self._calls = self._calls, {}
        return b"".join(self._send(call) for _, call in sorted(calls.items()))

    def _send(self, block: Block) -> bytes:
        part = self._parts.add(block)
        if part is None:
            return b""
        return sse({"candidates": [candidate([part], None)], **self._head})
