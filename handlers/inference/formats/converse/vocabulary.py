"""The words of Bedrock's Converse API (as botocore's bedrock-runtime service model defines them) that the body and
the reader share: stop reasons, usage, the stream's event and exception types, and the shapes of content blocks.

In JSON over HTTP a `bytes` member (an image's, a document's, redacted reasoning) is a base64 string."""

from __future__ import annotations

import re
from typing import Any

from handlers.errors import unsupported
from handlers.inference.canonical import CacheMark, Document, FinishReason, Format, Image, Usage
from handlers.inference.formats.common import block_param, read_data_url

KIND = "bedrock"  # the upstream kind that speaks it, as refusals name it

STREAM_FIELDS: dict[str, Any] = {}  # a stream is asked for by its path (converse-stream), not in the body
STREAM_END = "metadata"  # the last event of a ConverseStream answer, after messageStop

STOP_READ = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP_SEQUENCE,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_use": FinishReason.TOOL_CALLS,
    "guardrail_intervened": FinishReason.CONTENT_FILTER,
    "content_filtered": FinishReason.CONTENT_FILTER,
}  # malformed_model_output and malformed_tool_use are no finish canonical has a word for: unknown

# The exceptions a ConverseStream answer may carry as events (`:message-type` exception), by their member name in
# ConverseStreamOutput, with the HTTP status the same exception has as an answer of its own.
STREAM_EXCEPTIONS = {
    "validationException": 400,
    "throttlingException": 429,
    "modelStreamErrorException": 424,
    "internalServerException": 500,
    "serviceUnavailableException": 503,
}

IMAGE_FORMATS = {"image/png": "png", "image/jpeg": "jpeg", "image/jpg": "jpeg", "image/gif": "gif",
                 "image/webp": "webp"}
IMAGE_TYPES = {word: media for media, word in IMAGE_FORMATS.items() if media != "image/jpg"}
DOCUMENT_FORMATS = {
    "application/pdf": "pdf", "text/csv": "csv", "application/msword": "doc",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.ms-excel": "xls", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "text/html": "html", "text/plain": "txt", "text/markdown": "md",
}  # fmt: skip
_NAME_OUT = re.compile(r"[^A-Za-z0-9\s\-()\[\]]+")  # a document's name may hold only these
_DOCUMENT_NAME_MAX = 200


# --- usage ----------------------------------------------------------------------------------------------------------


def read_usage(raw: Any) -> Usage:
    """Canonical input counts every prompt token; Converse's inputTokens leaves out the tokens read from the cache
    and those written to it (its totalTokens adds them)."""
    raw = raw if isinstance(raw, dict) else {}
    cached, written, given = (_count(raw.get(k)) for k in ("cacheReadInputTokens", "cacheWriteInputTokens",
                                                          "inputTokens"))
    total = None if given is None else given + (cached or 0) + (written or 0)
    return Usage(input_tokens=total, output_tokens=_count(raw.get("outputTokens")), cached_input_tokens=cached,
                 cache_write_tokens=written)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


# --- block shapes ---------------------------------------------------------------------------------------------------


def cache_point(mark: CacheMark | None) -> list[dict[str, Any]]:
    """The cachePoint block that follows a block with a cache mark (none without one): the prefix up to it is
    cached, with the caller's ttl when it said one."""
    if mark is None:
        return []
    return [{"cachePoint": {"type": "default", **({"ttl": mark.ttl} if mark.ttl in ("5m", "1h") else {})}}]


def image_block(block: Image, caller: Format) -> dict[str, Any]:
    """An image as Converse takes it: its bytes (a data: URL is split into them). Converse fetches no URL and knows
    no other provider's file ids: those are refused by name."""
    if block.file_id is not None:
        raise unsupported(block_param(block, caller, "file_id", "image.file_id"), KIND,
                          "an image uploaded to another provider is known only there")
    media, data = block.media_type, block.data
    if data is None:
        inline = read_data_url(block.url or "")
        if inline is None:
            raise unsupported(block_param(block, caller, "url", "image.url"), KIND,
                              "Converse takes an image's bytes, not a URL to fetch: send it as base64 data")
        media, data = inline
    word = IMAGE_FORMATS.get((media or "image/png").lower())
    if word is None:
        raise unsupported(block_param(block, caller, "url", "image"), KIND,
                          f"Converse reads png, jpeg, gif and webp images, not {media}")
    return {"image": {"format": word, "source": {"bytes": data}}}


def document_block(block: Document, caller: Format, number: int) -> dict[str, Any]:
    """A document as Converse takes it: its bytes, a format and a name (its filename made one Converse allows, or
    "document N"). A URL or another provider's file id is refused by name."""
    if block.file_id is not None:
        raise unsupported(block_param(block, caller, "file_id", "document.file_id"), KIND,
                          "a file uploaded to another provider is known only there")
    media, data = (block.media_type or "application/pdf"), block.base64()
    if block.text is not None:
        media = "text/plain"
    if data is None:
        inline = read_data_url(block.url or "")
        if inline is None:
            raise unsupported(block_param(block, caller, "url", "document.url"), KIND,
                              "Converse takes a document's bytes, not a URL to fetch")
        media, data = inline
    word = DOCUMENT_FORMATS.get(media.lower())
    if word is None:
        raise unsupported(block_param(block, caller, "data", "document"), KIND,
                          f"Converse reads pdf, csv, doc(x), xls(x), html, txt and md documents, not {media}")
    return {"document": {"format": word, "name": document_name(block.filename, number), "source": {"bytes": data}}}


def document_name(filename: str | None, number: int) -> str:
    """A name Converse allows: letters, digits, single spaces, hyphens, parentheses and square brackets."""
    stem = (filename or "").rsplit(".", 1)[0] if filename and "." in filename else (filename or "")
    name = " ".join(_NAME_OUT.sub(" ", stem).split())[:_DOCUMENT_NAME_MAX].strip()
    return name or f"document {number}"

