"""The body a Bedrock upstream gets (Converse and ConverseStream, whose model id is in the path, not the body): any
caller's request rendered from canonical in Converse's words.

Cache marks become cachePoint blocks after the marked block; structured output is a forced tool (as for Anthropic);
what only the model takes goes in additionalModelRequestFields: Claude's `thinking`, `anthropic_beta` and a
Messages caller's `top_k`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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
from handlers.inference.formats.base import Traits, UpstreamOptions
from handlers.inference.formats.common import no_word_for, present, refuse_untranslatable, tool_input
from handlers.inference.formats.converse.vocabulary import KIND, cache_point, document_block, image_block
from handlers.inference.formats.messages.upstream import effort_thinking
from handlers.inference.formats.messages.vocabulary import output_tool_name
from handlers.inference.formats.reasoning import goes_back, thinking_allowed
from handlers.inference.formats.tools import INPUT, Crossing

_EMPTY_SCHEMA = {"type": "object", "properties": {}}
_CHOICES = {"auto": {"auto": {}}, "required": {"any": {}}}  # a canonical tool choice as Converse's toolChoice
_OUTPUT_DESCRIPTION = "Give your answer as this tool's input: it is the whole answer, in this JSON schema."
# Betas whose feature Converse carries in its own words (cachePoint, its ttl): not sent again as betas.
_CARRIED_BETAS = ("prompt-caching-", "extended-cache-ttl-")
# A Messages caller's fields that Claude on Bedrock takes as they are, in additionalModelRequestFields.
_CLAUDE_CARRIES = ("top_k",)
# Where each caller's format says "at most one tool call", for the refusal that names it.
_PARALLEL_FIELD: dict[Format, str] = {"chat": "parallel_tool_calls", "responses": "parallel_tool_calls",
                                      "messages": "tool_choice.disable_parallel_tool_use"}


def upstream_body(request: Request, model: str, options: UpstreamOptions, traits: Traits) -> dict[str, Any]:
    """The Converse body for `request` to `model` (ConverseRequest's members; the model id goes in the path)."""
    claude = is_claude(model)
    carried = _CLAUDE_CARRIES if claude and request.format == "messages" else ()
    refuse_untranslatable(request, KIND, carried)
    crossing = Crossing.of(request, "converse", KIND, traits.refuse_hosted)
    thinking = None
    if claude and thinking_allowed(request.messages, "converse"):
        thinking = effort_thinking(request, traits)
    body: dict[str, Any] = {"messages": _messages(request, crossing)}
    system = _system(request)
    inference = _inference(request, options, thinking)
    tools = _tool_config(request, thinking, crossing)
    fields = present(thinking=thinking, anthropic_beta=_betas(request) if claude else None,
                     **{name: request.extra.get(name) for name in carried})
    body.update(present(system=system or None, inferenceConfig=inference or None, toolConfig=tools,
                        additionalModelRequestFields=fields or None))
    return body


def is_claude(model: str) -> bool:
    """Whether a model id (a foundation model, an inference profile such as us.anthropic..., an ARN) is Claude's,
    which takes Anthropic's own fields in additionalModelRequestFields. An application inference profile's ARN
    does not say which model it is: it gets no such field."""
    return "anthropic." in model or "claude" in model


def _betas(request: Request) -> list[str] | None:
    """A Messages caller's anthropic-beta values, less those Converse says in its own words."""
    said = request.headers.get("anthropic-beta") if request.format == "messages" else None
    betas = [b.strip() for b in (said or "").split(",") if b.strip() and not b.strip().startswith(_CARRIED_BETAS)]
    return betas or None


def _inference(request: Request, options: UpstreamOptions, thinking: dict[str, Any] | None) -> dict[str, Any]:
    """inferenceConfig. Thinking tokens count toward maxTokens, which must exceed the budget: a limit that would not
    is raised by the budget, so the answer keeps the room the caller (or the upstream's default) gave it. Seed has
    no Converse word and is best effort by OpenAI's own definition: it is left out."""
    limit = request.max_tokens
    budget = thinking.get("budget_tokens") if thinking and thinking.get("type") == "enabled" else None
    if isinstance(budget, int) and (limit is None or limit <= budget):
        limit = budget + (request.max_tokens or options.default_max_tokens)
    return present(maxTokens=limit, temperature=request.temperature, topP=request.top_p,
                   stopSequences=request.stop or None)


def _system(request: Request) -> list[dict[str, Any]]:
    """System blocks with a cachePoint after each marked one; system messages from inside the conversation follow
    (Converse's messages are the user's and the assistant's only)."""
    parts = request.system_parts or ([Text(request.system)] if request.system else [])
    later = [Text(m.text()) for m in request.messages if m.role == "system"]
    return [block for part in [*parts, *later] if part.text for block in [{"text": part.text}, *cache_point(part.cache)]]


# --- tools ------------------------------------------------------------------------------------------------------------


def _tool_config(request: Request, thinking: dict[str, Any] | None, crossing: Crossing) -> dict[str, Any] | None:
    """toolConfig: the functions (each cache mark a cachePoint after its tool), the structured output's tool, and the
    choice among them. Converse has no "none": without tool blocks in the conversation the tools are not offered;
    with them (Converse then needs the tools) it is refused by name, as is "at most one call"."""
    choice = request.tool_choice
    if choice is not None and not choice.portable:
        raise unsupported("tool_choice", KIND, "a tool choice only its own format can say")
    mode = choice.mode if choice is not None else None
    functions = crossing.functions
    if mode == "none" and functions:
        if _uses_tools(request.messages):
            raise unsupported("tool_choice", KIND, "Converse cannot forbid the tools a conversation has used")
        functions = []
    if choice is not None and choice.parallel is False and functions:
        raise unsupported(_PARALLEL_FIELD[request.format], KIND, "Converse cannot limit the model to one tool call")
    tools = [spec for tool in functions for spec in _tool(tool)]
    if request.output is not None:
        tools.append(_output_tool(request.output))
    if not tools:
        return None
    words = _choice(request.output, bool(functions), choice, thinking, crossing)
    return {"tools": tools, **present(toolChoice=words)}


def _uses_tools(conversation: list[Message]) -> bool:
    return any(isinstance(b, ToolCall | ToolResult) for m in conversation for b in m.content)


def _tool(tool: Tool) -> list[dict[str, Any]]:
    spec = {"name": tool.name, **present(description=tool.description or None),
            "inputSchema": {"json": tool.parameters or _EMPTY_SCHEMA}}
    return [{"toolSpec": spec}, *cache_point(tool.cache)]


def _output_tool(output: OutputFormat) -> dict[str, Any]:
    """Structured output as a tool the model is made to call; its input is the answer (read back as text)."""
    schema = output.schema if output.kind == "json_schema" and output.schema else {"type": "object"}
    return {"toolSpec": {"name": output_tool_name(output.name), "description": output.description or
                         _OUTPUT_DESCRIPTION, "inputSchema": {"json": schema}}}


def _choice(output: OutputFormat | None, functions: bool, choice: ToolChoice | None, thinking: dict[str, Any] | None,
            crossing: Crossing) -> dict[str, Any] | None:
    """toolChoice. Structured output makes the model call its tool: that very tool when the caller's tools may not
    be called (or there are none), a tool the caller forced, or any tool when they may or must be. With thinking on,
    Claude takes only auto: the answer's tool is then offered, not forced."""
    mode = choice.mode if choice is not None else None
    named = {"tool": {"name": crossing.name(choice.name)}} if choice is not None and choice.name else None
    if output is not None:
        if thinking is not None and thinking.get("type") == "enabled":
            return {"auto": {}}
        if not functions:
            return {"tool": {"name": output_tool_name(output.name)}}
        return named if mode == "tool" and named else {"any": {}}
    if mode == "tool":
        return named
    return _CHOICES.get(mode or "")


# --- messages ---------------------------------------------------------------------------------------------------------


def _messages(request: Request, crossing: Crossing) -> list[dict[str, Any]]:
    """Converse messages: tool results in user turns, consecutive same-role turns merged (it alternates); system
    messages went to the system (see _system)."""
    out: list[dict[str, Any]] = []
    documents: list[str] = []  # the names given so far: Converse wants each document's its own
    for message in request.messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = list(_content(message.content, request.format, crossing, documents))
        if not blocks:
            continue  # an empty content list is refused
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _content(content: list[Block], caller: Format, crossing: Crossing, documents: list[str]
             ) -> Iterator[dict[str, Any]]:
    """The blocks of one message, each marked one followed by its cachePoint. Images and documents right after a
    tool result belong inside it (that is how canonical carries a result's pictures), as Converse allows."""
    result: dict[str, Any] | None = None
    for block in content:
        if result is not None and isinstance(block, Image | Document):
            result["content"].append(_media(block, caller, documents))
            continue
        result = None
        if isinstance(block, Text) and block.text:  # blank text blocks are refused
            yield {"text": block.text}
        elif isinstance(block, Image | Document):
            yield _media(block, caller, documents)
        elif isinstance(block, ToolCall):
            yield _tool_use(block, crossing)
        elif isinstance(block, ToolResult):
            result = _tool_result(block)
            yield {"toolResult": result}
        elif isinstance(block, Thinking):
            if (reasoning := _reasoning(block)) is not None:
                yield reasoning
            continue
        elif isinstance(block, Unknown):
            raise no_word_for(block, caller, KIND, "Converse")
        yield from cache_point(getattr(block, "cache", None))


def _media(block: Image | Document, caller: Format, documents: list[str]) -> dict[str, Any]:
    """An image, or a document under a name no other document of the request has."""
    if isinstance(block, Image):
        return image_block(block, caller)
    rendered = document_block(block, caller, len(documents) + 1)
    name = rendered["document"]["name"]
    if name in documents:
        name = rendered["document"]["name"] = f"{name[:190]} ({len(documents) + 1})"
    documents.append(name)
    return rendered


def _tool_use(block: ToolCall, crossing: Crossing) -> dict[str, Any]:
    """A call, under the name its tool was offered with; a custom tool's input as the one string it takes."""
    arguments = {INPUT: block.arguments} if block.custom else tool_input(block.arguments)
    return {"toolUse": {"toolUseId": block.id, "name": crossing.name(block.name, block.namespace), "input": arguments}}


def _tool_result(block: ToolResult) -> dict[str, Any]:
    return {"toolUseId": block.tool_call_id, "content": [{"text": block.content}] if block.content else [],
            **({"status": "error"} if block.is_error else {})}


def _reasoning(block: Thinking) -> dict[str, Any] | None:
    """Reasoning goes back only to the provider that made it (Bedrock checks Claude's signature): redacted content
    as it came, else the text with its signature (formats/reasoning.py)."""
    if not goes_back(block, "converse"):
        return None
    if block.redacted is not None:
        return {"reasoningContent": {"redactedContent": block.redacted}}
    return {"reasoningContent": {"reasoningText": {"text": block.text, **present(signature=block.signature)}}}
