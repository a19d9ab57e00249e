"""The canonical conversation: every wire format parses into it, every upstream kind speaks from it.

n formats + m upstream kinds are n + m adapters because everything meets here.
Usage counts are optional on purpose: "not reported" (None) is not 0.
"""

from __future__ import annotations

import base64
import enum
from dataclasses import dataclass, field
from typing import Any, Literal

Format = Literal["chat", "responses", "messages", "gemini"]  # the formats callers speak
# Every format the gateway speaks: the callers' formats, and those only an upstream speaks (Bedrock's Converse).
Dialect = Literal["chat", "responses", "messages", "gemini", "converse"]
Role = Literal["user", "assistant", "tool", "system"]  # system: an instruction at its place in the conversation
ToolChoiceMode = Literal["auto", "none", "required", "tool"]


class FinishReason(str, enum.Enum):
    STOP = "stop"
    STOP_SEQUENCE = "stop_sequence"  # one of the caller's stop sequences; a stop wherever a format has no word for it
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"
    CONTENT_FILTER = "content_filter"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class CacheMark:
    """A prompt-cache breakpoint on a block (Anthropic's cache_control); ttl "5m" or "1h" when the caller said."""

    ttl: str | None = None


@dataclass(slots=True)
class Text:
    text: str
    cache: CacheMark | None = None
    refusal: bool = False  # the model's refusal in words (OpenAI's refusal); text wherever a format has no word for it
    annotations: list[dict[str, Any]] | None = None  # OpenAI Responses' own (url citations ...), for its callers
    # Anthropic's own, of its text block as a whole; a Responses caller gets those with a URL (formats/citations.py)
    citations: list[dict[str, Any]] | None = None


@dataclass(slots=True)
class Image:
    """An image: a URL (https), or base64 `data` with its `media_type`, or a file the caller uploaded to the
    provider of `format` (only that provider knows `file_id`)."""

    url: str | None = None
    data: str | None = None
    media_type: str | None = None
    detail: str | None = None  # OpenAI's low | high | auto
    file_id: str | None = None
    cache: CacheMark | None = None
    # its place in the caller's request (input.0.content.1), for a refusal to name; not part of what it is
    where: str | None = field(default=None, compare=False)


@dataclass(slots=True)
class Document:
    """A file given to the model (a PDF, or plain text): base64 `data` with its media type, a plain `text`, a URL, or
    a file id."""

    data: str | None = None
    media_type: str | None = None
    url: str | None = None
    filename: str | None = None
    file_id: str | None = None
    cache: CacheMark | None = None
    text: str | None = None  # a plain-text document as text (Anthropic's text source), media type text/plain
    where: str | None = field(default=None, compare=False)  # its place in the caller's request, for refusals

    def base64(self) -> str | None:
        """The document's content as base64, for the formats that carry files only that way."""
        if self.data is not None or self.text is None:
            return self.data
        return base64.b64encode(self.text.encode()).decode()


@dataclass(slots=True)
class Thinking:
    """Reasoning the model showed. It goes back only to the provider that made it (`format`): Anthropic checks its
    `signature` (or takes `redacted` data back); OpenAI Responses takes its `encrypted` content and item `id`. The
    rule, and what the decision record says of what it leaves out, is formats/reasoning.py."""

    text: str
    signature: str | None = None
    redacted: str | None = None
    encrypted: str | None = None
    id: str | None = None
    format: Dialect | None = None


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI carries it; a custom tool's input text as it is
    cache: CacheMark | None = None
    custom: bool = False  # a call of a custom tool (free-form input)
    namespace: str | None = None  # the namespace of the tool called, when it is in one


@dataclass(slots=True)
class ToolResult:
    tool_call_id: str
    content: str
    cache: CacheMark | None = None
    is_error: bool = False


@dataclass(slots=True)
class Unknown:
    """A block we do not model; kept so a same-format upstream can receive it untouched."""

    data: dict[str, Any]
    format: Dialect
    where: str | None = field(default=None, compare=False)  # its place in the caller's request, for refusals


Block = Text | Image | Document | Thinking | ToolCall | ToolResult | Unknown


@dataclass(slots=True)
class Message:
    role: Role
    content: list[Block]

    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, Text))


@dataclass(slots=True)
class Tool:
    """A function tool: its arguments are a JSON object described by `parameters` (a JSON schema)."""

    name: str
    description: str | None
    parameters: dict[str, Any]
    raw: Any  # the tool as the caller wrote it, forwarded verbatim to a same-format upstream
    format: Format
    cache: CacheMark | None = None


@dataclass(slots=True)
class CustomTool:
    """A tool whose input is free-form text (OpenAI's custom tools, such as Codex's apply_patch), maybe constrained by
    a grammar: {"syntax": "lark" or "regex", "definition": ...}."""

    name: str
    description: str | None
    grammar: dict[str, Any] | None
    raw: Any
    format: Format


@dataclass(slots=True)
class Namespace:
    """Tools grouped under one name (OpenAI's namespace tools); their calls name the namespace and the tool."""

    name: str
    description: str | None
    tools: list[Tool | CustomTool]
    raw: Any
    format: Format


@dataclass(slots=True)
class HostedTool:
    """A tool the provider runs or defines itself (web search, code execution, file search, computer use, MCP,
    Anthropic's typed tools), kept with the format that defined it. `kind` is the word the formats share for it
    ("web_search"), None when no other format has one; `type` is its type as the caller wrote it."""

    kind: str | None
    type: str
    raw: Any
    format: Format


AnyTool = Tool | CustomTool | Namespace | HostedTool


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


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """Structured output: a JSON object, matching `schema` when kind is json_schema."""

    kind: Literal["json_schema", "json_object"]
    schema: dict[str, Any] | None = None
    name: str | None = None
    strict: bool | None = None
    description: str | None = None


@dataclass(slots=True)
class Request:
    """One inference request, whatever format it arrived in."""

    format: Format
    messages: list[Message]
    system: str | None = None
    system_parts: list[Text] | None = None  # the system as blocks, with their cache marks, when the caller sent blocks
    instructions: str | None = None  # Responses instructions as given (they are also part of system), for the echo
    model: str | None = None  # as requested: a model id, an alias, or None
    effort: str | None = None  # normalised to lower case: minimal | low | medium | high (or the caller's word)
    thinking_budget: int | None = None  # Anthropic thinking.budget_tokens; routing maps it to an effort tier
    thinking: bool | None = None  # False: the caller turned reasoning off ({type: disabled}); None: not said
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] | None = None
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False  # chat stream_options.include_usage
    tools: list[AnyTool] | None = None
    tool_choice: ToolChoice | None = None
    response_format: dict[str, Any] | None = None  # verbatim (chat)
    output: OutputFormat | None = None  # structured output, whichever format asked for it
    extra: dict[str, Any] = field(default_factory=dict)  # fields of the caller's format that canonical does not model
    body: dict[str, Any] = field(default_factory=dict)  # the caller's body as sent, for a same-format upstream
    headers: dict[str, str] = field(default_factory=dict)  # caller headers a same-format upstream gets (anthropic-beta)


@dataclass(slots=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None  # read from a prompt cache; part of input_tokens
    cache_write_tokens: int | None = None  # written to a prompt cache (Anthropic); part of input_tokens
    reasoning_tokens: int | None = None  # the model's thinking (Gemini's thoughts, OpenAI's reasoning); part of output
    # Usage fields of the upstream's own format that canonical does not model (Anthropic's server_tool_use,
    # service_tier...), as reported, for a caller of that format.
    native: dict[str, Any] | None = None

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
    refusal: bool = False
    annotation: dict[str, Any] | None = None  # one annotation of the text so far (OpenAI Responses' own)
    # one of Anthropic's citations of the text block streaming now: they come before its text, and TextEnd ends it
    citation: dict[str, Any] | None = None
    # The upstream's event as it came (its data), when it carried this text and nothing else: a caller of the same
    # format may get it relayed as it is, with only what the gateway owns rewritten (formats/*/stream.py).
    raw: str | None = field(default=None, compare=False, repr=False)


@dataclass(slots=True)
class TextEnd:
    """The end of a text block that has citations (Anthropic's): the text after it is another block's."""


@dataclass(slots=True)
class ThinkingDelta:
    """A piece of a thinking block; consecutive pieces are one block, until a signature ends it (Anthropic's comes
    last) or an id changes (OpenAI's). Signature, redacted data (a block of its own) and encrypted content arrive as
    pieces of their own."""

    text: str = ""
    signature: str | None = None
    redacted: str | None = None
    encrypted: str | None = None
    id: str | None = None
    format: Dialect | None = None


@dataclass(slots=True)
class ToolCallStart:
    index: int
    id: str
    name: str
    custom: bool = False  # its deltas are a custom tool's input text, not JSON
    namespace: str | None = None


@dataclass(slots=True)
class ToolCallDelta:
    index: int
    arguments: str


@dataclass(slots=True)
class ItemStart:
    """An output item canonical does not model (a built-in tool's call ...) opens, as its format wrote it; for a
    caller of that format (ItemDone brings it whole)."""

    block: Unknown


@dataclass(slots=True)
class ItemProgress:
    """An event of such an item (a web search's progress, a piece of code being written ...), as its format wrote
    it, for a caller of that format."""

    data: dict[str, Any]
    format: Dialect


@dataclass(slots=True)
class ItemDone:
    """A whole output item canonical does not model: relayed to a caller of its format, reported as left out to any
    other."""

    block: Unknown


@dataclass(slots=True)
class Finish:
    reason: FinishReason
    stop_sequence: str | None = None


@dataclass(slots=True)
class UsageReport:
    usage: Usage


Event = (TextDelta | TextEnd | ThinkingDelta | ToolCallStart | ToolCallDelta | ItemStart | ItemProgress | ItemDone
         | Finish | UsageReport)


@dataclass(slots=True)
class Answer:
    """What a wire renderer needs besides the result: ids and names the caller sees."""

    decision_id: str
    model: str  # the catalog's public id, never the upstream's own name
    created: int
    input_estimate: int | None = None  # the gateway's count of the prompt, for a stream that reports usage late


def fold(events: list[Event]) -> Result:
    """Fold a stream back into a whole result (used for metering and tests)."""
    text: list[str] = []
    refusal: list[str] = []
    annotations: list[dict[str, Any]] = []
    citations: list[dict[str, Any]] = []
    thoughts: list[Thinking] = []
    items: list[Block] = []
    calls: dict[int, ToolCall] = {}
    finish = Finish(FinishReason.UNKNOWN)
    usage = Usage()
    last: Event | None = None
    for ev in events:
        if isinstance(ev, ThinkingDelta):
            if not isinstance(last, ThinkingDelta) or _starts_block(thoughts[-1], ev):
                thoughts.append(Thinking("", format=ev.format))
            _add_thinking(thoughts[-1], ev)
        elif isinstance(ev, TextDelta):
            (refusal if ev.refusal else text).append(ev.text)
            annotations.extend([ev.annotation] if ev.annotation is not None else [])
            citations.extend([ev.citation] if ev.citation is not None else [])
        elif isinstance(ev, ToolCallStart):
            calls[ev.index] = ToolCall(ev.id, ev.name, "", custom=ev.custom, namespace=ev.namespace)
        elif isinstance(ev, ToolCallDelta) and ev.index in calls:
            calls[ev.index].arguments += ev.arguments
        elif isinstance(ev, ItemDone):
            items.append(ev.block)
        elif isinstance(ev, Finish):
            finish = ev
        elif isinstance(ev, UsageReport):
            usage = ev.usage
        last = ev
    content: list[Block] = [*thoughts, *items]
    if text or annotations or citations:
        content.append(Text("".join(text), annotations=annotations or None, citations=citations or None))
    if refusal:
        content.append(Text("".join(refusal), refusal=True))
    content.extend(calls[i] for i in sorted(calls))
    return Result(content=content, finish_reason=finish.reason, usage=usage, stop_sequence=finish.stop_sequence)


def _starts_block(block: Thinking, ev: ThinkingDelta) -> bool:
    """Whether a piece right after `block` is another block: redacted data is a block of its own, a signature ends its
    block, and OpenAI's items have ids."""
    if ev.redacted is not None or block.redacted is not None:
        return True
    return bool(block.signature and ev.signature is None) or (block.id is not None and ev.id not in (None, block.id))


def _add_thinking(block: Thinking, ev: ThinkingDelta) -> None:
    block.text += ev.text
    block.signature = (block.signature or "") + ev.signature if ev.signature is not None else block.signature
    block.redacted = ev.redacted if ev.redacted is not None else block.redacted
    block.encrypted = ev.encrypted if ev.encrypted is not None else block.encrypted
    block.id = ev.id if ev.id is not None else block.id
