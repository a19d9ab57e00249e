"""Chat Completions streamed to callers: chat.completion.chunk events, then [DONE]."""

from __future__ import annotations

from typing import Any

from handlers.errors import ApiError
from handlers.inference.canonical import Answer, Event, Request, TextDelta, ThinkingDelta, ToolCallDelta, ToolCallStart
from handlers.inference.formats.chat.vocabulary import FINISH_REASONS, THINKING_GAP, VOCABULARY, usage
from handlers.inference.formats.common import DONE, StreamState, sse


class StreamRenderer(StreamState):
    """No `event:` lines: the OpenAI SDKs read bare `data:` frames. Reasoning goes in `reasoning_content` deltas."""

    def __init__(self, answer: Answer, request: Request) -> None:
        super().__init__()
        self._head = {
            "id": VOCABULARY.id_prefix + answer.decision_id,
            "object": "chat.completion.chunk",
            "created": answer.created,
            "model": answer.model,
        }
        self._include_usage = request.include_usage
        # Canonical tool-call index -> the chat index. The SDK keeps tool calls in a list, so they count from 0.
        self._calls: dict[int, int] = {}
        self._custom: set[int] = set()  # the chat indexes of custom tools' calls
        self._reasoned = False  # some reasoning was sent
        self._in_thinking = False  # the last event was a piece of thinking

    def start(self) -> bytes:
        return self._chunk({"role": "assistant", "content": ""})

    def event(self, ev: Event) -> bytes:
        out = super().event(ev)
        self._in_thinking = isinstance(ev, ThinkingDelta)
        return out

    def finish(self) -> bytes:
        out = self._chunk({}, FINISH_REASONS[self.reason])
        if self._include_usage:
            out += sse({**self._head, "choices": [], "usage": usage(self.usage)})
        return out + DONE

    def error(self, err: ApiError) -> bytes:
        # A bare {"error": ...} is what makes the OpenAI SDKs raise mid-stream; nothing may follow it.
        return sse({"error": err.body()["error"]})

    def on_text(self, ev: TextDelta) -> bytes:
        return self._chunk({"refusal" if ev.refusal else "content": ev.text}) if ev.text else b""

    def on_thinking(self, ev: ThinkingDelta) -> bytes:
        if not ev.text:
            return b""  # a signature or encrypted reasoning: chat has no place for it
        text = THINKING_GAP + ev.text if self._reasoned and not self._in_thinking else ev.text
        self._reasoned = True
        return self._chunk({"reasoning_content": text})

    def on_call_start(self, ev: ToolCallStart) -> bytes:
        """A function call, or a custom tool's call: {"type": "custom", "custom": {"name", "input"}}, whose later
        deltas carry the input text in custom.input."""
        index = self._calls.setdefault(ev.index, len(self._calls))
        if ev.custom:
            self._custom.add(index)
            call = {"index": index, "id": ev.id, "type": "custom", "custom": {"name": ev.name, "input": ""}}
        else:
            call = {"index": index, "id": ev.id, "type": "function", "function": {"name": ev.name, "arguments": ""}}
        return self._chunk({"tool_calls": [call]})

    def on_call_delta(self, ev: ToolCallDelta) -> bytes:
        index = self._calls.get(ev.index)
        if index is None or not ev.arguments:
            return b""
        if index in self._custom:
            return self._chunk({"tool_calls": [{"index": index, "custom": {"input": ev.arguments}}]})
        return self._chunk({"tool_calls": [{"index": index, "function": {"arguments": ev.arguments}}]})

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        return sse({**self._head, "choices": [choice]})
