"""The words of Anthropic Messages that both directions share: stop reasons, tool-choice types, usage counts, the
fields another format may leave out, and the shapes of content blocks."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from generated.models import MessagesRequest
from handlers.errors import unsupported
from handlers.inference.canonical import (
    CacheMark,
    Document,
    FinishReason,
    Image,
    Role,
    Thinking,
    Usage,
)
from handlers.inference.formats import fields
from handlers.inference.formats.base import Vocabulary
from handlers.inference.formats.common import count, present, read_data_url
from handlers.inference.formats.tool_reading import ChoiceTable

VOCABULARY = Vocabulary(
    name="messages",
    kind="anthropic",
    id_prefix="msg_",
    output_field="output_config.format",
    stop_field="stop_sequences",
    fields=fields.rules(MessagesRequest),
    session_field="metadata.user_id",
)
KIND = VOCABULARY.kind
# Going to another kind, an advisory field is left out: a hint, a label or an Anthropic-side feature whose absence
# leaves the answer what the caller asked for (the code-execution container matters only to Anthropic's own tools,
# which never reach another kind; the other kinds cache prompt prefixes by themselves). The spec marks them.
ADVISORY = VOCABULARY.fields.advisory
INERT = VOCABULARY.fields.inert

STREAM_FIELDS: dict[str, Any] = {"stream": True}
STREAM_END = "message_stop"
# The fields of a Messages body that Anthropic's count_tokens defines (its own and its beta params); the others only
# steer generation (max_tokens, temperature, metadata, container ...), change no count, and it refuses them.
COUNTED_FIELDS = frozenset({
    "model", "messages", "system", "thinking", "tool_choice", "tools", "cache_control", "output_config", "speed",
    "mcp_servers", "context_management", "compaction", "billing_policy",
})  # fmt: skip

STOP_REASONS = {
    FinishReason.STOP: "end_turn",
    FinishReason.STOP_SEQUENCE: "stop_sequence",
    FinishReason.LENGTH: "max_tokens",
    FinishReason.TOOL_CALLS: "tool_use",
    FinishReason.CONTENT_FILTER: "refusal",
    FinishReason.UNKNOWN: "end_turn",
}
# The same words read back; a context window filled up is a length stop too.
STOP_READ = {word: reason for reason, word in STOP_REASONS.items() if reason is not FinishReason.UNKNOWN} | {
    "model_context_window_exceeded": FinishReason.LENGTH
}

ROLES: dict[str, Role] = {"user": "user", "assistant": "assistant", "system": "system"}
CHOICES: ChoiceTable = ({}, {"auto": "auto", "none": "none", "any": "required", "tool": "tool"})  # objects only
# A canonical tool choice as Anthropic's tool_choice type.
CHOICE_TYPES = {mode: word for word, mode in CHOICES[1].items()}

# Structured output asked in another format reaches an Anthropic upstream as a forced tool whose input is the answer.
# The upstream's answer does not say which request it answers, so the tool is named with this reserved prefix, and a
# tool_use of a tool so named is read back as the answer's text (a caller's own tool must not use the prefix).
OUTPUT_TOOL_PREFIX = "specway_json_"
OUTPUT_TOOL_DEFAULT = OUTPUT_TOOL_PREFIX + "output"
_TOOL_NAME_MAX = 64


def output_tool_name(schema_name: str | None) -> str:
    return (OUTPUT_TOOL_PREFIX + schema_name)[:_TOOL_NAME_MAX] if schema_name else OUTPUT_TOOL_DEFAULT


def is_output_tool(name: Any) -> bool:
    return isinstance(name, str) and name.startswith(OUTPUT_TOOL_PREFIX)


# --- usage ----------------------------------------------------------------------------------------------------------


# Anthropic's usage fields canonical does not model: a Messages caller gets them as its Anthropic upstream reported
# them, and null from any other upstream (the SDKs' Usage declares every one of them; BetaUsage the last two too).
_NATIVE_USAGE = ("cache_creation", "server_tool_use", "service_tier", "inference_geo", "speed",
                 "output_tokens_details", "fallback_credit", "iterations")
DELTA_USAGE = ("server_tool_use", "output_tokens_details", "fallback_credit", "iterations")  # message_delta's


def read_usage(raw: dict[str, Any]) -> Usage:
    """Canonical input counts every prompt token, as OpenAI's prompt_tokens does; Anthropic counts cache reads
    and cache writes apart from input_tokens."""
    cached = raw.get("cache_read_input_tokens")
    written = raw.get("cache_creation_input_tokens")
    given = raw.get("input_tokens")
    total = None if given is None else given + (cached or 0) + (written or 0)
    native = {key: raw[key] for key in _NATIVE_USAGE if raw.get(key) is not None}
    return Usage(input_tokens=total, output_tokens=raw.get("output_tokens"), cached_input_tokens=cached,
                 cache_write_tokens=written, native=native or None)


def usage(value: Usage, fields: tuple[str, ...] = _NATIVE_USAGE) -> dict[str, Any]:
    """A Messages usage object with every field Anthropic's has (message_start's and a whole answer's; with
    `fields` DELTA_USAGE, message_delta's). Anthropic counts cache reads and writes apart from input_tokens, and
    always as numbers (clients add them up); canonical input counts every prompt token."""
    cached, written = value.cached_input_tokens, value.cache_write_tokens
    native = value.native or {}
    return {
        "input_tokens": max(0, count(value.input_tokens) - count(cached) - count(written)),
        "cache_creation_input_tokens": count(written),
        "cache_read_input_tokens": count(cached),
        "output_tokens": count(value.output_tokens),
        **{key: native.get(key) for key in fields},
    }


# --- block shapes ---------------------------------------------------------------------------------------------------


def cache_control_field(mark: CacheMark | None) -> dict[str, Any]:
    """A block's cache_control field (none without a mark), to spread into the block."""
    if mark is None:
        return {}
    return {"cache_control": {"type": "ephemeral", **present(ttl=mark.ttl)}}


def text_block(text: str, mark: CacheMark | None = None) -> dict[str, Any]:
    return {"type": "text", "text": text, **cache_control_field(mark)}


def tool_use_block(call_id: str, name: str, arguments: dict[str, Any], mark: CacheMark | None = None
                   ) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments, **cache_control_field(mark)}


def thinking_block(block: Thinking) -> dict[str, Any] | None:
    """Reasoning as Anthropic shows it: redacted data as it came, else the text with its signature ("" when the
    reasoning came from another provider, whose own seal goes back only to it). Nothing to show is no block."""
    if block.format not in (None, "messages"):
        block = Thinking(block.text)
    if block.redacted is not None:
        return {"type": "redacted_thinking", "data": block.redacted}
    if not block.text and not block.signature:
        return None
    return {"type": "thinking", "thinking": block.text, "signature": block.signature or ""}


def image_block(block: Image) -> dict[str, Any]:
    """An image as an Anthropic source: base64 data (a data: URL is split into it), or a URL Anthropic fetches."""
    if block.file_id is not None:
        raise unsupported("file_id", KIND, "an image uploaded to another provider is known only there")
    if block.data is not None:
        source = {"type": "base64", "media_type": block.media_type or "image/png", "data": block.data}
    else:
        source = data_url_source(block.url or "") or {"type": "url", "url": block.url or ""}
    return {"type": "image", "source": source, **cache_control_field(block.cache)}


def document_block(block: Document) -> dict[str, Any]:
    """A document as Anthropic takes it: a PDF (base64 or URL) or plain text; the filename is its title."""
    if block.file_id is not None:
        raise unsupported("file_id", KIND, "a file uploaded to another provider is known only there")
    if block.text is not None:
        source = {"type": "text", "media_type": "text/plain", "data": block.text}
    elif block.data is not None:
        source = _document_data(block.data, block.media_type or "application/pdf")
    elif (inline := data_url_source(block.url or "")) is not None:
        source = _document_data(inline["data"], inline["media_type"])
    else:
        source = {"type": "url", "url": block.url}
    return {"type": "document", "source": source, **present(title=block.filename), **cache_control_field(block.cache)}


def _document_data(data: str, media_type: str) -> dict[str, Any]:
    if media_type == "application/pdf":
        return {"type": "base64", "media_type": media_type, "data": data}
    if media_type.startswith("text/"):
        try:
            text = base64.b64decode(data, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise unsupported("file_data", KIND, f"a {media_type} document that is not base64 UTF-8 text") from None
        return {"type": "text", "media_type": "text/plain", "data": text}
    raise unsupported("file_data", KIND, f"Anthropic reads PDF and plain-text documents, not {media_type}")


def data_url_source(url: str) -> dict[str, Any] | None:
    """A base64 source from a `data:<media type>;base64,<data>` URL; None for any other URL."""
    parts = read_data_url(url)
    return None if parts is None else {"type": "base64", "media_type": parts[0], "data": parts[1]}
