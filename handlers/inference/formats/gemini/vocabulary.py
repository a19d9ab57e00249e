"""The words of Google's Gemini API (generateContent; the Gemini API's and Vertex AI's, which share it) that both
directions share: roles, finish reasons, usage counts, the status words of its errors, how Google's two spellings of
a field are read, the shapes of parts, Google's schema dialect, and how its request fields travel to another format
(read from the spec's marks).

A thought signature is Gemini's proof of the reasoning behind a turn, carried on a part (the turn's first function
call, else any part). Canonical keeps it as a Thinking block of format "gemini" with no text, placed before the
part it came on; a thought summary (a part with `thought: true`) is a Thinking block with text.
"""

from __future__ import annotations

import mimetypes
import re
from typing import Any

from generated.models import GeminiGenerateContentRequest, GeminiGenerationConfig
from handlers.errors import unsupported
from handlers.inference.canonical import Document, FinishReason, Format, Image, Role, Usage
from handlers.inference.formats import fields
from handlers.inference.formats.base import Vocabulary
from handlers.inference.formats.common import block_param, count, opt_int, present, read_data_url

VOCABULARY = Vocabulary(
    name="gemini",
    kind="gemini",
    id_prefix="",  # responseId is the decision id itself
    output_field="generationConfig.responseMimeType",
    stop_field="generationConfig.stopSequences",
    fields=fields.rules(GeminiGenerateContentRequest, {"generationConfig": GeminiGenerationConfig}),
)
KIND = VOCABULARY.kind
ADVISORY = VOCABULARY.fields.advisory
INERT = VOCABULARY.fields.inert

STREAM_FIELDS: dict[str, Any] = {}  # a stream is asked for by its path (:streamGenerateContent?alt=sse), not the body
STREAM_END = "a candidate's finishReason"  # Gemini's stream has no terminator: the last chunk says how it finished

# What a caller names to let its key's routing policy choose the model (a catalog model or alias of that name wins).
ROUTE = "specway"
METHODS = ("generateContent", "streamGenerateContent", "countTokens")  # a Model's supportedGenerationMethods

ROLES: dict[str, Role] = {"user": "user", "model": "assistant", "function": "user"}  # function: old function results
ROLE_WORDS: dict[Role, str] = {"user": "user", "assistant": "model", "tool": "user", "system": "user"}

FINISH_REASONS = {
    FinishReason.STOP: "STOP",
    FinishReason.STOP_SEQUENCE: "STOP",
    FinishReason.LENGTH: "MAX_TOKENS",
    FinishReason.TOOL_CALLS: "STOP",  # Gemini ends a turn of function calls with STOP
    FinishReason.CONTENT_FILTER: "SAFETY",
    FinishReason.UNKNOWN: "STOP",
}
# Google's words read back. STOP with function calls in the answer is a tool-call stop: the reader decides that.
FINISH_READ = {
    "STOP": FinishReason.STOP,
    "MAX_TOKENS": FinishReason.LENGTH,
    **dict.fromkeys(("SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
                     "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION", "LANGUAGE"), FinishReason.CONTENT_FILTER),
}


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


# --- Google's two spellings ----------------------------------------------------------------------------------------

_CAPITAL = re.compile(r"([A-Z])")


def snake(name: str) -> str:
    """A field's proto name from its JSON name: mimeType -> mime_type."""
    return _CAPITAL.sub(lambda m: "_" + m.group(1).lower(), name)


def pick(obj: Any, name: str) -> Any:
    """A field of a Google JSON object by its lowerCamelCase name, or by its snake_case proto name (Google's API reads
    both, and google-genai for Python sends snake_case inside nested objects); None when neither is there."""
    if not isinstance(obj, dict):
        return None
    value = obj.get(name)
    return obj.get(snake(name)) if value is None else value


def camel(name: str) -> str:
    """A field's JSON name from either spelling: mime_type -> mimeType."""
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


# --- usage ------------------------------------------------------------------------------------------------------------


def read_usage(raw: Any) -> Usage:
    """Google's usageMetadata: promptTokenCount counts every prompt token (cached ones included, as canonical input
    does), and the tokens of a tool's result Gemini fetched itself (toolUsePromptTokenCount) are input too;
    canonical output counts the answer and its thoughts (thoughtsTokenCount, which Google keeps out of
    candidatesTokenCount and bills as output), which it also keeps apart as reasoning. Google's own counts that
    canonical does not model (toolUsePromptTokenCount, the per-modality details) stay native, for a Gemini caller."""
    raw = raw if isinstance(raw, dict) else {}
    prompt = opt_int(pick(raw, "promptTokenCount"))
    tool_prompt = opt_int(pick(raw, "toolUsePromptTokenCount")) or 0
    answer, thoughts = opt_int(pick(raw, "candidatesTokenCount")), opt_int(pick(raw, "thoughtsTokenCount"))
    output = None if answer is None and thoughts is None else (answer or 0) + (thoughts or 0)
    native = {camel(key): value for key, value in raw.items() if camel(key) not in _CANONICAL_USAGE}
    return Usage(input_tokens=None if prompt is None else prompt + tool_prompt, output_tokens=output,
                 cached_input_tokens=opt_int(pick(raw, "cachedContentTokenCount")), reasoning_tokens=thoughts,
                 native=native or None)


_CANONICAL_USAGE = frozenset({"promptTokenCount", "candidatesTokenCount", "cachedContentTokenCount", "totalTokenCount",
                              "thoughtsTokenCount"})


def usage(value: Usage) -> dict[str, Any]:
    """usageMetadata: the prompt with its cached tokens, the answer without its thoughts (counted apart when the
    upstream said how many), and the total."""
    thoughts = value.reasoning_tokens
    output = count(value.output_tokens)
    return {
        "promptTokenCount": count(value.input_tokens),
        "candidatesTokenCount": max(0, output - (thoughts or 0)),
        "totalTokenCount": count(value.input_tokens) + output,
        **present(cachedContentTokenCount=value.cached_input_tokens, thoughtsTokenCount=thoughts),
    }


def count_body(tokens: int) -> dict[str, Any]:
    """countTokens' answer."""
    return {"totalTokens": tokens}


# --- parts --------------------------------------------------------------------------------------------------------


def signed(part: dict[str, Any], signature: str | None) -> dict[str, Any]:
    """A part with a thought signature on it, as Gemini puts its signature on the part it belongs to."""
    return {**part, "thoughtSignature": signature} if signature else part


def text_part(text: str) -> dict[str, Any]:
    return {"text": text}


def thought_part(text: str) -> dict[str, Any]:
    return {"text": text, "thought": True}


def call_part(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"functionCall": {**present(id=call_id or None), "name": name, "args": args}}


def candidate(parts: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
    """The one candidate of an answer (or of a stream's chunk: the last carries the finishReason)."""
    return {"content": {"role": "model", "parts": parts}, **present(finishReason=finish), "index": 0}


# --- Google's schema dialect -----------------------------------------------------------------------------------------

# Keys of Google's Schema (an OpenAPI subset) that JSON schema spells the same; every other one is Google's alone
# (propertyOrdering ...) and changes nothing a JSON schema says.
_SAME = frozenset({"format", "title", "description", "enum", "required", "minItems", "maxItems", "minimum",
                   "maximum", "minLength", "maxLength", "pattern", "default", "minProperties", "maxProperties",
                   "example"})


def json_schema(schema: Any) -> Any:
    """Google's Schema (types in capitals, `nullable`, `anyOf`, either spelling) as the JSON schema other formats
    take."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        key = camel(key)
        if key == "type" and isinstance(value, str) and value.upper() != "TYPE_UNSPECIFIED":
            out["type"] = value.lower()
        elif key == "properties" and isinstance(value, dict):
            out["properties"] = {name: json_schema(sub) for name, sub in value.items()}
        elif key == "items":
            out["items"] = json_schema(value)
        elif key == "anyOf" and isinstance(value, list):
            out["anyOf"] = [json_schema(sub) for sub in value]
        elif key in _SAME:
            out[key] = value
    if schema.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


# --- media ----------------------------------------------------------------------------------------------------------


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
