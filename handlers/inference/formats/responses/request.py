"""OpenAI Responses as callers send it: the request body into the canonical Request."""

from __future__ import annotations

import mimetypes
from collections.abc import Callable
from typing import Any

from generated import errors as codes
from generated.models import Input, ResponsesInputItem, ResponsesRequest, ResponsesTextConfig
from handlers.errors import ApiError, bad_request
from handlers.inference.canonical import (
    AnyTool,
    Block,
    CacheMark,
    CustomTool,
    Document,
    Image,
    Message,
    Namespace,
    OutputFormat,
    Request,
    Role,
    Text,
    Thinking,
    Tool,
    ToolCall,
    ToolResult,
    Unknown,
)
from handlers.inference.formats.common import (
    PartReader,
    blocks,
    effort,
    join_system,
    json_text,
    opt_float,
    read_data_url,
    required_str,
    role_error,
    str_or_empty,
    str_or_none,
    string_field,
    whole,
)
from handlers.inference.formats.reasoning import carried, restore
from handlers.inference.formats.responses.vocabulary import NESTED, VOCABULARY
from handlers.inference.formats.tool_reading import (
    OPENAI_CHOICES,
    custom_tool,
    function_tool,
    hosted_tool,
    tool_choice,
    tool_list,
)

_ROLES: dict[str, Role] = {"user": "user", "assistant": "assistant"}
_SYSTEM_ROLES = frozenset({"system", "developer"})
_OUTPUT_TYPES = frozenset({"text", "json_object", "json_schema"})
# Declared fields the Request does not model: Request.extra (the spec's x-translate marks), at the top level and
# inside the objects read field by field ("reasoning.summary").
_EXTRA = VOCABULARY.fields.extra


def parse(body: ResponsesRequest) -> Request:
    _refuse_state(body)
    sent = _as_sent(body)
    system, parts, messages = _input(body.input)
    chosen = effort(body.reasoning.effort) if body.reasoning else None
    instructions = [Text(body.instructions)] if body.instructions and body.instructions.strip() else []
    return Request(
        format="responses",
        messages=messages,
        system=join_system([body.instructions, *system]),
        system_parts=None if parts is None else instructions + parts,
        instructions=body.instructions,
        model=body.model,
        effort=chosen,
        thinking=False if chosen == "none" else None,
        max_tokens=whole(body.max_output_tokens, "max_output_tokens"),
        temperature=body.temperature,
        top_p=opt_float(body.top_p),
        stream=bool(body.stream),
        tools=tool_list(body.tools, "responses", _tool),
        tool_choice=tool_choice(body.tool_choice, "responses", OPENAI_CHOICES, ("name",), body.parallel_tool_calls),
        output=_output(body.text),
        extra=_extra(sent),
        body=sent,
    )


def _as_sent(body: ResponsesRequest) -> dict[str, Any]:
    """The caller's body as JSON values. The spec reads max_output_tokens as a number, so 100 came back as 100.0:
    it goes upstream as the integer OpenAI requires."""
    sent = body.model_dump(mode="json", by_alias=True, exclude_unset=True)
    limit = sent.get("max_output_tokens")
    if isinstance(limit, float) and limit.is_integer():
        sent["max_output_tokens"] = int(limit)
    return sent


# --- what Specway cannot serve: state kept between responses ------------------------------------------------------


def _refuse_state(body: ResponsesRequest) -> None:
    """Specway keeps no responses, and its response ids are its decision ids, not an upstream's: a request must carry
    its whole conversation, whichever upstream serves it."""
    if body.previous_response_id is not None:
        raise _stateless(
            "previous_response_id",
            "Specway keeps no response state, and its response ids are decision ids, not an upstream's. "
            "Send the whole conversation in input",
        )
    if body.conversation is not None:
        raise _stateless("conversation", "Specway keeps no conversation state. Send the whole conversation in input")
    if body.store:
        raise _stateless(
            "store",
            "Specway stores no responses to retrieve later, and asks upstreams not to either. "
            "Send store false (or leave it out) and the whole conversation in input",
        )
    if body.background:
        raise _stateless("background", "Specway answers within the request; stream a long answer instead")


def _stateless(field: str, why: str) -> ApiError:
    return bad_request(f"{field} is not supported: {why}.", field, code=codes.UNSUPPORTED_PARAMETER)


# --- fields canonical does not model ------------------------------------------------------------------------------


def _extra(sent: dict[str, Any]) -> dict[str, Any]:
    """Declared fields the Request does not model, as sent; reasoning and text fields other than effort and format as
    "reasoning.summary", "text.verbosity"; a text.format only OpenAI knows as "text.format". Fields no spec declares
    are not here: they are dropped for every upstream (unless it sets passthrough)."""
    extra = {key: value for key, value in sent.items() if key in _EXTRA}
    for group in NESTED:
        fields = sent.get(group)
        if isinstance(fields, dict):
            extra |= {f"{group}.{k}": v for k, v in fields.items() if f"{group}.{k}" in _EXTRA}
    text_format = (sent.get("text") or {}).get("format")
    if isinstance(text_format, dict) and text_format.get("type") not in _OUTPUT_TYPES:
        extra["text.format"] = text_format
    return extra


def _output(text: ResponsesTextConfig | None) -> OutputFormat | None:
    """text.format as structured output; {type: text} (the default) is none."""
    fmt = text.format if text is not None else None
    kind = fmt.get("type") if fmt else None
    if kind == "json_object":
        return OutputFormat("json_object")
    if fmt is None or kind != "json_schema":  # {type: text} or a type only OpenAI knows (that one is extra)
        return None
    schema = fmt.get("schema")
    if not isinstance(schema, dict):
        raise bad_request("text.format.schema must be a JSON schema (an object)", "text.format.schema")
    name, strict, description = fmt.get("name"), fmt.get("strict"), fmt.get("description")
    return OutputFormat(
        "json_schema",
        schema,
        name if isinstance(name, str) else None,
        strict if isinstance(strict, bool) else None,
        description if isinstance(description, str) else None,
    )


# --- input --------------------------------------------------------------------------------------------------------


def _input(value: str | Input) -> tuple[list[str], list[Text] | None, list[Message]]:
    """System and developer messages become the system (its texts, and its parts when any was sent as parts, which
    may carry cache marks); the other items are the conversation."""
    if isinstance(value, str):
        return [], None, [Message("user", [Text(value)])]
    system: list[str] = []
    parts: list[Text] = []
    as_parts = False
    out: list[Message] = []
    for i, item in enumerate(value.root):
        where = f"input.{i}"
        kind = (item.model_extra or {}).get("type", "message")
        if kind == "message" and item.role in _SYSTEM_ROLES:
            texts = [b for b in blocks(item.content, f"{where}.content", _PARTS, "responses") if isinstance(b, Text)]
            system.append("".join(text.text for text in texts))
            parts.extend(text for text in texts if text.text.strip())
            as_parts = as_parts or isinstance(item.content, list)
            continue
        reader = _ITEMS.get(kind) if isinstance(kind, str) else None
        _append(out, reader(item, where) if reader else _unknown_item(item, where))
    return system, parts if as_parts else None, out


def _append(out: list[Message], message: Message) -> None:
    """Consecutive assistant items (messages, function calls, reasoning) are one assistant turn."""
    if message.role == "assistant" and out and out[-1].role == "assistant":
        out[-1].content.extend(message.content)
    else:
        out.append(message)


def _message_item(item: ResponsesInputItem, where: str) -> Message:
    role = _ROLES.get(item.role or "user")
    if role is None:
        raise role_error(item.role, where, ("user", "assistant", "system", "developer"))
    return Message(role, blocks(item.content, f"{where}.content", _PARTS, "responses"))


def _function_call(item: ResponsesInputItem, where: str) -> Message:
    fields = item.model_extra or {}
    call_id, name = required_str(fields, "call_id", where), required_str(fields, "name", where)
    call = ToolCall(call_id, name, json_text(fields.get("arguments")), namespace=str_or_none(fields.get("namespace")))
    return Message("assistant", [call])


def _custom_call(item: ResponsesInputItem, where: str) -> Message:
    """A custom tool's call: its input is free-form text."""
    fields = item.model_extra or {}
    call_id, name = required_str(fields, "call_id", where), required_str(fields, "name", where)
    call = ToolCall(call_id, name, string_field(fields, "input", where), custom=True,
                    namespace=str_or_none(fields.get("namespace")))
    return Message("assistant", [call])


def _function_output(item: ResponsesInputItem, where: str) -> Message:
    """The output's text is the tool result; images and files in it follow it in the same turn."""
    fields = item.model_extra or {}
    call_id = required_str(fields, "call_id", where)
    parts = blocks(fields.get("output"), f"{where}.output", _PARTS, "responses")
    text = "".join(block.text for block in parts if isinstance(block, Text))
    return Message("tool", [ToolResult(call_id, text), *(block for block in parts if not isinstance(block, Text))])


def _reasoning(item: ResponsesInputItem, where: str) -> Message:
    """A reasoning item: its summary (or reasoning text) with the encrypted content and id that take it back to
    OpenAI; or, when its encrypted content is the gateway's token of Anthropic's thinking, that thinking signed
    again, for Anthropic. Any other upstream leaves it out."""
    fields = item.model_extra or {}
    text = "\n\n".join(_texts(fields.get("summary")) or _texts(item.content))
    encrypted = str_or_none(fields.get("encrypted_content"))
    if carried(encrypted):
        return Message("assistant", [restore(encrypted or "", text, f"{where}.encrypted_content")])
    thought = Thinking(text, encrypted=encrypted, id=str_or_none(fields.get("id")), format="responses")
    return Message("assistant", [thought])


def _unknown_item(item: ResponsesInputItem, where: str) -> Message:
    """Built-in tool calls, item references and the like: kept whole for a same-format upstream, in the assistant
    turn."""
    return Message("assistant", [Unknown(item.model_dump(exclude_unset=True), "responses", where)])


_ITEMS: dict[str, Callable[[ResponsesInputItem, str], Message]] = {
    "message": _message_item,
    "function_call": _function_call,
    "function_call_output": _function_output,
    "custom_tool_call": _custom_call,
    "custom_tool_call_output": _function_output,
    "reasoning": _reasoning,
}


def _texts(parts: Any) -> list[str]:
    if not isinstance(parts, list):
        return []
    return [part["text"] for part in parts if isinstance(part, dict) and isinstance(part.get("text"), str)]


# --- content parts ------------------------------------------------------------------------------------------------


def _cache(part: dict[str, Any]) -> CacheMark | None:
    """OpenAI's explicit prompt_cache_breakpoint is a cache mark (its ttl words are OpenAI's, so it keeps none)."""
    return CacheMark() if isinstance(part.get("prompt_cache_breakpoint"), dict) else None


def _text(part: dict[str, Any], where: str) -> list[Block]:
    text = part.get("text")
    if not isinstance(text, str):
        raise bad_request(f"{where}.text must be a string", f"{where}.text")
    return [Text(text, cache=_cache(part))]


def _refusal(part: dict[str, Any], where: str) -> list[Block]:
    """An assistant's earlier refusal is what it said."""
    refusal = part.get("refusal")
    if not isinstance(refusal, str):
        raise bad_request(f"{where}.refusal must be a string", f"{where}.refusal")
    return [Text(refusal)]


def _image(part: dict[str, Any], where: str) -> list[Block]:
    detail, cache = str_or_none(part.get("detail")), _cache(part)
    url, file_id = str_or_none(part.get("image_url")), str_or_none(part.get("file_id"))
    if url is not None:
        inline = read_data_url(url)
        if inline is not None:
            return [Image(data=inline[1], media_type=inline[0], detail=detail, cache=cache)]
        return [Image(url=url, detail=detail, cache=cache)]
    if file_id is not None:
        return [Image(file_id=file_id, detail=detail, cache=cache)]
    raise bad_request(f"{where} needs an image_url (a URL or a base64 data URL) or a file_id", f"{where}.image_url")


def _file(part: dict[str, Any], where: str) -> list[Block]:
    filename, cache = str_or_none(part.get("filename")), _cache(part)
    data, url = str_or_none(part.get("file_data")), str_or_none(part.get("file_url"))
    file_id = str_or_none(part.get("file_id"))
    if data is not None:
        media_type, data = read_data_url(data) or (_guess_type(filename), data)
        return [Document(data=data, media_type=media_type, filename=filename, cache=cache)]
    if url is not None:
        return [Document(url=url, filename=filename, cache=cache)]
    if file_id is not None:
        return [Document(file_id=file_id, filename=filename, cache=cache)]
    raise bad_request(f"{where} needs file_data (a base64 data URL), a file_url or a file_id", f"{where}.file_data")


def _guess_type(filename: str | None) -> str | None:
    return mimetypes.guess_type(filename)[0] if filename else None


_PARTS: dict[str, PartReader] = {
    "input_text": _text,
    "output_text": _text,
    "text": _text,
    "refusal": _refusal,
    "input_image": _image,
    "input_file": _file,
}


def _tool(raw: dict[str, Any], where: str) -> AnyTool:
    kind = raw.get("type")
    if kind == "function":
        return function_tool(raw, where, raw, "responses", "parameters")
    if kind == "custom":
        return custom_tool(raw, raw, "responses")
    if kind == "namespace":
        members = raw.get("tools") if isinstance(raw.get("tools"), list) else []
        tools = [_tool(member, f"{where}.tools.{i}") for i, member in enumerate(members) if isinstance(member, dict)]
        description = raw.get("description")
        return Namespace(str_or_empty(raw.get("name")), description if isinstance(description, str) else None,
                         [t for t in tools if isinstance(t, Tool | CustomTool)], raw, "responses")
    return hosted_tool(raw, "responses")
