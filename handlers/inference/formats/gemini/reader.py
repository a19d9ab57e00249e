"""A Gemini upstream's answer read back into canonical: a GenerateContentResponse, or the chunks of
streamGenerateContent (alt=sse: each event's data is a GenerateContentResponse holding what is new).

The first candidate is the answer (the gateway never asks for more). Gemini says STOP for a turn that ends in
function calls: canonical says tool_calls. Its function calls may have no id (the Gemini API gives none, Vertex AI
some): the reader gives each one, which Gemini takes back on the functionCall and the functionResponse.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

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
    Unknown,
    UsageReport,
)
from handlers.inference.formats.base import UpstreamFault
from handlers.inference.formats.common import json_object, unread
from handlers.inference.formats.gemini.vocabulary import FINISH_READ, KIND, read_usage

_PART_KINDS = ("text", "functionCall", "inlineData", "fileData", "executableCode", "codeExecutionResult",
               "functionResponse")


def upstream_result(payload: dict[str, Any]) -> Result:
    _fault(payload)
    candidate = _candidate(payload)
    if candidate is None and not isinstance(payload.get("promptFeedback"), dict):
        raise UpstreamFault(what="answered without candidates")
    parts = _parts(candidate)
    content: list[Block] = [block for part in parts for block in _blocks(part)]
    calls = any(isinstance(b, ToolCall) for b in content)
    return Result(content=content, finish_reason=_finish(candidate, calls), usage=read_usage(payload.get("usageMetadata")),
                  upstream_model=payload.get("modelVersion") if isinstance(payload.get("modelVersion"), str) else None)


def _fault(payload: dict[str, Any]) -> None:
    """An error object (in a stream, an event of its own) as the upstream's error, with its status word as its
    type (vocabulary.ERROR_STATUSES gives its HTTP status)."""
    error = payload.get("error")
    if isinstance(error, dict):
        status = error.get("status") or error.get("code") or "INTERNAL"
        raise UpstreamFault(payload={"error": {"type": str(status), "message": error.get("message") or str(status)}})


def _candidate(payload: dict[str, Any]) -> dict[str, Any] | None:
    candidates = payload.get("candidates")
    first = candidates[0] if isinstance(candidates, list) and candidates else None
    return first if isinstance(first, dict) else None


def _parts(candidate: dict[str, Any] | None) -> list[dict[str, Any]]:
    content = candidate.get("content") if candidate else None
    parts = content.get("parts") if isinstance(content, dict) else None
    return [part for part in parts if isinstance(part, dict)] if isinstance(parts, list) else []


def _blocks(part: dict[str, Any]) -> list[Block]:
    """One part as canonical blocks: its thought signature first (a Thinking block of its own), then what it is. A
    thought summary is a Thinking block with the text; a part canonical does not model is kept as it came."""
    signature = part.get("thoughtSignature") if isinstance(part.get("thoughtSignature"), str) else None
    signed: list[Block] = [Thinking("", signature=signature, format="gemini")] if signature else []
    text = part.get("text")
    if isinstance(text, str) and part.get("thought") is True:
        return [Thinking(text, format="gemini"), *signed]
    if isinstance(text, str):
        return [*signed, Text(text)]
    call = part.get("functionCall")
    if isinstance(call, dict):
        arguments = orjson.dumps(call.get("args") or {}).decode()
        return [*signed, ToolCall(_call_id(call), str(call.get("name") or ""), arguments)]
    kind = next((k for k in _PART_KINDS if k in part), None)
    if kind is None:
        unread("gemini", "part", ",".join(sorted(part)) or "empty")  # type: ignore[arg-type]
    return [*signed, Unknown(part, "gemini")]


def _call_id(call: dict[str, Any]) -> str:
    given = call.get("id")
    return given if isinstance(given, str) and given else f"call_{uuid.uuid4().hex[:24]}"


def _finish(candidate: dict[str, Any] | None, calls: bool) -> FinishReason:
    """How the answer ended: a prompt refused before any candidate is a content filter's doing."""
    if candidate is None:
        return FinishReason.CONTENT_FILTER
    word = candidate.get("finishReason")
    reason = FINISH_READ.get(word, FinishReason.UNKNOWN) if isinstance(word, str) else FinishReason.UNKNOWN
    return FinishReason.TOOL_CALLS if calls and reason is FinishReason.STOP else reason


class UpstreamReader:
    """Turns streamGenerateContent chunks into canonical events, until the chunk whose candidate says how it finished
    (the stream's last: it carries the whole usage). Gemini streams a function call whole, in one part."""

    def __init__(self) -> None:
        self.done = False
        self._calls = 0
        self._usage: Any = None

    def read(self, event: str, data: str) -> list[Event]:
        payload = json_object(data)
        _fault(payload)
        if payload.get("usageMetadata") is not None:
            self._usage = payload["usageMetadata"]
        candidate = _candidate(payload)
        out: list[Event] = []
        for part in _parts(candidate):
            out.extend(self._part(part))
        blocked = candidate is None and isinstance(payload.get("promptFeedback"), dict) and \
            payload["promptFeedback"].get("blockReason")
        if blocked or (candidate is not None and candidate.get("finishReason")):
            self.done = True
            out.append(Finish(_finish(candidate if not blocked else None, self._calls > 0)))
            out.append(UsageReport(read_usage(self._usage)))
        return out

    def _part(self, part: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        for block in _blocks(part):
            if isinstance(block, Thinking):
                out.append(ThinkingDelta(block.text, signature=block.signature, format="gemini"))
            elif isinstance(block, Text):
                out += [TextDelta(block.text)] if block.text else []
            elif isinstance(block, ToolCall):
                out += [ToolCallStart(self._calls, block.id, block.name), ToolCallDelta(self._calls, block.arguments)]
                self._calls += 1
            # a part canonical does not model (an image, code Gemini ran ...) has no stream event: left out of a
            # stream, kept in a whole answer (see upstream_result)
        return out


__all__ = ["KIND", "UpstreamReader", "upstream_result"]
