"""OpenAI Responses as an upstream answers: a Response object, or its typed event stream, into canonical."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallStart,
    Unknown,
    UsageReport,
)
from handlers.inference.formats.base import UpstreamFault
from handlers.inference.formats.common import json_object, opt_int, str_or_empty, str_or_none, unread
from handlers.inference.formats.responses.vocabulary import INCOMPLETE, read_usage

# Error codes of a failed response (ResponseError.code) that are the request's fault; the rest are the upstream's.
_CALLER_CODES = frozenset({"bio_policy", "misalignment_policy_violation", "empty_image_file", "failed_to_download_image",
                           "unsupported_image_media_type", "data_residency_mismatch"})  # fmt: skip
_QUOTA_CODES = {"rate_limit_exceeded": "rate_limit_error", "insufficient_quota": "insufficient_quota"}


_CALLS = frozenset({"function_call", "custom_tool_call"})  # items that are tool calls of the caller's tools
_PARTS = frozenset({"output_text", "refusal", "text"})  # a message's parts (text: some compatible servers')


def _arguments_of(item: dict[str, Any]) -> str:
    """A function call's arguments (JSON text), or a custom tool call's input (free-form text)."""
    return str_or_empty(item.get("input" if item.get("type") == "custom_tool_call" else "arguments"))


def upstream_result(payload: dict[str, Any]) -> Result:
    if payload.get("error") or payload.get("status") == "failed":
        raise fault(payload.get("error"))
    output = payload.get("output")
    if not isinstance(output, list):
        raise UpstreamFault(what="answered without output")
    content = [block for item in output if isinstance(item, dict) for block in _blocks(item)]
    calls = any(isinstance(block, ToolCall) for block in content)
    return Result(
        content=content,
        finish_reason=finish_reason(payload, calls),
        usage=read_usage(payload.get("usage")),
        upstream_model=payload.get("model"),
    )


def _blocks(item: dict[str, Any]) -> list[Block]:
    kind = item.get("type")
    if kind == "message":
        return [text for part in item.get("content") or [] if (text := _part(part)) is not None]
    if kind in _CALLS:
        return [ToolCall(str_or_empty(item.get("call_id")), str_or_empty(item.get("name")), _arguments_of(item),
                         custom=kind == "custom_tool_call", namespace=str_or_none(item.get("namespace")))]
    if kind == "reasoning":
        return [Thinking(_reasoning_text(item), encrypted=item.get("encrypted_content"), id=item.get("id"),
                         format="responses")]  # fmt: skip
    return [Unknown(item, "responses")]  # built-in tool calls and the like, for a Responses caller


def _part(part: Any) -> Text | None:
    """An output_text part with its annotations, or a refusal part; None for an empty one. A part of another type
    with no text (none that OpenAI's spec lists) is counted and logged as unread."""
    text = _part_text(part)
    annotations = part.get("annotations") if isinstance(part, dict) else None
    if not text and not annotations:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in _PARTS:
            _unknown(f"message part {kind}" if isinstance(kind, str) else "message part", "part")
        return None
    refusal = part.get("type") == "refusal"
    return Text(text, refusal=refusal, annotations=annotations if isinstance(annotations, list) and annotations else None)


def _part_text(part: Any) -> str:
    """An output_text part's text, or a refusal's words (what chat readers take as the answer too)."""
    if not isinstance(part, dict):
        return ""
    return str_or_empty(part.get("text") if part.get("type") != "refusal" else part.get("refusal"))


def _reasoning_text(item: dict[str, Any]) -> str:
    """The summary parts, one blank line apart; or, from servers that show raw reasoning, the reasoning text."""
    texts = [_part_text(part) for part in item.get("summary") or []] or [
        _part_text(part) for part in item.get("content") or []
    ]
    return "\n\n".join(text for text in texts if text)


def finish_reason(response: dict[str, Any], calls: bool) -> FinishReason:
    status = response.get("status")
    if status == "incomplete":
        reason = (response.get("incomplete_details") or {}).get("reason")
        return INCOMPLETE.get(str_or_empty(reason), FinishReason.UNKNOWN)
    if status in ("completed", None):
        return FinishReason.TOOL_CALLS if calls else FinishReason.STOP
    return FinishReason.UNKNOWN


def fault(error: Any) -> UpstreamFault:
    """A failed response or an error event as the error payload the transport reads: {"error": {type, message}},
    with a type that tells whose fault it was (OpenAI names only a code)."""
    error = error if isinstance(error, dict) else {}
    message = error.get("message") if isinstance(error.get("message"), str) else "the upstream failed the response"
    return UpstreamFault(payload={"error": {**error, "type": _error_type(error), "message": message}})


def _error_type(error: dict[str, Any]) -> str:
    kind, code = error.get("type"), error.get("code")
    if isinstance(kind, str) and kind not in ("", "error"):  # "error" is the event's own type, not the error's
        return kind
    code = code if isinstance(code, str) else ""
    if code in _QUOTA_CODES:
        return _QUOTA_CODES[code]
    if code.startswith(("invalid_", "image_")) or code in _CALLER_CODES:
        return "invalid_request_error"
    return "server_error"


class UpstreamReader:
    """Turns a Responses event stream into canonical events, until response.completed (or response.incomplete).

    Text, refusals, function-call arguments, custom tool input and reasoning summaries come as deltas; an item's done
    event fills in what came without them (and brings a reasoning item's encrypted content); an item canonical does
    not model opens (ItemStart), tells its own events (ItemProgress) and comes whole with its done event (ItemDone),
    for a Responses caller. Every event type OpenAI's spec lists is in HANDLED or
    IGNORED; any other is counted and logged (specway_upstream_unread), and loses nothing the done events carry.
    Tool calls are keyed by their output index."""

    def __init__(self) -> None:
        self.done = False
        self._calls: dict[int, bool] = {}  # output index of each function call -> its arguments came as deltas
        self._said: set[str] = set()  # items whose text or summary came as deltas
        self._annotated: set[str] = set()  # messages whose annotations came as events
        self._summaries: dict[str, int] = {}  # reasoning item -> the summary part its deltas are in

    def read(self, event: str, data: str) -> list[Event]:
        payload = json_object(data)
        kind = payload.get("type")
        kind = kind if isinstance(kind, str) else event
        handler = HANDLED.get(kind)
        if handler is not None:
            return handler(self, payload)
        if kind not in IGNORED:
            _unknown(kind)
        return []

    def _added(self, payload: dict[str, Any]) -> list[Event]:
        item, index = _item(payload), _index(payload)
        if item.get("type") in _CALLS:
            return self._call_start(index, item)
        if item.get("type") == "reasoning":  # a reasoning item opens; its id marks its thinking as OpenAI's own
            return [ThinkingDelta(id=str_or_empty(item.get("id")) or None, format="responses")]
        if item.get("type") == "message":
            return []
        return [ItemStart(Unknown(item, "responses"))]  # a built-in tool's call and the like, for a Responses caller

    def _progress(self, payload: dict[str, Any]) -> list[Event]:
        """An event of a built-in tool's item (its progress, a piece of it), for a Responses caller."""
        return [ItemProgress({k: v for k, v in payload.items() if k != "sequence_number"}, "responses")]

    def _call_start(self, index: int, item: dict[str, Any]) -> list[Event]:
        """A function or custom tool call opens; its arguments (or input) may come whole with it."""
        self._calls[index] = False
        start = ToolCallStart(index, str_or_empty(item.get("call_id")), str_or_empty(item.get("name")),
                              custom=item.get("type") == "custom_tool_call", namespace=str_or_none(item.get("namespace")))
        events: list[Event] = [start]
        if arguments := _arguments_of(item):
            self._calls[index] = True
            events.append(ToolCallDelta(index, arguments))
        return events

    def _text(self, payload: dict[str, Any]) -> list[Event]:
        self._said.add(str_or_empty(payload.get("item_id")))
        refusal = payload.get("type") == "response.refusal.delta"
        return [TextDelta(payload["delta"], refusal=refusal)] if str_or_empty(payload.get("delta")) else []

    def _annotation(self, payload: dict[str, Any]) -> list[Event]:
        annotation = payload.get("annotation")
        if not isinstance(annotation, dict):
            return []
        self._annotated.add(str_or_empty(payload.get("item_id")))
        return [TextDelta("", annotation=annotation)]

    def _arguments(self, payload: dict[str, Any]) -> list[Event]:
        index = _index(payload)
        if index not in self._calls or not str_or_empty(payload.get("delta")):
            return []
        self._calls[index] = True
        return [ToolCallDelta(index, payload["delta"])]

    def _summary(self, payload: dict[str, Any]) -> list[Event]:
        """A summary's text; a later summary part of the same item is one blank line after the one before."""
        item_id, delta = str_or_empty(payload.get("item_id")), str_or_empty(payload.get("delta"))
        part = opt_int(payload.get("summary_index")) or 0
        gap = "\n\n" if item_id in self._summaries and self._summaries[item_id] != part else ""
        self._summaries[item_id] = part
        return self._thinking(item_id, gap + delta)

    def _reasoning(self, payload: dict[str, Any]) -> list[Event]:
        """Raw reasoning text, from servers that show it (gpt-oss behind vLLM ...)."""
        return self._thinking(str_or_empty(payload.get("item_id")), str_or_empty(payload.get("delta")))

    def _thinking(self, item_id: str, text: str) -> list[Event]:
        if not text:
            return []
        self._said.add(item_id)
        return [ThinkingDelta(text, id=item_id or None, format="responses")]

    def _item_done(self, payload: dict[str, Any]) -> list[Event]:
        item = _item(payload)
        reader = _DONE.get(str_or_empty(item.get("type")))
        if reader is None:  # a built-in tool's call and the like: whole, for a Responses caller
            return [ItemDone(Unknown(item, "responses"))]
        return reader(self, item, _index(payload))

    def _call_done(self, item: dict[str, Any], index: int) -> list[Event]:
        events = [] if index in self._calls else self._call_start(index, item)
        if not self._calls[index] and (arguments := _arguments_of(item)):
            events.append(ToolCallDelta(index, arguments))
        return events

    def _reasoning_done(self, item: dict[str, Any], index: int) -> list[Event]:
        item_id = str_or_empty(item.get("id"))
        text = "" if item_id in self._said else _reasoning_text(item)
        encrypted = item.get("encrypted_content")
        if not text and not isinstance(encrypted, str):
            return []
        return [ThinkingDelta(text, encrypted=encrypted, id=item_id or None, format="responses")]

    def _message_done(self, item: dict[str, Any], index: int) -> list[Event]:
        """What of a message came without deltas: its parts' text (or refusal), its annotations."""
        item_id = str_or_empty(item.get("id"))
        events: list[Event] = []
        for part in item.get("content") or []:
            text = _part(part)
            if text is None:
                continue
            if item_id not in self._said and text.text:
                events.append(TextDelta(text.text, refusal=text.refusal))
            if item_id not in self._annotated:
                events += [TextDelta("", annotation=a) for a in text.annotations or [] if isinstance(a, dict)]
        return events

    def _end(self, payload: dict[str, Any]) -> list[Event]:
        self.done = True
        response = payload.get("response")
        response = response if isinstance(response, dict) else {}
        events: list[Event] = [Finish(finish_reason(response, bool(self._calls)))]
        if response.get("usage"):
            events.append(UsageReport(read_usage(response["usage"])))
        return events

    def _failed(self, payload: dict[str, Any]) -> list[Event]:
        response = payload.get("response")
        raise fault(response.get("error") if isinstance(response, dict) else None)

    def _error(self, payload: dict[str, Any]) -> list[Event]:
        error = payload.get("error")
        raise fault(error if isinstance(error, dict) else payload)


def _item(payload: dict[str, Any]) -> dict[str, Any]:
    item = payload.get("item")
    return item if isinstance(item, dict) else {}


def _index(payload: dict[str, Any]) -> int:
    return opt_int(payload.get("output_index")) or 0


def _unknown(kind: str, what: str = "event") -> None:
    """An event type (or a message part) OpenAI's spec did not list when the reader was written."""
    unread("responses", what, kind)


_DONE: dict[str, Callable[[UpstreamReader, dict[str, Any], int], list[Event]]] = {
    "function_call": UpstreamReader._call_done,
    "custom_tool_call": UpstreamReader._call_done,
    "reasoning": UpstreamReader._reasoning_done,
    "message": UpstreamReader._message_done,
}

# The event types read into canonical events.
HANDLED: dict[str, Callable[[UpstreamReader, dict[str, Any]], list[Event]]] = {
    "response.output_item.added": UpstreamReader._added,
    "response.output_text.delta": UpstreamReader._text,
    "response.refusal.delta": UpstreamReader._text,
    "response.output_text.annotation.added": UpstreamReader._annotation,
    "response.function_call_arguments.delta": UpstreamReader._arguments,
    "response.custom_tool_call_input.delta": UpstreamReader._arguments,
    "response.reasoning_summary_text.delta": UpstreamReader._summary,
    "response.reasoning_text.delta": UpstreamReader._reasoning,
    "response.output_item.done": UpstreamReader._item_done,
    "response.completed": UpstreamReader._end,
    "response.incomplete": UpstreamReader._end,
    "response.failed": UpstreamReader._failed,
    "error": UpstreamReader._error,
    # a built-in tool's item: its progress and its pieces, relayed to a Responses caller (the item comes whole with
    # response.output_item.done, which is all another format's caller could be told of it)
    **{f"response.{tool}.{step}": UpstreamReader._progress for tool, steps in {
        "web_search_call": ("in_progress", "searching", "completed"),
        "file_search_call": ("in_progress", "searching", "completed"),
        "code_interpreter_call": ("in_progress", "interpreting", "completed"),
        "code_interpreter_call_code": ("delta", "done"),
        "image_generation_call": ("in_progress", "generating", "partial_image", "completed"),
        "mcp_call": ("in_progress", "completed", "failed"),
        "mcp_call_arguments": ("delta", "done"),
        "mcp_list_tools": ("in_progress", "completed", "failed"),
        "shell_call_command": ("added", "delta", "done"),
        "shell_call_output_content": ("delta", "done"),
    }.items() for step in steps},
}  # fmt: skip

_WHOLE = "the whole of what its deltas carried; output_item.done fills in what came without them"
# The event types read on purpose into nothing, and why nothing of the answer is lost with them.
IGNORED: dict[str, str] = {
    "response.created": "the response starts: nothing of the answer yet (its id and model are the gateway's own)",
    "response.in_progress": "progress: nothing of the answer in it",
    "response.queued": "progress: nothing of the answer in it",
    "response.content_part.added": "a part opens empty; its text comes as deltas",
    "response.content_part.done": _WHOLE,
    "response.output_text.done": _WHOLE,
    "response.refusal.done": _WHOLE,
    "response.function_call_arguments.done": _WHOLE,
    "response.custom_tool_call_input.done": _WHOLE,
    "response.reasoning_summary_part.added": "a summary part opens empty; its deltas carry summary_index",
    "response.reasoning_summary_part.done": _WHOLE,
    "response.reasoning_summary_text.done": _WHOLE,
    "response.reasoning_text.done": _WHOLE,
    "response.audio.delta": "audio output: no Responses request asks for it (the API has no output modality field)",
    "response.audio.done": "audio output: no Responses request asks for it",
    "response.audio.transcript.delta": "audio output: no Responses request asks for it",
    "response.audio.transcript.done": "audio output: no Responses request asks for it",
}
