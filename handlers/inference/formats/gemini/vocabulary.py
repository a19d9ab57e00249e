"""The words of Gemini's generateContent API (the Gemini API's and Vertex AI's, which share it) that the body and the
reader share: finish reasons, usage, the status words of its errors, and the shapes of parts.

A thought signature is Gemini's proof of the reasoning behind a turn, carried on a part (the turn's first function
call, else any part). Canonical keeps it as a Thinking block of format "gemini" with no text, placed before the
part it came on; a thought summary (a part with `thought: true`) is a Thinking block with text.
"""

from __future__ import annotations

import mimetypes
from typing import Any

from handlers.errors import unsupported
from handlers.inference.canonical import Document, FinishReason, Format, Image, Usage
from handlers.inference.formats.common import block_param, read_data_url

KIND = "gemini"  # the upstream kind that speaks it, as refusals name it

STREAM_FIELDS: dict[str, Any] = {}  # a stream is asked for by its path (:streamGenerateContent?alt=sse), not the body
STREAM_END = "a candidate's finishReason"  # Gemini's stream has no terminator: the last chunk says how it finished

FINISH_READ = {
    "STOP": FinishReason.STOP,
    "MAX_TOKENS": FinishReason.LENGTH,
    "SAFETY": FinishReason.CONTENT_FILTER,
    "RECITATION": FinishReason.CONTENT_FILTER,
    "BLOCKLIST": FinishReason.CONTENT_FILTER,
    "PROHIBITED_CONTENT": FinishReason.CONTENT_FILTER,
    "SPII": FinishReason.CONTENT_FILTER,
    "IMAGE_SAFETY": FinishReason.CONTENT_FILTER,
    "IMAGE_PROHIBITED_CONTENT": FinishReason.CONTENT_FILTER,
}  # LANGUAGE, MALFORMED_FUNCTION_CALL, UNEXPECTED_TOOL_CALL, OTHER ...: no finish canonical has a word for

# google.rpc.Code's names as Google's errors carry them (error.status), with the HTTP status each maps to; a
# streamed error event carries them with its numeric code.
STATUS_CODES = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ABORTED": 409,
    "ALREADY_EXISTS": 409,
    "RESOURCE_EXHAUSTED": 429,
    "CANCELLED": 499,
    "UNKNOWN": 500,
    "INTERNAL": 500,
    "DATA_LOSS": 500,
    "UNIMPLEMENTED": 501,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
ERROR_STATUSES = {**STATUS_CODES, **{str(code): code for code in set(STATUS_CODES.values())}}


# What a count of a prompt's tokens (:countTokens) reads of a generation's body.
COUNTED_FIELDS = frozenset({"contents", "systemInstruction", "tools"})


def count_request(model: str, body: dict[str, Any]) -> dict[str, Any]:
    """The Gemini API's countTokens body for a generation's: a whole generateContentRequest (so that the system
    instruction and the tools are counted too), naming its model. Vertex AI takes the counted fields as they are."""
    counted = {name: value for name, value in body.items() if name in COUNTED_FIELDS}
    return {"generateContentRequest": {"model": f"models/{model.removeprefix('models/')}", **counted}}


# --- usage ----------------------------------------------------------------------------------------------------------


def read_usage(raw: Any) -> Usage:
    """usageMetadata as canonical: the prompt count includes what came from the cache (cachedContentTokenCount, as
    canonical's input does); canonical's output counts the thoughts too (thoughtsTokenCount, which Gemini keeps
    out of candidatesTokenCount and bills as output), and keeps them apart as reasoning; the tokens of a tool's
    result Gemini fetched itself (toolUsePromptTokenCount) are input."""
    raw = raw if isinstance(raw, dict) else {}
    prompt, tool_prompt, cached, candidates, thoughts = (_count(raw.get(k)) for k in (
        "promptTokenCount", "toolUsePromptTokenCount", "cachedContentTokenCount", "candidatesTokenCount",
        "thoughtsTokenCount"))
    given_in = prompt is not None or tool_prompt is not None
    given_out = candidates is not None or thoughts is not None
    return Usage(input_tokens=(prompt or 0) + (tool_prompt or 0) if given_in else None,
                 output_tokens=(candidates or 0) + (thoughts or 0) if given_out else None,
                 cached_input_tokens=cached, reasoning_tokens=thoughts)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


# --- part shapes ----------------------------------------------------------------------------------------------------


def media_part(block: Image | Document, caller: Format) -> dict[str, Any]:
    """An image or a document as a part: its bytes inline (a data: URL is split into them), or a URL Gemini fetches
    itself (fileData: a file of the Files API, gs:// on Vertex AI, or a public URL), whose media type Gemini needs.
    Another provider's file id is known only there: refused by name."""
    noun = "image" if isinstance(block, Image) else "document"
    if block.file_id is not None:
        raise unsupported(block_param(block, caller, "file_id", f"{noun}.file_id"), KIND,
                          f"a{'n' if noun == 'image' else ''} {noun} uploaded to another provider is known only there")
    data = block.data if isinstance(block, Image) else block.base64()
    media = block.media_type
    if isinstance(block, Document) and block.text is not None:
        media = "text/plain"
    if data is not None:
        return {"inlineData": {"mimeType": media or ("image/png" if noun == "image" else "application/pdf"),
                               "data": data}}
    url = block.url or ""
    inline = read_data_url(url)
    if inline is not None:
        return {"inlineData": {"mimeType": inline[0], "data": inline[1]}}
    media = media or mimetypes.guess_type(url.split("?", 1)[0])[0]
    if media is None:
        raise unsupported(block_param(block, caller, "url", f"{noun}.url"), KIND,
                          f"Gemini needs the media type of a {noun} it fetches, and this URL does not say it: send the "
                          "bytes as base64 data")
    return {"fileData": {"mimeType": media, "fileUri": url}}
