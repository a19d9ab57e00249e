"""OpenAI Responses as an upstream speaks it: the canonical Request into a Responses body."""

from __future__ import annotations

import mimetypes
from typing import Any

from generated.models import ResponsesRequest
from handlers.errors import unsupported
from handlers.inference.canonical import (
    Block,
    CustomTool,
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
from handlers.inference.formats.common import (
    block_param,
    passthrough_body,
    present,
    refuse_untranslatable,
    write_data_url,
)
from handlers.inference.formats.reasoning import carried, goes_back
from handlers.inference.formats.responses.answer import summary
from handlers.inference.formats.responses.vocabulary import ENCRYPTED, KIND
from handlers.inference.formats.tool_reading import OPENAI_CHOICES
from handlers.inference.formats.tools import Crossing

_CHOICE_WORDS: dict[str, str] = {mode: word for word, mode in OPENAI_CHOICES[0].items()}
# Fields of Chat Completions (Request.extra of a chat caller) that Responses names and means alike: carried over.
_SHARED = (
    "user",
    "metadata",
    "service_tier",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "verbosity",
)


def upstream_body(request: Request, model: str, options: UpstreamOptions, traits: Traits) -> dict[str, Any]:
    """The Responses body for `request` (without the streaming fields). store is always false: Specway keeps no
    state and relies on none upstream, so every request carries its whole conversation."""
    same = request.format == "responses"
    body = _passthrough(request, model, options) if same else _translated(request, model, traits)
    _effort(body, request, traits)
    if same and traits.reasoning:
        _include_encrypted_reasoning(body)
    body["store"] = False
    return body


def _passthrough(request: Request, model: str, options: UpstreamOptions) -> dict[str, Any]:
    """The caller's own body, less the reasoning items OpenAI did not encrypt: this gateway gave them to another
    provider's reasoning, and with store false OpenAI refuses an item it cannot read ("not found")."""
    body = passthrough_body(request, ResponsesRequest, model, options)
    given = body.get("input")
    if isinstance(given, list) and any(_unreadable_reasoning(item) for item in given):
        body["input"] = [item for item in given if not _unreadable_reasoning(item)]
    return body


def _unreadable_reasoning(item: Any) -> bool:
    """A reasoning item OpenAI did not encrypt: none at all, or the gateway's token of Anthropic's thinking."""
    if not isinstance(item, dict) or item.get("type") != "reasoning":
        return False
    encrypted = item.get("encrypted_content")
    return not encrypted or (isinstance(encrypted, str) and carried(encrypted))


def _effort(body: dict[str, Any], request: Request, traits: Traits) -> None:
    """reasoning.effort is the relay's tier word, for a model the catalog says reasons; for any other model effort was
    a routing input only and no effort is sent (OpenAI refuses it there). The caller's other reasoning fields
    (summary ...) stay."""
    settings = body.pop("reasoning", None)
    reasoning = {k: v for k, v in settings.items() if k != "effort"} if isinstance(settings, dict) else {}
    if traits.reasoning and request.effort:
        reasoning["effort"] = request.effort
    if reasoning:
        body["reasoning"] = reasoning


def _include_encrypted_reasoning(body: dict[str, Any]) -> None:
    """A reasoning model's items come back to a Responses caller with their encrypted content: with store false, that
    is the only way the caller can send them back next turn."""
    include = body.get("include") or []
    if isinstance(include, list) and ENCRYPTED not in include:
        body["include"] = [*include, ENCRYPTED]


# --- from another format --------------------------------------------------------------------------------------------


def _translated(request: Request, model: str, traits: Traits) -> dict[str, Any]:
    """Everything canonical carries, in Responses' words. Cache marks need none: OpenAI caches prompt prefixes by
    itself. Thinking of another provider is left out (it goes back only to the provider that made it)."""
    carried = _carried(request)
    refuse_untranslatable(request, KIND, carried.keys())
    _refuse_unsayable(request)
    crossing = Crossing.of(request, "responses", KIND, traits.refuse_hosted)
    custom = {b.id for m in request.messages for b in m.content if isinstance(b, ToolCall) and b.custom}
    body: dict[str, Any] = {"model": model,
                            "input": [item for m in request.messages for item in _items(m, request, custom)]}
    body.update(
        present(
            instructions=request.system,
            max_output_tokens=request.max_tokens,
            temperature=request.temperature,
            top_p=request.top_p,
        )
    )
    tools = [*(_tool(t) for t in crossing.functions), *(_custom(t) for t in crossing.custom), *crossing.hosted]
    if tools:
        body["tools"] = tools
        if request.tool_choice is not None and request.tool_choice.portable:  # OpenAI refuses a choice without tools
            body.update(_tool_choice(request.tool_choice))
    text = present(
        format=_text_format(request.output) if request.output else None, verbosity=carried.pop("verbosity", None)
    )
    if text:
        body["text"] = text
    return body | carried


def _carried(request: Request) -> dict[str, Any]:
    """A chat caller's fields Responses has too (verbosity goes under text)."""
    if request.format != "chat":
        return {}
    return {key: request.extra[key] for key in _SHARED if request.extra.get(key) is not None}


def _refuse_unsayable(request: Request) -> None:
    if request.stop:
        stop = FORMATS[request.format].VOCABULARY.stop_field
        raise unsupported(stop, KIND, "the Responses API has no stop sequences")
    if request.seed is not None:
        raise unsupported("seed", KIND, "the Responses API takes no seed")


def _items(message: Message, request: Request, custom: set[str]) -> list[dict[str, Any]]:
    """One canonical message as Responses input items, in order: runs of text, images and files are one message;
    function calls, their outputs and reasoning are items of their own. A system message at its place is a
    developer message; `custom` are the ids of custom tools' calls (their outputs are custom_tool_call_output)."""
    role = {"assistant": "assistant", "system": "developer"}.get(message.role, "user")
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in message.content:
        part = _part(block, role, request.format)
        if part is not None:
            parts.append(part)
            continue
        if parts:
            out.append(_message(role, parts))
            parts = []
        item = _item(block, custom)
        if item is not None:
            out.append(item)
    if parts:
        out.append(_message(role, parts))
    return out


def _message(role: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    if role == "assistant":  # an assistant's earlier words as plain text, which every Responses server takes
        return {"type": "message", "role": "assistant", "content": "".join(part["text"] for part in parts)}
    return {"type": "message", "role": role, "content": parts}


def _part(block: Block, role: str, caller: Format) -> dict[str, Any] | None:
    if isinstance(block, Text):
        return {"type": "output_text" if role == "assistant" else "input_text", "text": block.text}
    if not isinstance(block, Image | Document):
        return None
    if role == "assistant":
        what = "image" if isinstance(block, Image) else "document"
        raise unsupported(block_param(block, caller, None, what), KIND, "an assistant message there is text only")
    return _image(block, caller) if isinstance(block, Image) else _file(block, caller)


def _image(block: Image, caller: Format) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "input_image", "detail": block.detail or "auto"}
    if block.file_id is not None:
        part["file_id"] = _openai_file(block, block.file_id, caller)
    else:
        part["image_url"] = write_data_url(block.media_type, block.data) if block.data is not None else block.url
    return part


def _file(block: Document, caller: Format) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "input_file"}
    if block.file_id is not None:
        part["file_id"] = _openai_file(block, block.file_id, caller)
    elif (data := block.base64()) is not None:  # OpenAI wants a filename with inline data
        part["file_data"] = write_data_url(block.media_type, data)
        part["filename"] = block.filename or "document" + (mimetypes.guess_extension(block.media_type or "") or "")
    else:
        part["file_url"] = block.url
        part.update(present(filename=block.filename))
    return part


def _openai_file(block: Image | Document, file_id: str, caller: Format) -> str:
    """A file id means something only to the provider it was uploaded to: OpenAI's (chat or responses callers)."""
    if caller not in ("chat", "responses"):
        what = "image" if isinstance(block, Image) else "document"
        raise unsupported(block_param(block, caller, "file_id", f"{what} file_id"), KIND,
                          "the file was uploaded to another provider")
    return file_id


def _item(block: Block, custom: set[str]) -> dict[str, Any] | None:
    if isinstance(block, ToolCall) and block.custom:
        return {"type": "custom_tool_call", "call_id": block.id, "name": block.name, "input": block.arguments}
    if isinstance(block, ToolCall):
        return {"type": "function_call", "call_id": block.id, "name": block.name, "arguments": block.arguments}
    if isinstance(block, ToolResult):  # Responses has no error flag: the output's words say it
        kind = "custom_tool_call_output" if block.tool_call_id in custom else "function_call_output"
        return {"type": kind, "call_id": block.tool_call_id, "output": block.content}
    if isinstance(block, Thinking):
        return _reasoning_item(block)
    if isinstance(block, Unknown):  # a part or item only the caller's format has
        kind = block.data.get("type")
        kind = kind if isinstance(kind, str) else "content"
        raise unsupported(block_param(block, block.format, None, kind), KIND, f"a {kind} is {block.format}'s own")
    return None


def _reasoning_item(block: Thinking) -> dict[str, Any] | None:
    """OpenAI's own reasoning goes back with its encrypted content; any other provider's is left out."""
    if not goes_back(block, "responses") or block.encrypted is None:
        return None
    parts = [summary(block.text)] if block.text else []
    return {"type": "reasoning", **present(id=block.id), "summary": parts, "encrypted_content": block.encrypted}


def _tool(tool: Tool) -> dict[str, Any]:
    # strict false: Responses makes function tools strict by default, which another format's schemas never asked for
    return {"type": "function", "name": tool.name, **present(description=tool.description),
            "parameters": tool.parameters, "strict": False}  # fmt: skip


def _custom(tool: CustomTool) -> dict[str, Any]:
    grammar = {"format": {"type": "grammar", **tool.grammar}} if tool.grammar else {}
    return {"type": "custom", "name": tool.name, **present(description=tool.description), **grammar}


def _tool_choice(choice: ToolChoice) -> dict[str, Any]:
    """Another format's tool choice in Responses' words, and "at most one call" as parallel_tool_calls."""
    named = {"type": "function", "name": choice.name}
    return {"tool_choice": _CHOICE_WORDS.get(choice.mode or "", named), **present(parallel_tool_calls=choice.parallel)}


def _text_format(output: OutputFormat) -> dict[str, Any]:
    if output.kind == "json_object":
        return {"type": "json_object"}
    fmt = {"type": "json_schema", "name": output.name or "json_output", "schema": output.schema or {}}
    return fmt | present(strict=output.strict, description=output.description)
