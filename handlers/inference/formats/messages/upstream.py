"""The body an Anthropic upstream gets: a Messages caller's own body (passthrough), or any other caller's request
rendered from canonical in Anthropic's words."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from generated.models import MessagesRequest
from handlers.errors import unsupported
from handlers.inference.canonical import (
    Block,
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
    Unknown,
)
from handlers.inference.formats.base import Traits, UpstreamOptions
from handlers.inference.formats.common import block_param, passthrough_body, present, refuse_untranslatable, tool_input
from handlers.inference.formats.messages.vocabulary import (
    CHOICE_TYPES,
    KIND,
    cache_control_field,
    document_block,
    image_block,
    output_tool_name,
    text_block,
    thinking_block,
    tool_use_block,
)
from handlers.inference.formats.reasoning import goes_back, thinking_allowed
from handlers.inference.formats.tools import INPUT, Crossing

_EMPTY_SCHEMA = {"type": "object", "properties": {}}
_TIERS = {"low": 0, "medium": 1, "high": 2}  # the effort tiers with a thinking budget (minimal has none)
_ANTHROPIC_THINKING = frozenset({"enabled", "disabled", "adaptive"})
_OUTPUT_DESCRIPTION = "Give your answer as this tool's input: it is the whole answer, in this JSON schema."


def upstream_body(request: Request, model: str, options: UpstreamOptions, traits: Traits) -> dict[str, Any]:
    """The Messages body for `request` (without the streaming flag)."""
    if request.format == "messages":
        return _passthrough(request, model, options, traits)
    return _translated(request, model, options, traits)


# --- a Messages caller's own body -------------------------------------------------------------------------------------


def _passthrough(request: Request, model: str, options: UpstreamOptions, traits: Traits) -> dict[str, Any]:
    """The caller's body as written (cache_control, thinking blocks and signatures, images, documents, tools,
    output_config...), with what the gateway owns rewritten: the model, max_tokens, and the effort fields."""
    body = passthrough_body(request, MessagesRequest, model, options)
    body["max_tokens"] = request.max_tokens if request.max_tokens is not None else options.default_max_tokens
    if isinstance(body.get("messages"), list):
        body["messages"] = [_without_unsigned_thinking(message) for message in body["messages"]]
    thinking = body.pop("thinking", None)
    if not traits.reasoning:
        # Effort was a routing input only: a model the catalog does not mark as reasoning gets no effort field.
        _drop_output_effort(body)
        return body
    if isinstance(thinking, dict) and thinking.get("type") in _ANTHROPIC_THINKING:
        wanted: dict[str, Any] | None = thinking  # Anthropic's own words, as the caller wrote them
    else:  # this gateway's own forms (an effort word): Anthropic's words for the tier
        wanted = effort_thinking(request, traits) if thinking is not None else None
    if wanted is not None and (wanted.get("type") == "disabled" or thinking_allowed(request.messages)):
        body["thinking"] = wanted
    _room_for_thinking(body, request, options)
    return body


def _without_unsigned_thinking(message: Any) -> Any:
    """A thinking block with an empty signature is one this gateway gave to another provider's reasoning; Anthropic
    refuses it, and thinking goes back only to the provider that made it. Every other block goes as written."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list) or not any(_unsigned_thinking(block) for block in content):
        return message
    return {**message, "content": [block for block in content if not _unsigned_thinking(block)]}


def _unsigned_thinking(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "thinking" and not block.get("signature")


def _drop_output_effort(body: dict[str, Any]) -> None:
    config = body.get("output_config")
    if isinstance(config, dict) and "effort" in config:
        rest = {key: value for key, value in config.items() if key != "effort"}
        if rest:
            body["output_config"] = rest
        else:
            del body["output_config"]


# --- effort -------------------------------------------------------------------------------------------------------


def effort_thinking(request: Request, traits: Traits) -> dict[str, Any] | None:
    """Anthropic's thinking for a reasoning model: off when the caller turned reasoning off, else a budget (the
    caller's own, or the policy's for the effort tier). Minimal effort, or a word with no tier, is no thinking."""
    if not traits.reasoning:
        return None
    if request.thinking is False:
        return {"type": "disabled"}
    tier = _TIERS.get(request.effort or "")
    budget = request.thinking_budget or (traits.thinking_budgets[tier] if tier is not None else None)
    return {"type": "enabled", "budget_tokens": budget} if budget else None


def _room_for_thinking(body: dict[str, Any], request: Request, options: UpstreamOptions) -> None:
    """Thinking tokens count toward max_tokens, which must exceed the budget: a limit that would not is raised by
    the budget, so the answer keeps the room the caller (or the upstream's default) gave it."""
    thinking = body.get("thinking")
    budget = thinking.get("budget_tokens") if isinstance(thinking, dict) and thinking.get("type") == "enabled" else None
    if isinstance(budget, int) and body["max_tokens"] <= budget:
        body["max_tokens"] = budget + (request.max_tokens or options.default_max_tokens)


# --- any other caller's request ------------------------------------------------------------------------------------


# Fields of another format (Request.extra) that Messages has too, by their Messages name: Gemini's topK (which
# Gemini CLI always sends) is Anthropic's top_k.
_SHARED = {"generationConfig.topK": "top_k"}


def _carried(request: Request) -> dict[str, Any]:
    """Another format's fields that Messages has too, by the caller's names (whole numbers, as top_k takes them)."""
    return {key: int(value) if isinstance(value, float) and value.is_integer() else value
            for key, value in request.extra.items() if key in _SHARED and value is not None}


def _translated(request: Request, model: str, options: UpstreamOptions, traits: Traits) -> dict[str, Any]:
    carried = _carried(request)
    refuse_untranslatable(request, KIND, carried)
    crossing = Crossing.of(request, "messages", KIND, traits.refuse_hosted)
    max_tokens = request.max_tokens if request.max_tokens is not None else options.default_max_tokens
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens,
                            "messages": _upstream_messages(request.messages, crossing)}
    # seed has no Anthropic word and is best effort by OpenAI's own definition: it is left out.
    body.update(present(system=_system(request), temperature=request.temperature, top_p=request.top_p,
                        stop_sequences=request.stop))
    body.update({_SHARED[key]: value for key, value in carried.items()})
    thinking = effort_thinking(request, traits) if thinking_allowed(request.messages) else None
    body.update(present(thinking=thinking))
    tools = [*(_upstream_tool(t) for t in crossing.functions), *crossing.hosted]
    if request.output is not None:
        tools.append(_output_tool(request.output))
    if tools:
        body["tools"] = tools
    body.update(present(tool_choice=_upstream_choice(request, thinking, crossing)))
    _room_for_thinking(body, request, options)
    return body


def _system(request: Request) -> str | list[dict[str, Any]] | None:
    """System blocks with their cache marks when the caller sent blocks, else the system text."""
    if request.system_parts and any(part.cache for part in request.system_parts):
        return [text_block(part.text, part.cache) for part in request.system_parts if part.text] or None
    return request.system or None


def _upstream_tool(tool: Tool) -> dict[str, Any]:
    if tool.format == "messages" and isinstance(tool.raw, dict):
        return tool.raw  # Anthropic's own words, as the caller wrote them
    return {
        "name": tool.name,
        **present(description=tool.description),
        "input_schema": tool.parameters or _EMPTY_SCHEMA,
        **cache_control_field(tool.cache),
    }


def _output_tool(output: OutputFormat) -> dict[str, Any]:
    """Structured output as a tool the model is made to call; its input is the answer (read back as text)."""
    schema = output.schema if output.kind == "json_schema" and output.schema else {"type": "object"}
    return {
        "name": output_tool_name(output.name),
        "description": output.description or _OUTPUT_DESCRIPTION,
        "input_schema": schema,
        **({"strict": True} if output.strict else {}),
    }


def _upstream_choice(request: Request, thinking: dict[str, Any] | None, crossing: Crossing) -> dict[str, Any] | None:
    """Another format's tool choice; "at most one call" (parallel_tool_calls false) goes inside it."""
    choice = request.tool_choice
    if choice is not None and not choice.portable:
        raise unsupported("tool_choice", KIND, "a tool choice only its own format can say")
    if request.output is not None:
        out = _output_choice(request.output, bool(request.tools), choice, thinking, crossing)
    elif request.tools and choice is not None:
        out = _choice_words(choice, crossing)
    else:
        return None  # Anthropic refuses a tool choice without tools
    if choice is not None and choice.parallel is False and out["type"] != "none":
        out["disable_parallel_tool_use"] = True
    return out


def _choice_words(choice: ToolChoice, crossing: Crossing) -> dict[str, Any]:
    name = crossing.name(choice.name) if choice.name else None
    return {"type": CHOICE_TYPES[choice.mode or "auto"], **present(name=name)}


def _output_choice(output: OutputFormat, tools: bool, choice: ToolChoice | None, thinking: dict[str, Any] | None,
                   crossing: Crossing) -> dict[str, Any]:
    """Structured output makes the model call its tool: that very tool when the caller's tools may not (or there are
    none), a tool the caller forced, or any tool (the caller's or the answer) when they may or must be called. With
    thinking on Anthropic takes only auto: the answer's tool is then offered, not forced."""
    mode = choice.mode if choice is not None else None
    if thinking is not None and thinking.get("type") == "enabled":
        return {"type": "auto"}
    if not tools or mode == "none":
        return {"type": "tool", "name": output_tool_name(output.name)}
    if mode == "tool" and choice is not None:
        return _choice_words(choice, crossing)
    return {"type": "any"}


# --- messages -------------------------------------------------------------------------------------------------------


def _upstream_messages(conversation: list[Message], crossing: Crossing) -> list[dict[str, Any]]:
    """Messages API messages: tool results go in user turns, and consecutive same-role turns merge (it alternates);
    a system message stays at its place (Anthropic reads it there)."""
    out: list[dict[str, Any]] = []
    for message in conversation:
        role = message.role if message.role in ("assistant", "system") else "user"
        blocks = _content(message.content, crossing)
        if not blocks:
            continue  # an empty content list is rejected
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _content(content: list[Block], crossing: Crossing) -> list[dict[str, Any]]:
    """The blocks of one message. Images and documents right after a tool result belong inside it (that is how
    canonical carries a result's pictures), as Anthropic allows."""
    out: list[dict[str, Any]] = []
    result: dict[str, Any] | None = None
    for block in content:
        converted = _tool_use(block, crossing) if isinstance(block, ToolCall) else _BLOCKS[type(block)](block)
        if converted is None:
            continue
        if result is not None and isinstance(block, Image | Document):
            _attach(result, converted)
            continue
        result = converted if isinstance(block, ToolResult) else None
        out.append(converted)
    return out


def _attach(result: dict[str, Any], block: dict[str, Any]) -> None:
    """A block inside a tool result, whose text content becomes a text block."""
    content = result["content"]
    if isinstance(content, str):
        content = [text_block(content)] if content else []
    result["content"] = [*content, block]


def _text(block: Text) -> dict[str, Any] | None:
    return text_block(block.text, block.cache) if block.text else None  # empty text blocks are rejected


def _tool_use(block: ToolCall, crossing: Crossing) -> dict[str, Any]:
    """A call, under the name its tool was offered with; a custom tool's input as the one string it takes."""
    arguments = {INPUT: block.arguments} if block.custom else tool_input(block.arguments)
    return tool_use_block(block.id, crossing.name(block.name, block.namespace), arguments, block.cache)


def _tool_result(block: ToolResult) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": block.tool_call_id,
        "content": block.content,
        **({"is_error": True} if block.is_error else {}),
        **cache_control_field(block.cache),
    }


def _thinking(block: Thinking) -> dict[str, Any] | None:
    """Reasoning goes back only to the provider that made it, signed (Anthropic refuses an unsigned block)."""
    return thinking_block(block) if goes_back(block, "messages") else None


def _unknown(block: Unknown) -> dict[str, Any]:
    if block.format != "messages":
        kind = block.data.get("type")
        raise unsupported(block_param(block, block.format, None, str(kind or "content")), KIND,
                          f"a {block.format} content part ({kind}) with no Anthropic word")
    return block.data


_BLOCKS: dict[type, Callable[[Any], dict[str, Any] | None]] = {
    Text: _text,
    Image: image_block,
    Document: document_block,
    Thinking: _thinking,
    ToolResult: _tool_result,
    Unknown: _unknown,
}
