"""Chat Completions as an upstream takes it (OpenAI and the compatible servers): the canonical Request into its body."""

from __future__ import annotations

from typing import Any

import orjson

from generated.models import ChatCompletionRequest
from handlers.errors import unsupported
from handlers.inference.canonical import (
    Block,
    Document,
    Format,
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
    Unknown,
)
from handlers.inference.formats.base import FORMATS, Traits, UpstreamOptions
from handlers.inference.formats.chat.vocabulary import THINKING_GAP, VOCABULARY
from handlers.inference.formats.common import (
    block_param,
    merge_extra,
    passthrough_body,
    present,
    refuse_untranslatable,
    write_data_url,
)
from handlers.inference.formats.reasoning import goes_back
from handlers.inference.formats.tool_reading import OPENAI_CHOICES
from handlers.inference.formats.tools import INPUT, Crossing

KIND = VOCABULARY.kind
# A canonical tool choice in chat's words; "tool" names its tool in an object instead.
_CHOICE_WORDS = {mode: word for word, mode in OPENAI_CHOICES[0].items()}
_LIMITS = ("max_tokens", "max_completion_tokens")
# Fields of Responses (Request.extra of a Responses caller) that Chat Completions has too, by their chat name.
_SHARED = {"text.verbosity": "verbosity"}
# A file sent as data needs a name upstream; these are used when the caller gave none.
_FILENAMES = {"application/pdf": "document.pdf", "text/plain": "document.txt"}


def upstream_body(request: Request, model: str, options: UpstreamOptions, traits: Traits) -> dict[str, Any]:
    """The Chat Completions body for `request` (without the streaming fields): a chat caller's own body with what
    the gateway owns rewritten, or another format's request rendered from canonical."""
    if request.format == "chat" and request.extra.get("n") not in (None, 1):
        raise unsupported("n", KIND, "the gateway returns one choice")
    caller_effort = None
    if request.format == "chat" and request.body:
        body = passthrough_body(request, ChatCompletionRequest, model, options)
        caller_effort = body.pop("reasoning_effort", None)  # the caller's own word ("none", "xhigh"...) is chat's
    else:
        body = _translated(request, model, traits)
    for key in _LIMITS:
        body.pop(key, None)
    if request.max_tokens is not None:
        # OpenAI's reasoning models refuse max_tokens; many compatible servers know only max_tokens.
        body["max_completion_tokens" if traits.reasoning else "max_tokens"] = request.max_tokens
    # Only a model the catalog marks as reasoning gets an effort: for any other the effort was a routing input only
    # (most models refuse reasoning_effort).
    if traits.reasoning and (caller_effort or request.effort):
        body["reasoning_effort"] = caller_effort or request.effort
    return body


def _translated(request: Request, model: str, traits: Traits) -> dict[str, Any]:
    """Everything canonical carries, in chat's words. Cache marks have none: OpenAI caches prompt prefixes by
    itself (and a compatible server could refuse cache_control). Another provider's thinking is left out."""
    own = request.format == "chat"  # a chat request the gateway built itself, without a caller's body
    carried = _carried(request)
    if not own:
        refuse_untranslatable(request, KIND, carried)
    crossing = Crossing() if own else Crossing.of(request, "chat", KIND, traits.refuse_hosted)
    body: dict[str, Any] = {"model": model, "messages": _messages(request, crossing)}
    body.update({_SHARED[key]: value for key, value in carried.items()})
    # The token limit and the effort are set by upstream_body, for every request alike.
    body.update(present(temperature=request.temperature, top_p=request.top_p, stop=request.stop, seed=request.seed))
    own_tools = [_tool(t) if isinstance(t, Tool) else t.raw for t in request.tools or ()]
    tools = own_tools if own else [_tool(t) for t in crossing.functions]
    if tools:
        body["tools"] = tools
    choice = request.tool_choice
    if own:
        body.update(present(tool_choice=choice.raw if choice else None, response_format=request.response_format))
        merge_extra(body, request.extra)
        return body
    if tools and choice and choice.portable:  # OpenAI refuses a tool choice without tools
        body.update(_tool_choice(choice, crossing))
    if request.output is not None:
        body["response_format"] = _response_format(request.output)
    return body


def _carried(request: Request) -> dict[str, Any]:
    """A Responses caller's fields that chat has too (text.verbosity is chat's verbosity), by the caller's names; at
    their inert value they ask for nothing and stay out (a server without verbosity keeps working)."""
    if request.format != "responses":
        return {}
    rules = FORMATS[request.format].VOCABULARY.fields
    return {key: value for key, value in request.extra.items() if key in _SHARED and not rules.droppable(key, value)}


def _tool_choice(choice: ToolChoice, crossing: Crossing) -> dict[str, Any]:
    """Another format's tool choice as chat's tool_choice, and "at most one call" as parallel_tool_calls."""
    named = {"type": "function", "function": {"name": crossing.name(choice.name or "")}}
    return {
        "tool_choice": _CHOICE_WORDS.get(choice.mode, named) if choice.mode else named,
        **present(parallel_tool_calls=choice.parallel),
    }


def _response_format(output: OutputFormat) -> dict[str, Any]:
    if output.kind == "json_object":
        return {"type": "json_object"}
    spec = {
        "name": output.name or "output",
        **present(description=output.description, schema=output.schema, strict=output.strict),
    }
    return {"type": "json_schema", "json_schema": spec}


def _tool(tool: Tool) -> dict[str, Any]:
    if tool.format == "chat" and isinstance(tool.raw, dict):
        return tool.raw  # chat's own words, as the caller wrote them
    function = {"name": tool.name, **present(description=tool.description), "parameters": tool.parameters}
    return {"type": "function", "function": function}


# --- messages --------------------------------------------------------------------------------------------------------


def _messages(request: Request, crossing: Crossing) -> list[dict[str, Any]]:
    out = [{"role": "system", "content": request.system}] if request.system is not None else []
    for message in request.messages:
        out.extend(_message(message, request.format, crossing))
    return out


def _message(message: Message, fmt: Format, crossing: Crossing) -> list[dict[str, Any]]:
    """One canonical message as chat messages: its tool results first (each a "tool" message), then the rest."""
    blocks = message.content
    out: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": b.tool_call_id, "content": b.content}
        for b in blocks
        if isinstance(b, ToolResult)
    ]
    calls = [_call(b, crossing) for b in blocks if isinstance(b, ToolCall)]
    parts = [part for b in blocks if (part := _part(b, fmt)) is not None]
    # Reasoning goes back only to the kind of provider that showed it (DeepSeek asks for it with tool calls).
    reasoning = THINKING_GAP.join(b.text for b in blocks if isinstance(b, Thinking) and goes_back(b, "chat"))
    if parts or calls or reasoning:
        chat: dict[str, Any] = {"role": "user" if message.role == "tool" else message.role, "content": _content(parts)}
        if reasoning:
            chat["reasoning_content"] = reasoning
        if calls:
            chat["tool_calls"] = calls
        out.append(chat)
    return out


def _call(block: ToolCall, crossing: Crossing) -> dict[str, Any]:
    """A call under the name its tool was offered with; a custom tool's input as the one string it takes."""
    arguments = orjson.dumps({INPUT: block.arguments}).decode() if block.custom else block.arguments
    return {"id": block.id, "type": "function",
            "function": {"name": crossing.name(block.name, block.namespace), "arguments": arguments}}


def _part(block: Block, fmt: Format) -> dict[str, Any] | None:
    if isinstance(block, Text):
        return {"type": "text", "text": block.text}
    if isinstance(block, Image):
        return _image(block, fmt)
    if isinstance(block, Document):
        return _document(block, fmt)
    if isinstance(block, Unknown):
        if block.format != "chat":
            kind = block.data.get("type")
            raise unsupported(block_param(block, fmt, None, str(kind or "content")), KIND,
                              f"Chat Completions has no such content part ({kind})")
        return block.data
    return None  # thinking, tool calls and results have places of their own


def _image(block: Image, fmt: Format) -> dict[str, Any]:
    if block.url is not None:
        url = block.url
    elif block.data is not None:
        url = write_data_url(block.media_type, block.data)
    else:
        raise unsupported(block_param(block, fmt, "file_id", "image.file_id"), KIND,
                          "Chat Completions takes an image's URL or data, not a file id")
    return {"type": "image_url", "image_url": {"url": url, **present(detail=block.detail)}}


def _document(block: Document, fmt: Format) -> dict[str, Any]:
    data = block.base64()
    if data is not None:
        media_type = block.media_type or "application/pdf"
        name = block.filename or _FILENAMES.get(media_type, "document")
        return {"type": "file", "file": {"filename": name, "file_data": write_data_url(media_type, data)}}
    if block.file_id is not None:
        if fmt != "responses":  # a Responses caller's file is an OpenAI file; another provider's is unknown here
            raise unsupported(block_param(block, fmt, "file_id", "document.file_id"), KIND,
                              "the file was uploaded to another provider")
        return {"type": "file", "file": {"file_id": block.file_id, **present(filename=block.filename)}}
    raise unsupported(block_param(block, fmt, "url", "document.url"), KIND,
                      "Chat Completions takes a file's data or id, not its URL")


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]] | None:
    """A plain string when every part is text (what every compatible server accepts), else the parts."""
    if not parts:
        return None
    if all(part.get("type") == "text" and set(part) == {"type", "text"} for part in parts):
        return "".join(part["text"] for part in parts)
    return parts
