"""OpenAI Chat Completions, both ways: as callers send it (request in, chat.completion or chunk stream out) and as
an upstream speaks it (request out, chat.completion or chunk stream in)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from generated.models import ChatCompletionRequest, ChatMessage
from handlers.errors import ApiError, bad_request
from handlers.inference.canonical import (
    Answer,
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
from handlers.inference.formats.base import Traits, UpstreamFault, UpstreamOptions
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
    json_object,
    json_text,
    merge_extra,
    opt_bool,
    opt_float,
    opt_int,
    opt_str_list,
    other_tool,
    present,
    required_str,
    role_error,
    split_extra,
    sse,
    text_of,
    tool_choice,
    tool_list,
    whole,
)

_PLAIN = (FinishReason.STOP, FinishReason.LENGTH, FinishReason.TOOL_CALLS, FinishReason.CONTENT_FILTER)
FINISH_REASONS = {
    FinishReason.STOP: "stop",
    FinishReason.STOP_SEQUENCE: "stop",
    FinishReason.LENGTH: "length",
    FinishReason.TOOL_CALLS: "tool_calls",
    FinishReason.CONTENT_FILTER: "content_filter",
    FinishReason.UNKNOWN: "stop",
}
# The same words read back; "function_call" is the legacy word for tool calls.
_FINISH_READ = {word: reason for reason, word in FINISH_REASONS.items() if reason in _PLAIN} | {
    "function_call": FinishReason.TOOL_CALLS
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


def _read_usage(raw: Any) -> Usage:
    raw = raw if isinstance(raw, dict) else {}
    details = raw.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=raw.get("prompt_tokens"),
        output_tokens=raw.get("completion_tokens"),
        cached_input_tokens=details.get("cached_tokens"),
    )


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


# --- as an upstream's format ----------------------------------------------------------------------------------------

STREAM_FIELDS: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
STREAM_END = "[DONE]"
# A canonical tool choice in chat's words; "tool" names its tool in an object instead.
_CHOICE_WORDS = {mode: word for word, mode in OPENAI_CHOICES[0].items()}


def upstream_result(payload: dict[str, Any]) -> Result:
    choices = payload.get("choices")
    if not choices or not isinstance(choices[0], dict):
        raise UpstreamFault(payload=payload) if payload.get("error") else UpstreamFault(what="answered without choices")
    return _result(choices[0], payload)


def upstream_body(request: Request, model: str, options: UpstreamOptions, traits: Traits) -> dict[str, Any]:
    """The Chat Completions body for `request` (without the streaming fields)."""
    body: dict[str, Any] = {"model": model, "messages": _upstream_messages(request)}
    body.update(
        present(
            max_tokens=request.max_tokens,
            temperature=request.temperature,
            top_p=request.top_p,
            stop=request.stop,
            seed=request.seed,
        )
    )
    tools = [_upstream_tool(t) for t in request.tools or () if t.format == "chat" or t.portable]
    if tools:
        body["tools"] = tools
    choice = request.tool_choice
    if request.format == "chat":
        raw_choice = choice.raw if choice else None
        body.update(present(tool_choice=raw_choice, response_format=request.response_format))
        merge_extra(body, request.extra)
    elif tools and choice and choice.portable:  # OpenAI refuses a tool choice without tools
        body.update(_upstream_tool_choice(choice))
    return body


def _upstream_tool_choice(choice: ToolChoice) -> dict[str, Any]:
    """Another format's tool choice as chat's tool_choice, and "at most one call" as parallel_tool_calls."""
    named = {"type": "function", "function": {"name": choice.name}}
    return {"tool_choice": _CHOICE_WORDS.get(choice.mode or "", named), **present(parallel_tool_calls=choice.parallel)}


def _upstream_messages(request: Request) -> list[dict[str, Any]]:
    out = [{"role": "system", "content": request.system}] if request.system is not None else []
    for message in request.messages:
        out.extend(_upstream_message(message))
    return out


def _upstream_message(message: Message) -> list[dict[str, Any]]:
    """One canonical message as chat messages: its tool results first (each a "tool" message), then the rest."""
    blocks = message.content
    out: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": b.tool_call_id, "content": b.content}
        for b in blocks
        if isinstance(b, ToolResult)
    ]
    calls = [_call(b) for b in blocks if isinstance(b, ToolCall)]
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


def _upstream_tool(tool: Tool) -> dict[str, Any]:
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
        finish_reason=_FINISH_READ.get(choice.get("finish_reason"), FinishReason.UNKNOWN),
        usage=_read_usage(answer.get("usage")),
        upstream_model=answer.get("model"),
    )


def _text(content: Any) -> str:
    if isinstance(content, list):  # some compatible servers answer with parts
        return "".join(part.get("text") or "" for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


class UpstreamReader:
    """Turns chat.completion.chunk events into canonical events, until [DONE]."""

    def __init__(self) -> None:
        self.done = False
        self._started: set[int] = set()

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
            text = delta.get("content") or delta.get("refusal")
            if text:
                events.append(TextDelta(text))
            for call in delta.get("tool_calls") or []:
                events.extend(self._tool_call(call))
            if choice.get("finish_reason"):
                events.append(Finish(_FINISH_READ.get(choice["finish_reason"], FinishReason.UNKNOWN)))
        if chunk.get("usage"):
            events.append(UsageReport(_read_usage(chunk["usage"])))
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
