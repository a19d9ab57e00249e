"""A Messages caller's request, parsed into the canonical Request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from generated.models import AnthropicMessage, MessagesRequest
from handlers.errors import bad_request
from handlers.inference.canonical import (
    AnyTool,
    Block,
    CacheMark,
    Document,
    Image,
    Message,
    OutputFormat,
    Request,
    Role,
    Text,
    Thinking,
    ToolCall,
    ToolChoice,
    ToolResult,
    Unknown,
)
from handlers.inference.formats.common import (
    PartReader,
    blocks,
    effort,
    join_system,
    opt_float,
    opt_int,
    opt_str_list,
    placed,
    read_cache_control,
    required_str,
    string_field,
    whole,
)
from handlers.inference.formats.messages.vocabulary import CHOICES, ROLES, VOCABULARY
from handlers.inference.formats.tool_reading import function_tool, hosted_tool, tool_choice, tool_list

# Declared fields the Request does not model: Request.extra (the spec's x-translate marks).
_EXTRA_FIELDS = tuple(sorted(VOCABULARY.fields.extra))
_OUTPUT_CONFIG_READ = frozenset({"effort", "format"})


def parse(body: MessagesRequest) -> Request:
    system, system_parts = _system(body.system)
    thinking = _thinking(body.thinking)
    config = body.output_config or {}
    extra = {name: value for name in _EXTRA_FIELDS if (value := getattr(body, name)) is not None}
    output, unread = _output_config(config)
    if unread:  # an output setting canonical has no word for: another kind refuses it by name
        extra["output_config"] = unread
    return Request(
        format="messages",
        messages=_conversation(body.messages),
        system=system,
        system_parts=system_parts,
        model=body.model,
        effort=_effort(config) or thinking.effort,
        thinking_budget=thinking.budget,
        thinking=thinking.on,
        max_tokens=whole(body.max_tokens, "max_tokens"),
        temperature=body.temperature,
        top_p=opt_float(body.top_p),
        stop=opt_str_list(body.stop_sequences),
        stream=bool(body.stream),
        tools=tool_list(body.tools, "messages", _tool),
        tool_choice=_tool_choice(body.tool_choice),
        output=output,
        extra=extra,
        body=body.model_dump(by_alias=True, exclude_unset=True),
    )


def _tool_choice(raw: Any) -> ToolChoice | None:
    """Anthropic says "at most one call" inside tool_choice; the OpenAI formats say it in parallel_tool_calls."""
    disable = raw.get("disable_parallel_tool_use") if isinstance(raw, dict) else None
    return tool_choice(raw, "messages", CHOICES, ("name",), None if not isinstance(disable, bool) else not disable)


def _system(value: str | list[Any] | None) -> tuple[str | None, list[Text] | None]:
    """(the joined text, the text blocks with their cache marks). Blocks are joined like separate system messages
    are; blocks of another type are left out."""
    if value is None or isinstance(value, str):
        return join_system([value]), None
    parts = [b for b in blocks(value, "system", _SYSTEM_PARTS, "messages") if isinstance(b, Text)]
    return join_system(b.text for b in parts), parts


@dataclass(frozen=True, slots=True)
class _Thinking:
    effort: str | None = None
    budget: int | None = None
    on: bool | None = None


def _thinking(value: str | dict[str, Any] | None) -> _Thinking:
    """Anthropic's {type: enabled, budget_tokens} / {type: adaptive} / {type: disabled}, or this gateway's own forms:
    a plain effort word or {effort: word}."""
    if not isinstance(value, dict):
        return _Thinking(effort=effort(value))
    if "effort" in value:
        return _Thinking(effort=effort(value["effort"]))
    kind = value.get("type")
    if kind == "enabled":
        return _Thinking(budget=opt_int(value.get("budget_tokens")), on=True)
    return _Thinking(on={"adaptive": True, "disabled": False}.get(kind) if isinstance(kind, str) else None)


def _effort(config: dict[str, Any]) -> str | None:
    value = config.get("effort")
    if value is not None and not isinstance(value, str):
        raise bad_request("output_config.effort must be a string", "output_config.effort")
    return effort(value)


def _output_config(config: dict[str, Any]) -> tuple[OutputFormat | None, dict[str, Any]]:
    """(structured output, the settings canonical does not read)."""
    unread = {key: value for key, value in config.items() if key not in _OUTPUT_CONFIG_READ and value is not None}
    fmt = config.get("format")
    if fmt is None:
        return None, unread
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return None, {**unread, "format": fmt}
    schema = fmt.get("schema")
    if not isinstance(schema, dict):
        raise bad_request("output_config.format.schema must be a JSON schema object", "output_config.format.schema")
    return OutputFormat("json_schema", schema=schema), unread


# --- the conversation ------------------------------------------------------------------------------------------------


def _conversation(messages: list[AnthropicMessage]) -> list[Message]:
    """The turns; the spec admits only user and assistant roles, as Anthropic does."""
    out: list[Message] = []
    for i, message in enumerate(messages):
        out.extend(_turn(ROLES[message.role], message.content, f"messages.{i}.content"))
    return out


def _turn(role: Role, content: Any, where: str) -> list[Message]:
    """Canonical keeps each tool result in its own "tool" message; they come first, as Anthropic requires."""
    if not isinstance(content, list):
        return [Message(role, blocks(content, where, _PARTS, "messages"))]
    results: list[Message] = []
    rest: list[Block] = []
    for i, part in enumerate(content):
        if isinstance(part, dict) and part.get("type") == "tool_result":
            results.append(Message("tool", _tool_result(part, f"{where}.{i}")))
        else:
            rest.extend(_part(part, f"{where}.{i}"))
    if rest or not results:
        results.append(Message(role, rest))
    return results


def _part(part: Any, where: str) -> list[Block]:
    """One block, as common.blocks reads each of a list."""
    if not isinstance(part, dict):
        raise bad_request(f"{where} must be an object with a type", where)
    kind = part.get("type")
    reader = _PARTS.get(kind) if isinstance(kind, str) else None
    return placed(reader(part, where) if reader else [Unknown(part, "messages")], where)


def cache_mark(part: dict[str, Any], where: str) -> CacheMark | None:
    """A block's cache_control as a cache mark; anything but {type: ephemeral, ttl?} is a 400 naming it."""
    return read_cache_control(part.get("cache_control"), f"{where}.cache_control")


def _text(part: dict[str, Any], where: str) -> list[Block]:
    return [Text(string_field(part, "text", where), cache_mark(part, where))]


def _source(part: dict[str, Any], where: str) -> tuple[dict[str, Any], str]:
    source = part.get("source")
    if not isinstance(source, dict) or not isinstance(source.get("type"), str):
        raise bad_request(f"{where}.source must be an object with a type", f"{where}.source")
    return source, source["type"]


def _image(part: dict[str, Any], where: str) -> list[Block]:
    source, kind = _source(part, where)
    cache = cache_mark(part, where)
    at = f"{where}.source"
    if kind == "base64":
        data, media_type = string_field(source, "data", at), required_str(source, "media_type", at)
        return [Image(data=data, media_type=media_type, cache=cache)]
    if kind == "url":
        return [Image(url=required_str(source, "url", at), cache=cache)]
    if kind == "file":
        return [Image(file_id=required_str(source, "file_id", at), cache=cache)]
    raise bad_request(f"{at}.type must be base64, url or file, got {kind!r}", f"{at}.type")


def _document(part: dict[str, Any], where: str) -> list[Block]:
    """A PDF or a plain text (a document of its own, so no format mistakes it for the prompt's own text).
    A document's context is more text for the model; its citations setting means nothing without Anthropic."""
    source, kind = _source(part, where)
    at = f"{where}.source"
    title = part.get("title") if isinstance(part.get("title"), str) else None
    found: Document | None = None
    if kind == "base64":
        found = Document(data=string_field(source, "data", at), media_type=required_str(source, "media_type", at))
    elif kind == "text":
        found = Document(text=string_field(source, "data", at), media_type="text/plain")
    elif kind == "url":
        found = Document(url=required_str(source, "url", at))
    elif kind == "file":
        found = Document(file_id=required_str(source, "file_id", at))
    elif kind == "content":
        return [Unknown(part, "messages")]  # a document made of blocks, for citations: Anthropic's own
    else:
        raise bad_request(f"{at}.type must be base64, text, url, content or file, got {kind!r}", f"{at}.type")
    found.filename, found.cache = title, cache_mark(part, where)
    context = part.get("context")
    return [found, Text(context)] if isinstance(context, str) and context else [found]


def _thinking_part(part: dict[str, Any], where: str) -> list[Block]:
    """Reasoning an Anthropic model showed, going back to it. An empty signature was given by this gateway to
    another provider's reasoning: no provider can check it, so it belongs to none."""
    signature = part.get("signature")
    signature = signature if isinstance(signature, str) and signature else None
    return [Thinking(string_field(part, "thinking", where), signature=signature, format="messages" if signature else None)]


def _redacted_thinking(part: dict[str, Any], where: str) -> list[Block]:
    return [Thinking("", redacted=string_field(part, "data", where), format="messages")]


def _tool_use(part: dict[str, Any], where: str) -> list[Block]:
    call_id = part.get("id")
    name = required_str(part, "name", where)
    arguments = orjson.dumps(part.get("input") or {}).decode()
    return [ToolCall(call_id if isinstance(call_id, str) else "", name, arguments, cache_mark(part, where))]


def _tool_result(part: dict[str, Any], where: str) -> list[Block]:
    """The result's text, then what else it holds (images, documents) as blocks of their own right after it in the
    same "tool" message: canonical ToolResult carries only text, and a renderer puts them back where its format
    can (inside the result for Anthropic)."""
    call_id = required_str(part, "tool_use_id", where)
    content = blocks(part.get("content"), f"{where}.content", _RESULT_PARTS, "messages")
    text = "".join(b.text for b in content if isinstance(b, Text))
    result = ToolResult(call_id, text, cache_mark(part, where), part.get("is_error") is True)
    return [result, *(b for b in content if not isinstance(b, Text))]


_SYSTEM_PARTS: dict[str, PartReader] = {"text": _text}
_RESULT_PARTS: dict[str, PartReader] = {"text": _text, "image": _image, "document": _document}
_PARTS: dict[str, PartReader] = {
    **_RESULT_PARTS,
    "tool_use": _tool_use,
    "thinking": _thinking_part,
    "redacted_thinking": _redacted_thinking,
}


def _tool(raw: dict[str, Any], where: str) -> AnyTool:
    # Client tools have no type (or "custom"); typed ones (web_search_20250305, bash_...) are Anthropic's own.
    if raw.get("type", "custom") != "custom":
        return hosted_tool(raw, "messages")
    tool = function_tool(raw, where, raw, "messages", "input_schema")
    mark = raw.get("cache_control")  # tools are never validated: a malformed mark is no mark
    if isinstance(mark, dict) and mark.get("type") == "ephemeral":
        ttl = mark.get("ttl")
        tool.cache = CacheMark(ttl if isinstance(ttl, str) else None)
    return tool
