"""The canonical conversation: every wire format parses into it, every upstream kind speaks from it.

n formats + m upstream kinds are n + m adapters because everything meets here.
Usage counts are optional on purpose: "not reported" (None) is not 0.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal

Format = Literal["chat", "responses", "messages"]
Role = Literal["user", "assistant", "tool"]
ToolChoiceMode = Literal["auto", "none", "required", "tool"]


class FinishReason(str, enum.Enum):
    STOP = "stop"
    STOP_SEQUENCE = "stop_sequence"  # one of the caller's stop sequences; a stop wherever a format has no word for it
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"
    CONTENT_FILTER = "content_filter"
    UNKNOWN = "unknown"


@dataclass(slots=True)
class Text:
    text: str


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI carries it


@dataclass(slots=True)
class ToolResult:
    tool_call_id: str
    content: str


@dataclass(slots=True)
class Unknown:
    """A block we do not model; kept so a same-format upstream can receive it untouched."""

    data: dict[str, Any]
    format: Format


Block = Text | ToolCall | ToolResult | Unknown


@dataclass(slots=True)
class Message:
    role: Role
    content: list[Block]

    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, Text))


@dataclass(slots=True)
class Tool:
    name: str
    description: str | None
    parameters: dict[str, Any]
    raw: Any  # the tool as the caller wrote it, forwarded verbatim to a same-format upstream
    format: Format

    @property
    def portable(self) -> bool:
        """A function tool another format can offer; other tools (name "") reach same-format upstreams only."""
        return bool(self.name)


@dataclass(slots=True)
class ToolChoice:
    """tool_choice as every format can say it; `raw` is forwarded verbatim to a same-format upstream."""

    mode: ToolChoiceMode | None  # None: a choice only its own format can say (allowed_tools, a built-in tool...)
    raw: Any  # as the caller wrote it; None when the caller set only parallel tool use
    format: Format
    name: str | None = None  # the tool, when mode is "tool"
    parallel: bool | None = None  # False: at most one tool call; None: not said

    @property
    def portable(self) -> bool:
        return self.mode is not None


@dataclass(slots=True)
class Request:
    """One inference request, whatever format it arrived in."""

    format: Format
    messages: list[Message]
    system: str | None = None
    instructions: str | None = None  # Responses instructions as given (they are also part of system), for the echo
    model: str | None = None  # as requested: a model id, an alias, or None
    effort: str | None = None  # normalised to lower case: minimal | low | medium | high (or the caller's word)
    thinking_budget: int | None = None  # Anthropic thinking.budget_tokens; routing maps it to an effort tier
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] | None = None
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False  # chat stream_options.include_usage
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    response_format: dict[str, Any] | None = None  # verbatim (chat)
    extra: dict[str, Any] = field(default_factory=dict)  # unread fields, for a same-format upstream


@dataclass(slots=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None

    @property
    def total_tokens(self) -> int | None:
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)


@dataclass(slots=True)
class Result:
    """A whole answer from an upstream."""

    content: list[Block]
    finish_reason: FinishReason
    usage: Usage
    upstream_model: str | None = None
    stop_sequence: str | None = None  # the stop sequence matched, when the upstream says which

    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, Text))


# Stream events, in the order an upstream produces them. Tool calls are keyed by their index.


@dataclass(slots=True)
class TextDelta:
    text: str


@dataclass(slots=True)
class ToolCallStart:
    index: int
    id: str
    name: str


@dataclass(slots=True)
class ToolCallDelta:
    index: int
    arguments: str


@dataclass(slots=True)
class Finish:
    reason: FinishReason
    stop_sequence: str | None = None


@dataclass(slots=True)
class UsageReport:
    usage: Usage


Event = TextDelta | ToolCallStart | ToolCallDelta | Finish | UsageReport


@dataclass(slots=True)
class Answer:
    """What a wire renderer needs besides the result: ids and names the caller sees."""

    decision_id: str
    model: str  # the catalog's public id, never the upstream's own name
    created: int


def fold(events: list[Event]) -> Result:
    """Fold a stream back into a whole result (used for metering and tests)."""
    text: list[str] = []
    calls: dict[int, ToolCall] = {}
    finish = Finish(FinishReason.UNKNOWN)
    usage = Usage()
    for ev in events:
        if isinstance(ev, TextDelta):
            text.append(ev.text)
        elif isinstance(ev, ToolCallStart):
            calls[ev.index] = ToolCall(ev.id, ev.name, "")
        elif isinstance(ev, ToolCallDelta) and ev.index in calls:
            calls[ev.index].arguments += ev.arguments
        elif isinstance(ev, Finish):
            finish = ev
        elif isinstance(ev, UsageReport):
            usage = ev.usage
    content: list[Block] = [Text("".join(text))] if text else []
    content.extend(calls[i] for i in sorted(calls))
    return Result(content=content, finish_reason=finish.reason, usage=usage, stop_sequence=finish.stop_sequence)
