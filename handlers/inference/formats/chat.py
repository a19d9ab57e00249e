"""OpenAI Chat Completions: the request, the chat.completion answer, the chunk stream and its errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from generated.models import ChatCompletionRequest, ChatMessage
from handlers.errors import ApiError, bad_request
from handlers.inference.canonical import (
    Answer,
    Block,
    FinishReason,
    Message,
    Request,
    Result,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolCallStart,
    ToolResult,
    Usage,
)
from handlers.inference.formats.common import (
    DONE,
    OPENAI_CHOICES,
    TEXT_PARTS,
    StreamState,
    blocks,
    conversation,
    count,
    effort,
    function_tool,
    join_system,
    json_text,
    opt_bool,
    opt_float,
    opt_int,
    opt_str_list,
    other_tool,
    required_str,
    role_error,
    split_extra,
    sse,
    text_of,
    tool_choice,
    tool_list,
    whole,
)

FINISH_REASONS = {
    FinishReason.STOP: "stop",
    FinishReason.STOP_SEQUENCE: "stop",
    FinishReason.LENGTH: "length",
    FinishReason.TOOL_CALLS: "tool_calls",
    FinishReason.CONTENT_FILTER: "content_filter",
    FinishReason.UNKNOWN: "stop",
}

_SYSTEM_ROLES = frozenset({"system", "developer"})
# model_extra fields this module reads; every other extra field is passed on in Request.extra.
_READ_EXTRA = ("top_p", "stop", "seed", "tool_choice")


# --- request -------------------------------------------------------------------------------------------------------


def parse(body: ChatCompletionRequest) -> Request:
    read, extra = split_extra(body, _READ_EXTRA)
    system, messages = _conversation(body.messages)
    return Request(
        format="chat",
        messages=messages,
        system=system,
        model=body.model,
        effort=effort(body.reasoning_effort),
        max_tokens=_max_tokens(body),
        temperature=body.temperature,
        top_p=opt_float(read["top_p"]),
        stop=opt_str_list(read["stop"]),
        seed=opt_int(read["seed"]),
        stream=bool(body.stream),
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        tools=tool_list(body.tools, "chat", _tool),
        # parallel_tool_calls stays in extra too: a chat upstream gets it as sent.
        tool_choice=tool_choice(
            read["tool_choice"],
            "chat",
            OPENAI_CHOICES,
            ("function", "name"),
            opt_bool(extra.get("parallel_tool_calls")),
        ),
        response_format=body.response_format,
        extra=extra,
    )


def _max_tokens(body: ChatCompletionRequest) -> int | None:
    if body.max_tokens is not None and body.max_completion_tokens is not None:
        raise bad_request("send max_tokens or max_completion_tokens, not both", "max_tokens")
    if body.max_completion_tokens is not None:
        return whole(body.max_completion_tokens, "max_completion_tokens")
    return whole(body.max_tokens, "max_tokens")


def _conversation(messages: list[ChatMessage]) -> tuple[str | None, list[Message]]:
    """System and developer messages become the system text, in order; the rest are the conversation."""
    system: list[str] = []
    out: list[Message] = []
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        if message.role in _SYSTEM_ROLES:
            system.append(text_of(message.content, f"{where}.content", "chat"))
            continue
        reader = _ROLES.get(message.role or "")
        if reader is None:
            raise role_error(message.role, where, ("system", "developer", *_ROLES))
        out.append(reader(message, where))
    return join_system(system), conversation(out, "messages")


def _user(message: ChatMessage, where: str) -> Message:
    return Message("user", blocks(message.content, f"{where}.content", TEXT_PARTS, "chat"))


def _assistant(message: ChatMessage, where: str) -> Message:
    content = blocks(message.content, f"{where}.content", TEXT_PARTS, "chat")
    return Message("assistant", content + _tool_calls((message.model_extra or {}).get("tool_calls"), where))


def _tool_message(message: ChatMessage, where: str) -> Message:
    # A tool message without its tool_call_id is the upstream's to refuse (OpenAI does; echo does not care).
    call_id = (message.model_extra or {}).get("tool_call_id")
    call_id = call_id if isinstance(call_id, str) else ""
    return Message("tool", [ToolResult(call_id, text_of(message.content, f"{where}.content", "chat"))])


_ROLES: dict[str, Callable[[ChatMessage, str], Message]] = {
    "user": _user,
    "assistant": _assistant,
    "tool": _tool_message,
}


def _tool_calls(raw: Any, where: str) -> list[Block]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise bad_request(f"{where}.tool_calls must be a list", f"{where}.tool_calls")
    return [_tool_call(call, f"{where}.tool_calls.{j}") for j, call in enumerate(raw)]


def _tool_call(call: Any, where: str) -> ToolCall:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        raise bad_request(f"{where} must be an object with a function", f"{where}.function")
    call_id = call.get("id")
    name = required_str(function, "name", f"{where}.function")
    return ToolCall(call_id if isinstance(call_id, str) else "", name, json_text(function.get("arguments")))


def _tool(raw: dict[str, Any], where: str) -> Tool:
    if raw.get("type", "function") != "function":
        return other_tool(raw, "chat")
    function = raw.get("function")
    if not isinstance(function, dict):
        return other_tool(raw, "chat")
    return function_tool(function, f"{where}.function", raw, "chat", "parameters")


# --- answer --------------------------------------------------------------------------------------------------------


def render(result: Result, answer: Answer, request: Request) -> dict[str, Any]:
    calls = [_call(block) for block in result.content if isinstance(block, ToolCall)]
    text = result.text()
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    choice = {"index": 0, "message": message, "finish_reason": FINISH_REASONS[result.finish_reason], "logprobs": None}
    return {
        "id": f"chatcmpl-{answer.decision_id}",
        "object": "chat.completion",
        "created": answer.created,
        "model": answer.model,
        "choices": [choice],
        "usage": usage(result.usage),
    }


def _call(block: ToolCall) -> dict[str, Any]:
    return {"id": block.id, "type": "function", "function": {"name": block.name, "arguments": block.arguments}}


def usage(value: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": count(value.input_tokens),
        "completion_tokens": count(value.output_tokens),
        "total_tokens": count(value.total_tokens),
        "prompt_tokens_details": {"cached_tokens": count(value.cached_input_tokens)},
    }


# --- stream --------------------------------------------------------------------------------------------------------


class StreamRenderer(StreamState):
    """chat.completion.chunk events, then [DONE]. No `event:` lines: the OpenAI SDKs read bare `data:` frames."""

    def __init__(self, answer: Answer, request: Request) -> None:
        super().__init__()
        self._head = {
            "id": f"chatcmpl-{answer.decision_id}",
            "object": "chat.completion.chunk",
            "created": answer.created,
            "model": answer.model,
        }
        self._include_usage = request.include_usage
        # Canonical tool-call index -> the chat index. The SDK keeps tool calls in a list, so they count from 0.
        self._calls: dict[int, int] = {}

    def start(self) -> bytes:
        return self._chunk({"role": "assistant", "content": ""})

    def finish(self) -> bytes:
        out = self._chunk({}, FINISH_REASONS[self.reason])
        if self._include_usage:
            out += sse({**self._head, "choices": [], "usage": usage(self.usage)})
        return out + DONE

    def error(self, err: ApiError) -> bytes:
        # A bare {"error": ...} is what makes the OpenAI SDKs raise mid-stream; nothing may follow it.
        return sse({"error": err.body()["error"]})

    def on_text(self, ev: TextDelta) -> bytes:
        return self._chunk({"content": ev.text}) if ev.text else b""

    def on_call_start(self, ev: ToolCallStart) -> bytes:
        index = self._calls.setdefault(ev.index, len(self._calls))
        call = {"index": index, "id": ev.id, "type": "function", "function": {"name": ev.name, "arguments": ""}}
        return self._chunk({"tool_calls": [call]})

    def on_call_delta(self, ev: ToolCallDelta) -> bytes:
        index = self._calls.get(ev.index)
        if index is None or not ev.arguments:
            return b""
        return self._chunk({"tool_calls": [{"index": index, "function": {"arguments": ev.arguments}}]})

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        return sse({**self._head, "choices": [choice]})
