"""What the three format modules share: SSE frames, numbers read from JSON, content parts, system text, tools."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

import orjson
from pydantic import BaseModel

from handlers.errors import ApiError, bad_request, unsupported
from handlers.inference.canonical import (
    Block,
    CacheMark,
    Document,
    Event,
    Finish,
    FinishReason,
    Format,
    Image,
    ItemDone,
    ItemProgress,
    ItemStart,
    Request,
    Text,
    TextDelta,
    TextEnd,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStart,
    Unknown,
    Usage,
    UsageReport,
)
from handlers.inference.formats.base import FORMATS, UpstreamFault, UpstreamOptions
from handlers.observability import metrics

log = logging.getLogger("specway.formats")

DONE = b"data: [DONE]\n\n"

# Reads one content part (an object whose "type" chose the reader); `where` is its param path.
PartReader = Callable[[dict[str, Any], str], list[Block]]


# --- SSE ---------------------------------------------------------------------------------------------------------


def sse(data: dict[str, Any], event: str | None = None) -> bytes:
    """One complete server-sent event; `event` adds the `event:` line the Responses and Messages streams use."""
    frame = b"data: " + orjson.dumps(data) + b"\n\n"
    return frame if event is None else b"event: " + event.encode() + b"\n" + frame


# --- fields --------------------------------------------------------------------------------------------------------


def split_extra(body: BaseModel, read: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The body's undeclared fields: (those named in `read`, the rest), the rest being Request.extra."""
    extra = dict(body.model_extra or {})
    return {key: extra.pop(key, None) for key in read}, extra


def present(**fields: Any) -> dict[str, Any]:
    """The fields that are set (not None), for optional request parameters."""
    return {key: value for key, value in fields.items() if value is not None}


_OURS = frozenset({"model", "messages", "stream", "stream_options"})  # never taken from a caller's extra fields


def merge_extra(body: dict[str, Any], extra: Mapping[str, Any]) -> None:
    """Add a same-format caller's unread fields to `body`, never overriding what we set or how we stream."""
    for key, value in extra.items():
        if key not in _OURS:
            body.setdefault(key, value)


@functools.cache
def known_fields(model: type[BaseModel]) -> frozenset[str]:
    """The fields a format's spec defines: its generated request model's declared fields."""
    return frozenset(field.alias or name for name, field in model.model_fields.items())


def passthrough_body(request: Request, spec_model: type[BaseModel], model: str, options: UpstreamOptions
                     ) -> dict[str, Any]:
    """A same-format caller's body for its upstream: every field the format defines as the caller wrote it (every
    field at all with options.passthrough), with the upstream's model name. The caller's format module then
    rewrites what the gateway owns (token limit, effort); the transport adds the streaming fields."""
    if options.passthrough:
        body = dict(request.body)
    else:
        known = known_fields(spec_model)
        body = {key: value for key, value in request.body.items() if key in known}
    body.pop("stream", None)
    body.pop("stream_options", None)
    body["model"] = model
    return body


def refuse_untranslatable(request: Request, kind: str, carried: Iterable[str] = ()) -> None:
    """Fields of the caller's format that canonical does not carry (Request.extra), going to an upstream of another
    kind: one the caller's format marks advisory, one set to its inert value, or one this upstream's format `carried`
    in its own words is fine to leave out; any other is a 400 naming it."""
    rules = FORMATS[request.format].VOCABULARY.fields
    for field, value in request.extra.items():
        if field not in carried and not rules.droppable(field, value):
            raise unsupported(field, kind)


_warned: set[tuple[str, str, str]] = set()
_TYPES_NAMED = 100  # distinct unknown types named in the metric and the log; any further one is counted as "other"


def unread(fmt: Format, what: str, kind: str) -> None:
    """A type (of an event, a block, a part ...) an upstream of `fmt` sent that its reader does not know: counted
    (specway_upstream_unread), and logged once per type."""
    key = (fmt, what, kind)
    if key not in _warned and len(_warned) < _TYPES_NAMED:
        _warned.add(key)
        log.warning("a %s upstream sent a %s type the reader does not know: %s", fmt, what, kind)
    metrics.UNREAD.labels(fmt, what, kind if key in _warned else "other").inc()


def arguments_at_end(index: int, tools: Mapping[int, int], outputs: AbstractSet[int],
                     with_arguments: AbstractSet[int]) -> list[Event]:
    """What a content block that ends (Anthropic's and Converse's tool blocks, by block index) still owes: a call
    without arguments streams no JSON at all, and callers of the chat format expect "{}"."""
    if index in with_arguments:
        return []
    if index in outputs:
        return [TextDelta("{}")]
    return [ToolCallDelta(tools[index], "{}")] if index in tools else []


def json_object(data: str) -> dict[str, Any]:
    """An upstream's JSON object (an answer, a stream event's data); anything else is an UpstreamFault."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise UpstreamFault(what="sent malformed JSON")
    return value


# --- numbers and strings from JSON --------------------------------------------------------------------------------


def whole(value: float | None, param: str) -> int | None:
    """A token bound as an int. The generated models carry JSON numbers as floats: 12.0 is 12, 12.5 is a 400."""
    if value is None:
        return None
    if not float(value).is_integer():
        raise bad_request(f"{param} must be a whole number of tokens, got {value}", param)
    return int(value)


def opt_int(value: Any) -> int | None:
    """An optional integer field nobody validated (model_extra): a wrong type is ignored, never an error."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, float) and value.is_integer() else None


def opt_float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def opt_bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def opt_str_list(value: Any) -> list[str] | None:
    """`stop`: a string or a list of strings; anything else is ignored."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    return None


def effort(value: Any) -> str | None:
    """An effort word, lower-cased; blank or not a string is no effort."""
    return (value.strip().lower() or None) if isinstance(value, str) else None


def json_text(value: Any) -> str:
    """Tool-call arguments as JSON text: a string is kept as sent, a decoded value is encoded back."""
    if isinstance(value, str):
        return value
    return "" if value is None else orjson.dumps(value).decode()


def tool_input(arguments: str) -> dict[str, Any]:
    """Tool-call arguments as the object Anthropic's tool_use input must be: no arguments are {}, and arguments
    that are not a JSON object are kept as text under "arguments" rather than lost."""
    if not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        value = None
    return value if isinstance(value, dict) else {"arguments": arguments}


def count(value: int | None) -> int:
    """A usage count on the wire, where "not reported" has to be a number."""
    return value or 0


# --- content --------------------------------------------------------------------------------------------------------


def blocks(content: Any, param: str, readers: Mapping[str, PartReader], fmt: Format) -> list[Block]:
    """The blocks of a message's content: a string is one Text, a list is read part by part.

    A part whose type has no reader is kept as Unknown (for a same-format upstream); a part that is not an object
    is a 400 naming it.
    """
    content = getattr(content, "root", content)
    if content is None:
        return []
    if isinstance(content, str):
        return [Text(content)]
    if not isinstance(content, list):
        raise bad_request(f"{param} must be a string or a list of content parts", param)
    out: list[Block] = []
    for i, part in enumerate(content):
        where = f"{param}.{i}"
        if not isinstance(part, dict):
            raise bad_request(f"{where} must be an object with a type", where)
        kind = part.get("type")
        reader = readers.get(kind) if isinstance(kind, str) else None
        out.extend(placed(reader(part, where) if reader else [Unknown(part, fmt)], where))
    return out


def placed(found: list[Block], where: str) -> list[Block]:
    """The blocks read from the caller's part at `where`, each that an upstream may refuse knowing its place."""
    for block in found:
        if isinstance(block, Image | Document | Unknown) and block.where is None:
            block.where = where
    return found


# The field of a caller's part that holds an image's or a document's URL, file id or data, by the caller's format.
_LEAVES: Mapping[tuple[Format, str, str], str] = {
    ("responses", "image", "url"): "image_url", ("responses", "image", "file_id"): "file_id",
    ("responses", "document", "url"): "file_url", ("responses", "document", "file_id"): "file_id",
    ("responses", "document", "data"): "file_data",
    ("chat", "image", "url"): "image_url.url", ("chat", "document", "file_id"): "file.file_id",
    ("chat", "document", "data"): "file.file_data",
    ("messages", "image", "url"): "source.url", ("messages", "image", "file_id"): "source.file_id",
    ("messages", "document", "url"): "source.url", ("messages", "document", "file_id"): "source.file_id",
    ("messages", "document", "data"): "source.data",
    ("gemini", "image", "url"): "fileData.fileUri", ("gemini", "image", "file_id"): "fileData.fileUri",
    ("gemini", "document", "url"): "fileData.fileUri", ("gemini", "document", "file_id"): "fileData.fileUri",
    ("gemini", "document", "data"): "inlineData.data",
}  # fmt: skip


def block_param(block: Image | Document | Unknown, caller: Format, field: str | None, fallback: str) -> str:
    """The param a refusal of `block` names: its place in the caller's request, down to the part's `field` ("url",
    "file_id", "data") in the caller's words; `fallback` for a block the caller did not send as a part."""
    if block.where is None:
        return fallback
    kind = "image" if isinstance(block, Image) else "document"
    leaf = _LEAVES.get((caller, kind, field)) if field else None
    return f"{block.where}.{leaf}" if leaf else block.where


def no_word_for(block: Unknown, caller: Format, kind: str, words: str) -> ApiError:
    """A content part only another format has (kept as it came) on its way to an upstream of `kind`, whose format
    (`words`: "Converse") has no word for it: refused by name."""
    part = block.data.get("type")
    return unsupported(block_param(block, caller, None, str(part or "content")), kind,
                       f"a {block.format} content part ({part}) with no {words} word")


def text_part(part: dict[str, Any], where: str) -> list[Block]:
    text = part.get("text")
    if not isinstance(text, str):
        raise bad_request(f"{where}.text must be a string", f"{where}.text")
    return [Text(text)]


def text_of(content: Any, param: str, fmt: Format, readers: Mapping[str, PartReader] | None = None) -> str:
    """The text of content that can only be text (system prompts, tool results); other parts are left out."""
    return "".join(b.text for b in blocks(content, param, readers or TEXT_PARTS, fmt) if isinstance(b, Text))


TEXT_PARTS: Mapping[str, PartReader] = {"text": text_part}


def join_system(parts: Iterable[str | None]) -> str | None:
    """System texts in order, one blank line apart; blank ones contribute nothing, and none at all is None."""
    return "\n\n".join(part for part in parts if part and part.strip()) or None


def role_error(role: Any, where: str, allowed: Iterable[str]) -> ApiError:
    return bad_request(f"{where}.role must be one of {', '.join(allowed)}, got {role!r}", f"{where}.role")


def required_str(obj: dict[str, Any], key: str, where: str) -> str:
    """A field that must be a non-empty string; else a 400 naming it."""
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise bad_request(f"{where}.{key} must be a non-empty string", f"{where}.{key}")
    return value


def string_field(obj: dict[str, Any], key: str, where: str) -> str:
    """A field that must be a string, empty or not; else a 400 naming it."""
    value = obj.get(key)
    if not isinstance(value, str):
        raise bad_request(f"{where}.{key} must be a string", f"{where}.{key}")
    return value


def str_or_none(value: Any) -> str | None:
    """An optional string nobody validated: a non-empty string, else None."""
    return value if isinstance(value, str) and value else None


def str_or_empty(value: Any) -> str:
    """A string an upstream sent, or "" for anything else."""
    return value if isinstance(value, str) else ""


# --- streams -------------------------------------------------------------------------------------------------------


class StreamState:
    """What every StreamRenderer keeps: the finish reason (and stop sequence) and usage, all rendered at the end,
    and dispatch.

    Subclasses write on_text, on_call_start and on_call_delta; each returns the frames it produces (maybe b"").
    """

    def __init__(self) -> None:
        self.reason = FinishReason.UNKNOWN
        self.stop_sequence: str | None = None
        self.usage = Usage()

    def event(self, ev: Event) -> bytes:
        return getattr(self, _ON[type(ev)])(ev)

    def on_text(self, ev: TextDelta) -> bytes:
        raise NotImplementedError

    def on_call_start(self, ev: ToolCallStart) -> bytes:
        raise NotImplementedError

    def on_call_delta(self, ev: ToolCallDelta) -> bytes:
        raise NotImplementedError

    def on_thinking(self, ev: ThinkingDelta) -> bytes:
        return b""  # a format with no place for reasoning in its stream

    def on_text_end(self, ev: TextEnd) -> bytes:
        return b""  # a format whose text has no blocks

    def on_item_start(self, ev: ItemStart) -> bytes:
        return b""  # another format's own item (a format relays its own)

    def on_item_progress(self, ev: ItemProgress) -> bytes:
        return b""

    def on_item(self, ev: ItemDone) -> bytes:
        return b""  # another format's own item: the relay reports it as left out (a format relays its own)

    def on_finish(self, ev: Finish) -> bytes:
        self.reason = ev.reason
        self.stop_sequence = ev.stop_sequence
        return b""

    def on_usage(self, ev: UsageReport) -> bytes:
        self.usage = ev.usage
        return b""


_ON: dict[type, str] = {
    TextDelta: "on_text",
    TextEnd: "on_text_end",
    ThinkingDelta: "on_thinking",
    ToolCallStart: "on_call_start",
    ToolCallDelta: "on_call_delta",
    ItemStart: "on_item_start",
    ItemProgress: "on_item_progress",
    ItemDone: "on_item",
    Finish: "on_finish",
    UsageReport: "on_usage",
}


# --- data URLs: how the OpenAI formats carry images and files inline -------------------------------------------------


def read_data_url(url: str) -> tuple[str, str] | None:
    """A base64 data URL ("data:image/png;base64,AAAA") as (media type, base64 data); None for any other URL."""
    head, sep, data = url.partition(",")
    if not sep or not head.startswith("data:") or not head.endswith(";base64"):
        return None
    return head.removeprefix("data:").removesuffix(";base64").split(";")[0], data


def write_data_url(media_type: str | None, data: str) -> str:
    """Base64 data as a data URL, the form OpenAI's image and file parts take."""
    return f"data:{media_type or 'application/octet-stream'};base64,{data}"


def read_cache_control(raw: Any, at: str) -> CacheMark | None:
    """A cache_control as a cache mark: {"type": "ephemeral", "ttl"?: string}; anything else is a 400 naming it."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or raw.get("type") != "ephemeral" or not isinstance(raw.get("ttl", ""), str):
        raise bad_request(f'{at} must be {{"type": "ephemeral", "ttl"?: string}}', at)
    return CacheMark(raw.get("ttl"))
