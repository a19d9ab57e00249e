"""OpenAI Responses: the request, the response object, the typed event stream and its errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from generated.models import Input, ResponsesInputItem, ResponsesRequest
from handlers.errors import ApiError
from handlers.inference.canonical import (
    Answer,
    FinishReason,
    Message,
    Request,
    Result,
    Role,
    Text,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolCallStart,
    ToolResult,
    Unknown,
    Usage,
)
from handlers.inference.formats.common import (
    OPENAI_CHOICES,
    PartReader,
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
    other_tool,
    required_str,
    role_error,
    split_extra,
    sse,
    text_of,
    text_part,
    tool_choice,
    tool_list,
    whole,
)

# Finish reason -> (status, incomplete_details).
STATUSES: dict[FinishReason, tuple[str, dict[str, str] | None]] = {
    FinishReason.STOP: ("completed", None),
    FinishReason.STOP_SEQUENCE: ("completed", None),
    FinishReason.LENGTH: ("incomplete", {"reason": "max_output_tokens"}),
    FinishReason.TOOL_CALLS: ("completed", None),
    FinishReason.CONTENT_FILTER: ("incomplete", {"reason": "content_filter"}),
    FinishReason.UNKNOWN: ("completed", None),
}

_ROLES: dict[str, Role] = {"user": "user", "assistant": "assistant"}
_SYSTEM_ROLES = frozenset({"system", "developer"})
_PARTS: dict[str, PartReader] = {"input_text": text_part, "output_text": text_part, "text": text_part}
_READ_EXTRA = ("top_p", "tools", "tool_choice")


# --- request -------------------------------------------------------------------------------------------------------


def parse(body: ResponsesRequest) -> Request:
    read, extra = split_extra(body, _READ_EXTRA)
    system, messages = _input(body.input)
    return Request(
        format="responses",
        messages=messages,
        system=join_system([body.instructions, *system]),
        instructions=body.instructions,
        model=body.model,
        effort=effort(body.reasoning.effort) if body.reasoning else None,
        max_tokens=whole(body.max_output_tokens, "max_output_tokens"),
        temperature=body.temperature,
        top_p=opt_float(read["top_p"]),
        stream=bool(body.stream),
        tools=tool_list(read["tools"], "responses", _tool),
        tool_choice=tool_choice(
            read["tool_choice"], "responses", OPENAI_CHOICES, ("name",), opt_bool(extra.get("parallel_tool_calls"))
        ),
        extra=extra,
    )


def _input(value: str | Input) -> tuple[list[str], list[Message]]:
    if isinstance(value, str):
        return [], [Message("user", [Text(value)])]
    system: list[str] = []
    out: list[Message] = []
    for i, item in enumerate(value.root):
        where = f"input.{i}"
        kind = (item.model_extra or {}).get("type", "message")
        if kind == "message" and item.role in _SYSTEM_ROLES:
            system.append(text_of(item.content, f"{where}.content", "responses", _PARTS))
            continue
        reader = _ITEMS.get(kind) if isinstance(kind, str) else None
        _append(out, reader(item, where) if reader else _unknown_item(item))
    return system, conversation(out, "input")


def _append(out: list[Message], message: Message) -> None:
    """Consecutive assistant items (messages, function calls, reasoning) are one assistant turn."""
    if message.role == "assistant" and out and out[-1].role == "assistant":
        out[-1].content.extend(message.content)
    else:
        out.append(message)


def _message_item(item: ResponsesInputItem, where: str) -> Message:
    role = _ROLES.get(item.role or "user")
    if role is None:
        raise role_error(item.role, where, ("user", "assistant", "system", "developer"))
    return Message(role, blocks(item.content, f"{where}.content", _PARTS, "responses"))


def _function_call(item: ResponsesInputItem, where: str) -> Message:
    fields = item.model_extra or {}
    call_id, name = required_str(fields, "call_id", where), required_str(fields, "name", where)
    return Message("assistant", [ToolCall(call_id, name, json_text(fields.get("arguments")))])


def _function_output(item: ResponsesInputItem, where: str) -> Message:
    fields = item.model_extra or {}
    output = text_of(fields.get("output"), f"{where}.output", "responses", _PARTS)
    return Message("tool", [ToolResult(required_str(fields, "call_id", where), output)])


def _unknown_item(item: ResponsesInputItem) -> Message:
    """Reasoning, built-in tool calls and the like: kept whole for a same-format upstream, in the assistant turn."""
    return Message("assistant", [Unknown(item.model_dump(exclude_unset=True), "responses")])


_ITEMS: dict[str, Callable[[ResponsesInputItem, str], Message]] = {
    "message": _message_item,
    "function_call": _function_call,
    "function_call_output": _function_output,
}


def _tool(raw: dict[str, Any], where: str) -> Tool:
    if raw.get("type") != "function":
        return other_tool(raw, "responses")
    return function_tool(raw, where, raw, "responses", "parameters")


# --- answer --------------------------------------------------------------------------------------------------------


def render(result: Result, answer: Answer, request: Request) -> dict[str, Any]:
    """The response object, echoing the request's settings as OpenAI does (instructions, temperature, tools...)."""
    text = result.text()
    calls = [block for block in result.content if isinstance(block, ToolCall)]
    output = [_message(f"msg_{answer.decision_id}", text, "completed")] if text or not calls else []
    for n, call in enumerate(calls):
        output.append(_call(f"fc_{answer.decision_id}_{n}", call.id, call.name, call.arguments, "completed"))
    return response(answer, output, result.finish_reason, result.usage, request)


def response(
    answer: Answer,
    output: list[dict[str, Any]],
    reason: FinishReason | None,
    usage: Usage | None,
    request: Request,
) -> dict[str, Any]:
    """The Response object with every field the SDK's type requires; reason None means still in progress."""
    status, incomplete = ("in_progress", None) if reason is None else STATUSES[reason]
    body: dict[str, Any] = {
        "id": f"resp_{answer.decision_id}",
        "object": "response",
        "created_at": answer.created,
        "status": status,
        "error": None,
        "incomplete_details": incomplete,
        "instructions": None,
        "max_output_tokens": None,
        "metadata": {},
        "model": answer.model,
        "output": output,
        "output_text": "".join(
            part["text"] for item in output if item["type"] == "message" for part in item["content"]
        ),
        "parallel_tool_calls": True,
        "temperature": None,
        "tool_choice": "auto",
        "tools": [],
        "top_p": None,
        "usage": None if usage is None else _usage(usage),
    }
    return body | _echo(request)


def _echo(request: Request) -> dict[str, Any]:
    echo: dict[str, Any] = {
        "instructions": request.instructions,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_output_tokens": request.max_tokens,
    }
    if request.format == "responses":  # tools and tool_choice of another format would not fit the Response type
        echo["tools"] = [tool.raw for tool in request.tools or []]
        choice = request.tool_choice
        if choice is not None and choice.raw is not None:
            echo["tool_choice"] = choice.raw
        if choice is not None and choice.parallel is not None:
            echo["parallel_tool_calls"] = choice.parallel
    return echo


def _usage(value: Usage) -> dict[str, Any]:
    return {
        "input_tokens": count(value.input_tokens),
        "input_tokens_details": {"cached_tokens": count(value.cached_input_tokens), "cache_write_tokens": 0},
        "output_tokens": count(value.output_tokens),
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": count(value.total_tokens),
    }


def _message(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": [_part(text)]}


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _call(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


# --- stream --------------------------------------------------------------------------------------------------------


class StreamRenderer(StreamState):
    """Typed events with a sequence number. One output item is open at a time; response.completed comes last."""

    def __init__(self, answer: Answer, request: Request) -> None:
        super().__init__()
        self._answer = answer
        self._request = request
        self._seq = 0
        self._output: list[dict[str, Any]] = []  # every item added, updated in place until it is done
        self._open: dict[str, Any] | None = None  # the open item, always the last of _output
        self._pieces: list[str] = []  # the open message's text
        self._calls: dict[int, tuple[int, dict[str, Any]]] = {}  # canonical index -> (output index, item)

    def start(self) -> bytes:
        created = {"response": response(self._answer, [], None, None, self._request)}
        return self._frame("response.created", created) + self._frame("response.in_progress", created)

    def finish(self) -> bytes:
        out = self._close()
        if not self._output:  # no text and no call: an empty message, so output_text is ""
            out += self._open_message() + self._close()
        done = response(self._answer, self._output, self.reason, self.usage, self._request)
        return out + self._frame("response.completed", {"response": done})

    def error(self, err: ApiError) -> bytes:
        # The flat fields are the Responses error event; the nested "error" object is what makes the SDK raise.
        body = {"code": err.code, "message": err.message, "param": err.param, "error": err.body()["error"]}
        return self._frame("error", body)

    def on_text(self, ev: TextDelta) -> bytes:
        if not ev.text:
            return b""
        out = b""
        if self._open is None or self._open["type"] != "message":
            out = self._close() + self._open_message()
        self._pieces.append(ev.text)
        return out + self._frame(
            "response.output_text.delta", {**self._at(), "content_index": 0, "delta": ev.text, "logprobs": []}
        )

    def on_call_start(self, ev: ToolCallStart) -> bytes:
        out = self._close()
        item = self._add(_call(f"fc_{self._answer.decision_id}_{len(self._calls)}", ev.id, ev.name, "", "in_progress"))
        self._calls[ev.index] = (len(self._output) - 1, item)
        return out + self._frame("response.output_item.added", {"output_index": len(self._output) - 1, "item": item})

    def on_call_delta(self, ev: ToolCallDelta) -> bytes:
        entry = self._calls.get(ev.index)
        if entry is None or not ev.arguments:
            return b""
        index, item = entry
        item["arguments"] += ev.arguments
        return self._frame(
            "response.function_call_arguments.delta",
            {"item_id": item["id"], "output_index": index, "delta": ev.arguments},
        )

    def _open_message(self) -> bytes:
        n = sum(1 for item in self._output if item["type"] == "message")
        item_id = f"msg_{self._answer.decision_id}" + (f"_{n}" if n else "")
        item = self._add({**_message(item_id, "", "in_progress"), "content": []})
        self._pieces = []
        added = self._frame("response.output_item.added", {"output_index": len(self._output) - 1, "item": item})
        return added + self._frame("response.content_part.added", {**self._at(), "content_index": 0, "part": _part("")})

    def _add(self, item: dict[str, Any]) -> dict[str, Any]:
        self._output.append(item)
        self._open = item
        return item

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        at, item = self._at(), self._open
        self._open = None
        item["status"] = "completed"
        if item["type"] == "message":
            text = "".join(self._pieces)
            item["content"] = [_part(text)]
            out = self._frame("response.output_text.done", {**at, "content_index": 0, "text": text, "logprobs": []})
            out += self._frame("response.content_part.done", {**at, "content_index": 0, "part": item["content"][0]})
        else:
            done = {**at, "arguments": item["arguments"], "name": item["name"]}
            out = self._frame("response.function_call_arguments.done", done)
        return out + self._frame("response.output_item.done", {"output_index": at["output_index"], "item": item})

    def _at(self) -> dict[str, Any]:
        """Where the open item is: its id and output index."""
        assert self._open is not None
        return {"item_id": self._open["id"], "output_index": len(self._output) - 1}

    def _frame(self, kind: str, data: dict[str, Any]) -> bytes:
        frame = sse({"type": kind, **data, "sequence_number": self._seq}, kind)
        self._seq += 1
        return frame
