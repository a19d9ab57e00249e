"""Chat Completions as an upstream answers (OpenAI and the compatible servers): its chat.completion, or its chunk
stream, into canonical."""

from __future__ import annotations

from typing import Any

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
    UsageReport,
)
from handlers.inference.formats.base import UpstreamFault
from handlers.inference.formats.chat.vocabulary import FINISH_READ, read_usage
from handlers.inference.formats.common import json_object


def upstream_result(payload: dict[str, Any]) -> Result:
    choices = payload.get("choices")
    if not choices or not isinstance(choices[0], dict):
        raise UpstreamFault(payload=payload) if payload.get("error") else UpstreamFault(what="answered without choices")
    choice = choices[0]  # the only one: n > 1 is refused
    message = choice.get("message") or {}
    content: list[Block] = []
    reasoning = _reasoning(message)
    if reasoning:
        content.append(Thinking(reasoning, format="chat"))
    text = _text(message.get("content"))
    if text:
        content.append(Text(text))
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        content.append(Text(refusal, refusal=True))
    for tool_call in message.get("tool_calls") or []:
        content.append(_call(tool_call))
    return Result(
        content=content,
        finish_reason=FINISH_READ.get(str(choice.get("finish_reason")), FinishReason.UNKNOWN),
        usage=read_usage(payload.get("usage")),
        upstream_model=payload.get("model"),
    )


def _call(tool_call: dict[str, Any]) -> ToolCall:
    """A function call, or a custom tool's call (its input is free-form text)."""
    if tool_call.get("type") == "custom":
        custom = tool_call.get("custom") or {}
        return ToolCall(tool_call.get("id") or "", custom.get("name") or "", custom.get("input") or "", custom=True)
    function = tool_call.get("function") or {}
    return ToolCall(tool_call.get("id") or "", function.get("name") or "", function.get("arguments") or "")


def _reasoning(fields: dict[str, Any]) -> str:
    """The reasoning an answer shows outside the standard: reasoning_content (DeepSeek, vLLM) or reasoning."""
    for key in ("reasoning_content", "reasoning"):
        text = fields.get(key)
        if isinstance(text, str) and text:
            return text
    return ""


def _text(content: Any) -> str:
    if isinstance(content, list):  # some compatible servers answer with parts
        return "".join(part.get("text") or "" for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


# The fields of a chunk that carries only text, which a chat caller may get as it came (see stream.py).
_PLAIN_CHUNK = frozenset({"id", "object", "created", "model", "choices", "system_fingerprint", "service_tier",
                          "obfuscation", "usage"})
_PLAIN_CHOICE = frozenset({"index", "delta", "finish_reason", "logprobs"})


def _text_only(chunk: dict[str, Any]) -> bool:
    """A chunk with one choice whose delta is content alone, no finish reason, and no field the gateway does not
    know (a content filter's results, say): a chat caller may get it as the upstream sent it."""
    choices = chunk["choices"]
    if len(choices) != 1 or not _PLAIN_CHUNK.issuperset(chunk):
        return False
    choice = choices[0]
    delta = choice["delta"]
    return _PLAIN_CHOICE.issuperset(choice) and choice.get("finish_reason") is None and len(delta) == 1 \
        and "content" in delta


class UpstreamReader:
    """Turns chat.completion.chunk events into canonical events, until [DONE]."""

    def __init__(self) -> None:
        self.done = False
        self._started: set[int] = set()
        self._custom: set[int] = set()  # the calls that are a custom tool's

    def read(self, event: str, data: str) -> list[Event]:
        if data.strip() == "[DONE]":
            self.done = True
            return []
        chunk = json_object(data)
        if chunk.get("error"):
            raise UpstreamFault(payload=chunk)
        events: list[Event] = []
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = _reasoning(delta)
            if reasoning:
                events.append(ThinkingDelta(reasoning, format="chat"))
            if text := delta.get("content"):
                events.append(TextDelta(text))
            if refusal := delta.get("refusal"):
                events.append(TextDelta(refusal, refusal=True))
            for tool_call in delta.get("tool_calls") or []:
                events.extend(self._tool_call(tool_call))
            if choice.get("finish_reason"):
                events.append(Finish(FINISH_READ.get(choice["finish_reason"], FinishReason.UNKNOWN)))
        if chunk.get("usage"):
            events.append(UsageReport(read_usage(chunk["usage"])))
        elif len(events) == 1 and isinstance(events[0], TextDelta) and _text_only(chunk):
            events[0].raw = data
        return events

    def _tool_call(self, tool_call: dict[str, Any]) -> list[Event]:
        """The first delta of a call carries its id and name, and its type ("custom": a custom tool's call); later
        ones only argument text, or a custom tool's input text (in `custom.input`)."""
        index = tool_call.get("index", 0)
        events: list[Event] = []
        if index not in self._started:
            self._started.add(index)
            if tool_call.get("type") == "custom":
                self._custom.add(index)
            named = tool_call.get("custom" if index in self._custom else "function") or {}
            events.append(ToolCallStart(index, tool_call.get("id") or f"call_{index}", named.get("name") or "",
                                        custom=index in self._custom))
        custom = index in self._custom
        text = (tool_call.get("custom" if custom else "function") or {}).get("input" if custom else "arguments")
        if text:
            events.append(ToolCallDelta(index, text))
        return events
