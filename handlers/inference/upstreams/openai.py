"""Upstreams that speak OpenAI Chat Completions: OpenAI itself and the many compatible servers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

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
from handlers.inference.upstreams.http import HttpUpstream, merge_extra, present

PATH = "/chat/completions"

FINISH_REASONS = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "content_filter": FinishReason.CONTENT_FILTER,
}

# A canonical tool choice in chat's words; "tool" names its tool in an object instead.
TOOL_CHOICES = {"auto": "auto", "none": "none", "required": "required"}


class OpenAIUpstream(HttpUpstream):
    """Any OpenAI-compatible Chat Completions server; base_url includes /v1.

    Takes HttpUpstream's arguments: (name, *, base_url, api_key=None, headers=None, timeouts=Timeouts(), transport=None).
    """

    kind = "openai"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"}

    async def complete(self, request: Request, model: str) -> Result:
        answer = await self.post_json(PATH, chat_body(request, model))
        choices = answer.get("choices")
        if not choices or not isinstance(choices[0], dict):
            raise self.event_error(answer) if answer.get("error") else self.protocol_error("answered without choices")
        return _result(choices[0], answer)

    async def stream(self, request: Request, model: str) -> AsyncIterator[Event]:
        body = {**chat_body(request, model), "stream": True, "stream_options": {"include_usage": True}}
        reader = _ChunkReader()
        async with contextlib.aclosing(self.stream_sse(PATH, body)) as events:
            async for sse in events:
                if sse.data.strip() == "[DONE]":
                    return
                chunk = self.parse_json(sse.data)
                if chunk.get("error"):
                    raise self.event_error(chunk)
                for event in reader.read(chunk):
                    yield event
        raise self.protocol_error("ended the stream before [DONE]")


def chat_body(request: Request, model: str) -> dict[str, Any]:
    """The Chat Completions body for `request` (without the streaming fields)."""
    body: dict[str, Any] = {"model": model, "messages": chat_messages(request)}
    body.update(
        present(
            max_tokens=request.max_tokens,
            temperature=request.temperature,
            top_p=request.top_p,
            stop=request.stop,
            seed=request.seed,
        )
    )
    tools = [_tool(t) for t in request.tools or () if t.format == "chat" or t.portable]
    if tools:
        body["tools"] = tools
    choice = request.tool_choice
    if request.format == "chat":
        raw_choice = choice.raw if choice else None
        body.update(present(tool_choice=raw_choice, response_format=request.response_format))
        merge_extra(body, request.extra)
    elif tools and choice and choice.portable:  # OpenAI refuses a tool choice without tools
        body.update(_tool_choice(choice))
    return body


def _tool_choice(choice: ToolChoice) -> dict[str, Any]:
    """Another format's tool choice as chat's tool_choice, and "at most one call" as parallel_tool_calls."""
    named = {"type": "function", "function": {"name": choice.name}}
    return {"tool_choice": TOOL_CHOICES.get(choice.mode or "", named), **present(parallel_tool_calls=choice.parallel)}


def chat_messages(request: Request) -> list[dict[str, Any]]:
    out = [{"role": "system", "content": request.system}] if request.system is not None else []
    for message in request.messages:
        out.extend(_messages(message))
    return out


def _messages(message: Message) -> list[dict[str, Any]]:
    """One canonical message as chat messages: its tool results first (each a "tool" message), then the rest."""
    blocks = message.content
    out: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": b.tool_call_id, "content": b.content}
        for b in blocks
        if isinstance(b, ToolResult)
    ]
    calls = [
        {"id": b.id, "type": "function", "function": {"name": b.name, "arguments": b.arguments}}
        for b in blocks
        if isinstance(b, ToolCall)
    ]
    parts = [part for b in blocks if (part := _part(b)) is not None]
    if parts or calls:
        chat: dict[str, Any] = {"role": "user" if message.role == "tool" else message.role, "content": _content(parts)}
        if calls:
            chat["tool_calls"] = calls
        out.append(chat)
    return out


def _part(block: Block) -> dict[str, Any] | None:
    if isinstance(block, Text):
        return {"type": "text", "text": block.text}
    if isinstance(block, Unknown) and block.format == "chat":
        return block.data
    return None


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]] | None:
    """A plain string when every part is text (what every compatible server accepts), else the parts."""
    if not parts:
        return None
    if all(part.get("type") == "text" and set(part) == {"type", "text"} for part in parts):
        return "".join(part["text"] for part in parts)
    return parts


def _tool(tool: Tool) -> dict[str, Any]:
    if tool.format == "chat":
        return tool.raw
    function = {"name": tool.name, **present(description=tool.description), "parameters": tool.parameters}
    return {"type": "function", "function": function}


def _result(choice: dict[str, Any], answer: dict[str, Any]) -> Result:
    message = choice.get("message") or {}
    content: list[Block] = []
    text = _text(message.get("content")) or message.get("refusal")
    if text:
        content.append(Text(text))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append(ToolCall(call.get("id") or "", function.get("name") or "", function.get("arguments") or ""))
    return Result(
        content=content,
        finish_reason=FINISH_REASONS.get(choice.get("finish_reason"), FinishReason.UNKNOWN),
        usage=_usage(answer.get("usage")),
        upstream_model=answer.get("model"),
    )


def _text(content: Any) -> str:
    if isinstance(content, list):  # some compatible servers answer with parts
        return "".join(part.get("text") or "" for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _usage(raw: Any) -> Usage:
    raw = raw if isinstance(raw, dict) else {}
    details = raw.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=raw.get("prompt_tokens"),
        output_tokens=raw.get("completion_tokens"),
        cached_input_tokens=details.get("cached_tokens"),
    )


class _ChunkReader:
    """Turns chat.completion.chunk objects into canonical events."""

    def __init__(self) -> None:
        self._started: set[int] = set()

    def read(self, chunk: dict[str, Any]) -> list[Event]:
        events: list[Event] = []
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            text = delta.get("content") or delta.get("refusal")
            if text:
                events.append(TextDelta(text))
            for call in delta.get("tool_calls") or []:
                events.extend(self._tool_call(call))
            if choice.get("finish_reason"):
                events.append(Finish(FINISH_REASONS.get(choice["finish_reason"], FinishReason.UNKNOWN)))
        if chunk.get("usage"):
            events.append(UsageReport(_usage(chunk["usage"])))
        return events

    def _tool_call(self, call: dict[str, Any]) -> list[Event]:
        """The first delta of a call carries its id and name; later ones only argument text."""
        index = call.get("index", 0)
        function = call.get("function") or {}
        events: list[Event] = []
        if index not in self._started:
            self._started.add(index)
            events.append(ToolCallStart(index, call.get("id") or f"call_{index}", function.get("name") or ""))
        if function.get("arguments"):
            events.append(ToolCallDelta(index, function["arguments"]))
        return events
