"""The body a Gemini upstream gets (generateContent and streamGenerateContent, whose model is in the path, not the
body): a Gemini caller's own body (passthrough), or any other caller's request rendered from canonical in Gemini's
words.

Tools go as function declarations with their JSON schema as it is (parametersJsonSchema), structured output as
responseJsonSchema, the effort as thinkingConfig (a thinking level for Gemini 3, a budget for the models before),
tool results as functionResponse parts named after the call they answer. Prompt-cache marks say nothing to Gemini,
which caches prefixes itself: they are not sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from generated.models import GeminiGenerateContentRequest
from handlers.errors import unsupported
from handlers.inference.canonical import (
    Block,
    Document,
    Format,
    Image,
    Message,
    Request,
    Text,
    Thinking,
    Tool,
    ToolCall,
    ToolResult,
    Unknown,
)
from handlers.inference.formats.base import Traits, UpstreamOptions
from handlers.inference.formats.common import (
    no_word_for,
    passthrough_body,
    present,
    refuse_untranslatable,
    tool_input,
)
from handlers.inference.formats.gemini.vocabulary import KIND, media_part, pick
from handlers.inference.formats.reasoning import goes_back
from handlers.inference.formats.tools import INPUT, Crossing

_CHOICES = {"auto": "AUTO", "none": "NONE", "required": "ANY", "tool": "ANY"}  # canonical -> functionCallingConfig
_TIERS = {"low": 0, "medium": 1, "high": 2}  # the effort tiers with a thinking budget
FOREIGN_SIGNATURE = "skip_thought_signature_validator"
_LEVELS = frozenset({"minimal", "low", "medium", "high"})  # Gemini 3's thinkingLevel words
# Fields of the callers' formats canonical does not model that Gemini has a word for (in generationConfig).
_CARRIED: dict[str, dict[str, str]] = {
    "chat": {"frequency_penalty": "frequencyPenalty", "presence_penalty": "presencePenalty"},
    "messages": {"top_k": "topK"},
}
# Where each caller's format says "at most one tool call", for the refusal that names it.
_PARALLEL_FIELD: dict[Format, str] = {"chat": "parallel_tool_calls", "responses": "parallel_tool_calls",
                                      "messages": "tool_choice.disable_parallel_tool_use"}


def upstream_body(request: Request, model: str, options: UpstreamOptions, traits: Traits) -> dict[str, Any]:
    """The GenerateContentRequest for `request` to `model` (its name goes in the path)."""
    if request.format == "gemini":
        return _passthrough(request, model, options, traits)
    carried = _CARRIED.get(request.format, {})
    refuse_untranslatable(request, KIND, carried)
    crossing = Crossing.of(request, "gemini", KIND, traits.refuse_hosted)  # type: ignore[arg-type]
    body: dict[str, Any] = {"contents": _contents(request, model, crossing)}
    system = _system(request)
    tools = _tools(crossing)
    body.update(present(systemInstruction={"parts": system} if system else None, tools=tools or None,
                        toolConfig=_tool_config(request, crossing, bool(tools)),
                        generationConfig=_generation(request, model, traits, carried) or None))
    return body


def _passthrough(request: Request, model: str, options: UpstreamOptions, traits: Traits) -> dict[str, Any]:
    """A Gemini caller's body as written (its parts and thought signatures, safety settings, cached content, tools
    and configuration, in either of Google's spellings), without the model (the path names it). A model the catalog
    does not mark as reasoning gets no thinkingConfig: the effort was a routing input only."""
    body = passthrough_body(request, GeminiGenerateContentRequest, model, options)
    body.pop("model", None)
    config = pick(body, "generationConfig")
    if not traits.reasoning and isinstance(config, dict):
        kept = {k: v for k, v in config.items() if k not in ("thinkingConfig", "thinking_config")}
        key = "generationConfig" if "generationConfig" in body else "generation_config"
        if kept:
            body[key] = kept
        else:
            del body[key]
    return body


def _system(request: Request) -> list[dict[str, Any]]:
    """The system as parts; system messages from inside the conversation follow (Gemini's contents are the user's
    and the model's only)."""
    parts = request.system_parts or ([Text(request.system)] if request.system else [])
    later = [Text(m.text()) for m in request.messages if m.role == "system"]
    return [{"text": part.text} for part in [*parts, *later] if part.text]


def _generation(request: Request, model: str, traits: Traits, carried: dict[str, str]) -> dict[str, Any]:
    """generationConfig. The caller's limit goes as it is: Gemini's thoughts count toward maxOutputTokens, as
    reasoning counts toward OpenAI's and Anthropic's limits."""
    output = request.output
    config = present(temperature=request.temperature, topP=request.top_p, maxOutputTokens=request.max_tokens,
                     stopSequences=request.stop or None, seed=request.seed,
                     thinkingConfig=_thinking(request, model, traits),
                     **{word: request.extra.get(field) for field, word in carried.items()})
    if output is not None:
        config["responseMimeType"] = "application/json"
        if output.kind == "json_schema" and output.schema:
            config["responseJsonSchema"] = output.schema
    return config


def _thinking(request: Request, model: str, traits: Traits) -> dict[str, Any] | None:
    """thinkingConfig for a reasoning model: Gemini 3 takes a level (the effort's word), the models before a budget
    (the caller's own, or the policy's for the effort tier; 0 turns thinking off where the model allows it). The
    thoughts' summaries are asked for, so that a caller of any format sees the reasoning it paid for."""
    if not traits.reasoning:
        return None
    if request.thinking is False:
        return {"thinkingLevel": "minimal"} if _levels(model) else {"thinkingBudget": 0}
    if _levels(model) and request.effort in _LEVELS:
        return {"thinkingLevel": request.effort, "includeThoughts": True}
    tier = _TIERS.get(request.effort or "")
    budget = request.thinking_budget or (traits.thinking_budgets[tier] if tier is not None else None)
    return {"thinkingBudget": budget, "includeThoughts": True} if budget else None


def _levels(model: str) -> bool:
    """Whether the model takes a thinking level rather than a budget (Gemini 3 and later)."""
    name = model.rsplit("/", 1)[-1]
    if not name.startswith("gemini-"):
        return False
    major = name.removeprefix("gemini-").split("-", 1)[0].split(".", 1)[0]
    return major.isdigit() and int(major) >= 3


# --- tools ------------------------------------------------------------------------------------------------------------


def _tools(crossing: Crossing) -> list[dict[str, Any]]:
    """One Tool of every function declaration, then each hosted tool Gemini has (Google Search) as a Tool of its
    own."""
    declarations = [_declaration(tool) for tool in crossing.functions]
    return [*([{"functionDeclarations": declarations}] if declarations else []), *crossing.hosted]


def _declaration(tool: Tool) -> dict[str, Any]:
    return {"name": tool.name, **present(description=tool.description or None),
            **({"parametersJsonSchema": tool.parameters} if tool.parameters else {})}


def _tool_config(request: Request, crossing: Crossing, offered: bool) -> dict[str, Any] | None:
    """toolConfig.functionCallingConfig: the mode, and the one function a caller forced. Gemini cannot limit the
    model to one call: a caller that asks is refused by name."""
    choice = request.tool_choice
    if choice is None:
        return None
    if not choice.portable:
        raise unsupported("tool_choice", KIND, "a tool choice only its own format can say")
    if choice.parallel is False and crossing.functions:
        raise unsupported(_PARALLEL_FIELD.get(request.format, "tool_choice"), KIND,
                          "Gemini cannot limit the model to one function call")
    if choice.mode is None or not offered:
        return None
    config: dict[str, Any] = {"mode": _CHOICES[choice.mode]}
    if choice.mode == "tool" and choice.name:
        config["allowedFunctionNames"] = [crossing.name(choice.name)]
    return {"functionCallingConfig": config}


# --- contents -------------------------------------------------------------------------------------------------------


def _contents(request: Request, model: str, crossing: Crossing) -> list[dict[str, Any]]:
    """Gemini's contents: the user's and the model's turns (tool results are the user's functionResponse parts),
    consecutive turns of one role merged; system messages went to the system instruction."""
    names = {b.id: crossing.name(b.name, b.namespace) for m in request.messages for b in m.content
             if isinstance(b, ToolCall)}
    out: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "system":
            continue
        role = "model" if message.role == "assistant" else "user"
        parts = _parts(message, request.format, crossing, names, _levels(model))
        if not parts:
            continue  # Gemini refuses a turn without parts
        if out and out[-1]["role"] == role:
            out[-1]["parts"].extend(parts)
        else:
            out.append({"role": role, "parts": parts})
    return out


def _parts(message: Message, caller: Format, crossing: Crossing, names: dict[str, str], strict: bool
           ) -> list[dict[str, Any]]:
    parts = list(_blocks(message.content, caller, crossing, names))
    if message.role == "assistant" and parts:
        signatures = [b.signature for b in message.content if isinstance(b, Thinking) and b.signature
                      and goes_back(b, "gemini")]
        _sign(parts, signatures, strict)
    return parts


def _sign(parts: list[dict[str, Any]], signatures: list[str], strict: bool) -> None:
    """Gemini's thought signatures back on the parts they came on: the turn's function calls first (the first call
    of each step carries one), else its last part. Gemini 3 (`strict`) refuses a function call of the model's
    without the signature it gave, which no other provider's turn has: those calls get the value Google documents
    for a turn it did not make ("skip_thought_signature_validator")."""
    calls = [part for part in parts if "functionCall" in part]
    for part, signature in zip(calls or parts[-1:], signatures, strict=False):
        part["thoughtSignature"] = signature
    if strict and not signatures:
        for part in calls[:1]:
            part["thoughtSignature"] = FOREIGN_SIGNATURE


def _blocks(content: list[Block], caller: Format, crossing: Crossing, names: dict[str, str]
            ) -> Iterator[dict[str, Any]]:
    for block in content:
        if isinstance(block, Text) and block.text:
            yield {"text": block.text}
        elif isinstance(block, Image | Document):
            yield media_part(block, caller)
        elif isinstance(block, ToolCall):
            yield _call(block, crossing)
        elif isinstance(block, ToolResult):
            yield _response(block, names)
        elif isinstance(block, Thinking):
            if block.text and goes_back(block, "gemini"):
                yield {"text": block.text, "thought": True}
        elif isinstance(block, Unknown):
            raise no_word_for(block, caller, KIND, "Gemini")


def _call(block: ToolCall, crossing: Crossing) -> dict[str, Any]:
    """A call, under the name its tool was offered with; a custom tool's input as the one string it takes."""
    arguments = {INPUT: block.arguments} if block.custom else tool_input(block.arguments)
    name = crossing.name(block.name, block.namespace)
    return {"functionCall": {"name": name, "args": arguments, **present(id=block.id or None)}}


def _response(block: ToolResult, names: dict[str, str]) -> dict[str, Any]:
    """A tool's result as Gemini's functionResponse: named after the call it answers (Gemini matches by name, and by
    id when there is one); a result that is a JSON object is the response itself, any other text is its "output"
    (an error's, its "error"), as Google's documentation names them."""
    try:
        value = orjson.loads(block.content) if block.content.strip().startswith("{") else None
    except orjson.JSONDecodeError:
        value = None
    response = value if isinstance(value, dict) and not block.is_error else {
        "error" if block.is_error else "output": value if isinstance(value, dict) else block.content}
    name = names.get(block.tool_call_id)
    if name is None:
        raise unsupported("tool result", KIND, f"the result of call {block.tool_call_id!r} answers no call in the "
                          "conversation, and Gemini needs the name of the function it answers")
    return {"functionResponse": {"name": name, "response": response, **present(id=block.tool_call_id or None)}}
