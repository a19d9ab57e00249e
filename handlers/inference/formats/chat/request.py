"""Chat Completions as callers send it: the body into the canonical Request."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from generated.models import ChatCompletionRequest, ChatMessage
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
    Text,
    Thinking,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
)
from handlers.inference.formats.chat.vocabulary import VOCABULARY
from handlers.inference.formats.common import (
    PartReader,
    blocks,
    effort,
    join_system,
    json_text,
    opt_bool,
    opt_float,
    opt_int,
    opt_str_list,
    read_cache_control,
    read_data_url,
    required_str,
    role_error,
    string_field,
    text_part,
    whole,
)
from handlers.inference.formats.tool_reading import (
    OPENAI_CHOICES,
    custom_tool,
    function_tool,
    hosted_tool,
    tool_choice,
    tool_list,
)

# Declared fields the Request does not model: Request.extra (the spec's x-translate marks).
_EXTRA = VOCABULARY.fields.extra
_SYSTEM_ROLES = frozenset({"system", "developer"})
_LIMITS = ("max_tokens", "max_completion_tokens")


def parse(body: ChatCompletionRequest) -> Request:
    system, system_parts, messages = _conversation(body.messages)
    output, readable = _output(body.response_format)
    tools = _tools(body)
    choice, legacy_choice = _choice(body)
    sent = _sent(body)
    extra = {key: value for key, value in sent.items() if key in _EXTRA}
    if body.functions is not None:
        extra.pop("functions", None)  # read as tools
    if legacy_choice:
        extra.pop("function_call", None)  # read as the tool choice
    if not readable:
        extra["response_format"] = body.response_format  # a server's own type: chat upstreams only
    return Request(
        format="chat",
        messages=messages,
        system=system,
        system_parts=system_parts,
        model=body.model,
        effort=effort(body.reasoning_effort),
        max_tokens=_max_tokens(body),
        temperature=body.temperature,
        top_p=opt_float(body.top_p),
        stop=opt_str_list(body.stop),
        seed=opt_int(body.seed),
        stream=bool(body.stream),
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        tools=tools,
        tool_choice=choice,
        response_format=body.response_format,
        output=output,
        extra=extra,
        body=sent,
    )


def _sent(body: ChatCompletionRequest) -> dict[str, Any]:
    """The caller's body as sent. The generated model holds the token limits as floats; they go on as integers."""
    sent = body.model_dump(mode="json", by_alias=True, exclude_unset=True)
    for key in _LIMITS:
        value = sent.get(key)
        if isinstance(value, float) and value.is_integer():
            sent[key] = int(value)
    return sent


def _max_tokens(body: ChatCompletionRequest) -> int | None:
    if body.max_tokens is not None and body.max_completion_tokens is not None:
        raise bad_request("send max_tokens or max_completion_tokens, not both", "max_tokens")
    if body.max_completion_tokens is not None:
        return whole(body.max_completion_tokens, "max_completion_tokens")
    return whole(body.max_tokens, "max_tokens")


def _output(raw: dict[str, Any] | None) -> tuple[OutputFormat | None, bool]:
    """Structured output from response_format, and whether canonical could read it (text is no structure)."""
    kind = raw.get("type") if raw is not None else "text"
    if kind == "text":
        return None, True
    if kind == "json_object":
        return OutputFormat("json_object"), True
    if kind != "json_schema" or raw is None:
        return None, False
    spec = raw.get("json_schema")
    if not isinstance(spec, dict):
        raise bad_request(
            "response_format.json_schema must be an object with the schema", "response_format.json_schema"
        )
    schema = spec.get("schema")
    if schema is not None and not isinstance(schema, dict):
        raise bad_request(
            "response_format.json_schema.schema must be a JSON schema object", "response_format.json_schema.schema"
        )
    name, description = spec.get("name"), spec.get("description")
    return OutputFormat(
        "json_schema",
        schema=schema,
        name=name if isinstance(name, str) and name else None,
        strict=opt_bool(spec.get("strict")),
        description=description if isinstance(description, str) else None,
    ), True


# --- messages --------------------------------------------------------------------------------------------------------


def _conversation(messages: list[ChatMessage]) -> tuple[str | None, list[Text] | None, list[Message]]:
    """System and developer messages become the system (its text, and its parts when any was sent as parts or with
    a cache mark); the rest are the conversation."""
    system: list[str] = []
    parts: list[Text] = []
    as_parts = False
    out: list[Message] = []
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        if message.role in _SYSTEM_ROLES:
            texts = _texts(message, where)
            system.append("".join(text.text for text in texts))
            parts.extend(text for text in texts if text.text.strip())
            as_parts = as_parts or isinstance(message.content, list) or any(text.cache for text in texts)
            continue
        reader = _ROLES.get(message.role or "")
        if reader is None:
            raise role_error(message.role, where, ("system", "developer", *_ROLES))
        out.append(reader(message, where))
    return join_system(system), parts if as_parts else None, out


def _texts(message: ChatMessage, where: str) -> list[Text]:
    """The text parts of a message that can only hold text (system, tool); OpenAI accepts nothing else there."""
    content = _marked(blocks(message.content, f"{where}.content", _TEXT_PARTS, "chat"), message, where)
    return [block for block in content if isinstance(block, Text)]


def _user(message: ChatMessage, where: str) -> Message:
    return Message("user", _marked(blocks(message.content, f"{where}.content", _PARTS, "chat"), message, where))


def _assistant(message: ChatMessage, where: str) -> Message:
    fields = message.model_extra or {}
    content = blocks(message.content, f"{where}.content", _PARTS, "chat")
    refusal = fields.get("refusal")
    if isinstance(refusal, str) and refusal:
        content.append(Text(refusal))
    content = _marked(content, message, where) + _tool_calls(fields.get("tool_calls"), where)
    return Message("assistant", _reasoning(fields, where) + content)


def _reasoning(fields: dict[str, Any], where: str) -> list[Block]:
    """The reasoning an answer showed (DeepSeek's and vLLM's reasoning_content, or `reasoning`), sent back."""
    for key in ("reasoning_content", "reasoning"):
        text = fields.get(key)
        if text is None:
            continue
        if not isinstance(text, str):
            raise bad_request(f"{where}.{key} must be a string", f"{where}.{key}")
        return [Thinking(text, format="chat")] if text else []
    return []


def _tool_message(message: ChatMessage, where: str) -> Message:
    # A tool message without its tool_call_id is the upstream's to refuse (OpenAI does; echo does not care).
    call_id = (message.model_extra or {}).get("tool_call_id")
    texts = _texts(message, where)
    marks = [text.cache for text in texts if text.cache]
    text = "".join(text.text for text in texts)
    return Message(
        "tool", [ToolResult(call_id if isinstance(call_id, str) else "", text, marks[-1] if marks else None)]
    )


_ROLES: dict[str, Callable[[ChatMessage, str], Message]] = {
    "user": _user,
    "assistant": _assistant,
    "tool": _tool_message,
}


def _marked(content: list[Block], message: ChatMessage, where: str) -> list[Block]:
    """A cache_control on the message itself (LiteLLM reads it so) marks its last block that can carry one."""
    declared = message.cache_control.model_dump(exclude_unset=True) if message.cache_control else None
    mark = cache_mark({**(message.model_extra or {}), "cache_control": declared}, where)
    if mark is not None:
        for block in reversed(content):
            if isinstance(block, Text | Image | Document | ToolCall | ToolResult):
                block.cache = block.cache or mark
                break
    return content


def _tool_calls(raw: Any, where: str) -> list[Block]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise bad_request(f"{where}.tool_calls must be a list", f"{where}.tool_calls")
    return [_tool_call(call, f"{where}.tool_calls.{j}") for j, call in enumerate(raw)]


def _tool_call(call: Any, where: str) -> ToolCall:
    if isinstance(call, dict) and call.get("type") == "custom":
        return _custom_call(call, where)
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        raise bad_request(f"{where} must be an object with a function", f"{where}.function")
    call_id = call.get("id")
    name = required_str(function, "name", f"{where}.function")
    return ToolCall(call_id if isinstance(call_id, str) else "", name, json_text(function.get("arguments")))


def _custom_call(call: dict[str, Any], where: str) -> ToolCall:
    """A custom tool's call: {"type": "custom", "id", "custom": {"name", "input"}}, its input free-form text."""
    custom = call.get("custom")
    if not isinstance(custom, dict):
        raise bad_request(f"{where} must be an object with a custom", f"{where}.custom")
    call_id = call.get("id")
    return ToolCall(call_id if isinstance(call_id, str) else "", required_str(custom, "name", f"{where}.custom"),
                    string_field(custom, "input", f"{where}.custom"), custom=True)


# --- content parts ---------------------------------------------------------------------------------------------------


def cache_mark(obj: dict[str, Any], where: str) -> CacheMark | None:
    """A cache_control (Anthropic's words, which LiteLLM reads in chat): {"type": "ephemeral", "ttl"?}; or OpenAI's
    own breakpoint, {"mode": "explicit"}, whose lifetimes are not Anthropic's (it takes the default one)."""
    raw = obj.get("cache_control")
    return _breakpoint(obj, where) if raw is None else read_cache_control(raw, f"{where}.cache_control")


def _breakpoint(obj: dict[str, Any], where: str) -> CacheMark | None:
    raw = obj.get("prompt_cache_breakpoint")
    if raw is None:
        return None
    if not isinstance(raw, dict) or raw.get("mode") != "explicit":
        at = f"{where}.prompt_cache_breakpoint"
        raise bad_request(f'{at} must be {{"mode": "explicit"}}', at)
    return CacheMark()


def _text(part: dict[str, Any], where: str) -> list[Block]:
    return [Text(text.text, cache_mark(part, where)) for text in text_part(part, where) if isinstance(text, Text)]


def _refusal(part: dict[str, Any], where: str) -> list[Block]:
    """An assistant's refusal part is what the model said."""
    return [Text(required_str(part, "refusal", where), cache_mark(part, where))]


def _image(part: dict[str, Any], where: str) -> list[Block]:
    at = f"{where}.image_url"
    spec = part.get("image_url")
    spec = {"url": spec} if isinstance(spec, str) else spec  # the early shorthand some clients still send
    if not isinstance(spec, dict):
        raise bad_request(f"{at} must be an object with a url", at)
    url = required_str(spec, "url", at)
    detail = spec.get("detail")
    if detail is not None and not isinstance(detail, str):
        raise bad_request(f"{at}.detail must be a string such as auto, low or high", f"{at}.detail")
    cache = cache_mark(part, where)
    if url.startswith("data:"):
        media_type, data = _data_url(url, f"{at}.url")
        return [Image(data=data, media_type=media_type, detail=detail, cache=cache)]
    return [Image(url=url, detail=detail, cache=cache)]


def _file(part: dict[str, Any], where: str) -> list[Block]:
    at = f"{where}.file"
    spec = part.get("file")
    if not isinstance(spec, dict):
        raise bad_request(f"{at} must be an object with file_data or file_id", at)
    filename = spec.get("filename")
    if filename is not None and not isinstance(filename, str):
        raise bad_request(f"{at}.filename must be a string", f"{at}.filename")
    cache = cache_mark(part, where)
    if spec.get("file_data") is not None:
        media_type, data = _data_url(required_str(spec, "file_data", at), f"{at}.file_data")
        return [Document(data=data, media_type=media_type, filename=filename, cache=cache)]
    if spec.get("file_id") is not None:
        return [Document(file_id=required_str(spec, "file_id", at), filename=filename, cache=cache)]
    raise bad_request(f"{at} must have file_data (a base64 data URL) or file_id", at)


def _data_url(url: str, param: str) -> tuple[str, str]:
    """(media type, base64 data) of a data: URL; any other kind of data URL is a 400 naming `param`."""
    parts = read_data_url(url)
    if parts is None or not all(parts):
        raise bad_request(f"{param} must be a base64 data URL: data:<media type>;base64,<data>", param)
    return parts


# input_audio (and any part type not here) stays Unknown: a chat upstream gets it, another kind refuses it.
_TEXT_PARTS: Mapping[str, PartReader] = {"text": _text}
_PARTS: Mapping[str, PartReader] = {"text": _text, "refusal": _refusal, "image_url": _image, "file": _file}


# --- tools -----------------------------------------------------------------------------------------------------------


def _tools(body: ChatCompletionRequest) -> list[Tool] | None:
    """tools, then the deprecated functions (plain function specs) as function tools."""
    tools = tool_list(body.tools, "chat", _tool)
    if not isinstance(body.functions, list):
        return tools
    legacy = [_function(spec, f"functions.{i}") for i, spec in enumerate(body.functions)]
    return [*(tools or []), *legacy]


def _tool(raw: dict[str, Any], where: str) -> AnyTool:
    kind = raw.get("type", "function")
    if kind == "custom" and isinstance(raw.get("custom"), dict):
        return custom_tool(raw["custom"], raw, "chat")
    function = raw.get("function")
    if kind != "function" or not isinstance(function, dict):
        return hosted_tool(raw, "chat")
    tool = function_tool(function, f"{where}.function", raw, "chat", "parameters")
    tool.cache = cache_mark(raw, where)
    return tool


def _function(spec: Any, where: str) -> AnyTool:
    if not isinstance(spec, dict):
        return hosted_tool(spec, "chat")
    return function_tool(spec, where, {"type": "function", "function": spec}, "chat", "parameters")


def _choice(body: ChatCompletionRequest) -> tuple[ToolChoice | None, bool]:
    """tool_choice, or else the deprecated function_call when it says none, auto or a name; and whether
    function_call was read."""
    parallel = body.parallel_tool_calls
    if body.tool_choice is not None or body.function_call is None:
        return tool_choice(body.tool_choice, "chat", OPENAI_CHOICES, ("function", "name"), parallel), False
    raw = body.function_call
    if raw in ("none", "auto"):
        return ToolChoice(raw, raw, "chat", parallel=parallel), True
    name = raw.get("name") if isinstance(raw, dict) else None
    if isinstance(name, str) and name:
        return ToolChoice("tool", raw, "chat", name=name, parallel=parallel), True
    return tool_choice(None, "chat", OPENAI_CHOICES, (), parallel), False
