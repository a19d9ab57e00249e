"""Chat Completions streamed to callers: chat.completion.chunk events, then [DONE]."""

from __future__ import annotations

from typing import Any

import orjson

from handlers.errors import ApiError
from handlers.inference.canonical import Answer, Event, Request, TextDelta, ThinkingDelta, ToolCallDelta, ToolCallStart
from handlers.inference.formats.chat.vocabulary import FINISH_REASONS, THINKING_GAP, VOCABULARY, usage
from handlers.inference.formats.common import DONE, StreamState, sse


class StreamRenderer(StreamState):
    """No `event:` lines: the OpenAI SDKs read bare `data:` frames. Reasoning goes in `reasoning_content` deltas.

    A chat upstream's chunk that carries only text (TextDelta.raw) is relayed as it came, with its id, created and
    model rewritten in its bytes: the upstream's own fields (system_fingerprint, logprobs ...) reach the caller, and
    nothing is encoded again. Every other chunk is rendered: the head is encoded once, each chunk only its choice.
    """

    def __init__(self, answer: Answer, request: Request) -> None:
        super().__init__()
        self._head = {
            "id": VOCABULARY.id_prefix + answer.decision_id,
            "object": "chat.completion.chunk",
            "created": answer.created,
            "model": answer.model,
        }
        head = orjson.dumps(self._head)
        self._prefix = b"data: " + head[:-1] + b',"choices":['  # a chunk up to its choice
        self._heads: tuple[str, bytes] | None = None  # the upstream's chunks' head, and ours, once known
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
        if not ev.text:
            return b""
        relayed = self._relayed(ev.raw) if ev.raw is not None and not ev.refusal else None
        return relayed or self._chunk({"refusal" if ev.refusal else "content": ev.text})

    def _relayed(self, raw: str) -> bytes | None:
        """The upstream's chunk with our id, created and model in place of its own; None when it does not start with
        them as the renderer writes them (then it is rendered)."""
        if self._heads is None:
            self._heads = _heads(raw, self._head)
        theirs, ours = self._heads
        return b"data: " + ours + raw[len(theirs):].encode() + b"\n\n" if theirs and raw.startswith(theirs) else None

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
        return self._prefix + orjson.dumps(choice) + b"]}\n\n"


def _heads(raw: str, head: dict[str, Any]) -> tuple[str, bytes]:
    """How an upstream's chunks (this one, and the rest of its stream) start when they say id, object, created and
    model first, as the renderer writes them; and how ours start. ("", ...) when this one does not."""
    chunk = orjson.loads(raw)
    theirs = orjson.dumps({key: chunk.get(key) for key in head})[:-1].decode()  # '{"id":...,"model":"up"'
    return theirs if raw.startswith(theirs) and chunk.get("object") == head["object"] else "", orjson.dumps(head)[:-1]
