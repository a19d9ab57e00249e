"""Chat Completions as an upstream speaks it (OpenAI and the compatible servers): the canonical Request into its
body, its chat.completion or chunk stream back into canonical."""

from __future__ import annotations

from typing import Any

from generated.models import ChatCompletionRequest
from handlers.errors import unsupported
from handlers.inference.canonical import (
    Block,
    Document,
    Event,
    Finish,
    FinishReason,
    Format,
    Image,
    Message,
    OutputFormat,
    Request,
    Result,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolCallStart,
    ToolChoice,
    ToolResult,
    Unknown,
    UsageReport,
)
from handlers.inference.formats.base import Traits, UpstreamFault, UpstreamOptions
from handlers.inference.formats.chat.answer import FINISH_READ, THINKING_GAP, call, read_usage
from handlers.inference.formats.common import (
    OPENAI_CHOICES,
    json_object,
    merge_extra,
    passthrough_body,
    present,
    refuse_untranslatable,
)

KIND = "openai"  # the upstream kind that speaks this format, as a refusal names it
STREAM_FIELDS: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
STREAM_END = "[DONE]"
# A canonical tool choice in chat's words; "tool" names its tool in an object instead.
_CHOICE_WORDS = {mode: word for word, mode in OPENAI_CHOICES[0].items()}
_LIMITS = ("max_tokens", "max_completion_tokens")
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
        body = _translated(request, model)
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


def _translated(request: Request, model: str) -> dict[str, Any]:
    """Everything canonical carries, in chat's words. Cache marks have none: OpenAI caches prompt prefixes by
    itself (and a compatible server could refuse cache_control). Another provider's thinking is left out."""
    if request.format != "chat":
        refuse_untranslatable(request, KIND)
    body: dict[str, Any] = {"model": model, "messages": _messages(request)}
    # The token limit and the effort are set by upstream_body, for every request alike.
    body.update(present(temperature=request.temperature, top_p=request.top_p, stop=request.stop, seed=request.seed))
    tools = [_tool(t) for t in request.tools or () if t.format == "chat" or t.portable]
    if tools:
        body["tools"] = tools
    choice = request.tool_choice
    if request.format == "chat":  # a chat request the gateway built itself, without a caller's body
        body.update(present(tool_choice=choice.raw if choice else None, response_format=request.response_format))
        merge_extra(body, request.extra)
        return body
    if tools and choice and choice.portable:  # OpenAI refuses a tool choice without tools
        body.update(_tool_choice(choice))
    if request.output is not None:
        body["response_format"] = _response_format(request.output)
    return body


def _tool_choice(choice: ToolChoice) -> dict[str, Any]:
    """Another format's tool choice as chat's tool_choice, and "at most one call" as parallel_tool_calls."""
    named = {"type": "function", "function": {"name": choice.name}}
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
    if tool.format == "chat":
        return tool.raw
    function = {"name": tool.name, **present(description=tool.description), "parameters": tool.parameters}
    return {"type": "function", "function": function}


# --- messages --------------------------------------------------------------------------------------------------------


def _messages(request: Request) -> list[dict[str, Any]]:
    out = [{"role": "system", "content": request.system}] if request.system is not None else []
    for message in request.messages:
        out.extend(_message(message, request.format))
    return out


def _message(message: Message, fmt: Format) -> list[dict[str, Any]]:
    """One canonical message as chat messages: its tool results first (each a "tool" message), then the rest."""
    blocks = message.content
    out: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": b.tool_call_id, "content": b.content}
        for b in blocks
        if isinstance(b, ToolResult)
    ]
    calls = [call(b) for b in blocks if isinstance(b, ToolCall)]
    parts = [part for b in blocks if (part := _part(b, fmt)) is not None]
    # Reasoning goes back only to the kind of provider that showed it (DeepSeek asks for it with tool calls).
    reasoning = THINKING_GAP.join(b.text for b in blocks if isinstance(b, Thinking) and b.format == "chat" and b.text)
    if parts or calls or reasoning:
        chat: dict[str, Any] = {"role": "user" if message.role == "tool" else message.role, "content": _content(parts)}
        if reasoning:
            chat["reasoning_content"] = reasoning
        if calls:
            chat["tool_calls"] = calls
        out.append(chat)
    return out


def _part(block: Block, fmt: Format) -> dict[str, Any] | None:
    if isinstance(block, Text):
        return {"type": "text", "text": block.text}
    if isinstance(block, Image):
        return _image(block)
    if isinstance(block, Document):
        return _document(block, fmt)
    if isinstance(block, Unknown):
        if block.format != "chat":
            kind = block.data.get("type")
            raise unsupported(str(kind or "content"), KIND, "Chat Completions has no such content part")
        return block.data
    return None  # thinking, tool calls and results have places of their own


def _image(block: Image) -> dict[str, Any]:
    if block.url is not None:
        url = block.url
    elif block.data is not None:
        url = f"data:{block.media_type or 'application/octet-stream'};base64,{block.data}"
    else:
        raise unsupported("image.file_id", KIND, "Chat Completions takes an image's URL or data, not a file id")
    return {"type": "image_url", "image_url": {"url": url, **present(detail=block.detail)}}


def _document(block: Document, fmt: Format) -> dict[str, Any]:
    if block.data is not None:
        media_type = block.media_type or "application/pdf"
        name = block.filename or _FILENAMES.get(media_type, "document")
        return {"type": "file", "file": {"filename": name, "file_data": f"data:{media_type};base64,{block.data}"}}
    if block.file_id is not None:
        if fmt != "responses":  # a Responses caller's file is an OpenAI file; another provider's is unknown here
            raise unsupported("document.file_id", KIND, "the file was uploaded to another provider")
        return {"type": "file", "file": {"file_id": block.file_id, **present(filename=block.filename)}}
    raise unsupported("document.url", KIND, "Chat Completions takes a file's data or id, not its URL")


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]] | None:
    """A plain string when every part is text (what every compatible server accepts), else the parts."""
    if not parts:
        return None
    if all(part.get("type") == "text" and set(part) == {"type", "text"} for part in parts):
        return "".join(part["text"] for part in parts)
    return parts


# --- answers ---------------------------------------------------------------------------------------------------------


def upstream_result(payload: dict[str, Any]) -> Result:
    choices = payload.get("choices")
    if not choices or not isinstance(choices[0], dict):
        raise UpstreamFault(payload=payload) if payload.get("error") else UpstreamFault(what="answered without choices")
    choice = choices[0]  # the only one: n > 1 is refused
    message = choice.get("message") or {}
    content: list[Block] = []
    reasoning = _reasoning(message)
    if reasoning:
        content.append(Thinking(reasoning, format="chat"))
    text = _text(message.get("content")) or message.get("refusal")
    if text:
        content.append(Text(text))
    for tool_call in message.get("tool_calls") or []:
        function = tool_call.get("function") or {}
        content.append(ToolCall(tool_call.get("id") or "", function.get("name") or "", function.get("arguments") or ""))
    return Result(
        content=content,
        finish_reason=FINISH_READ.get(str(choice.get("finish_reason")), FinishReason.UNKNOWN),
        usage=read_usage(payload.get("usage")),
        upstream_model=payload.get("model"),
    )


def _reasoning(fields: dict[str, Any]) -> str:
    """The reasoning an answer shows outside the standard: reasoning_content (DeepSeek, vLLM) or reasoning."""
    for key in ("reasoning_content", "reasoning"):
        text = fields.get(key)
        if isinstance(text, str) and text:
            return text
    return ""


def _text(content: Any) -> str:
    if isinstance(content, list):  # some compatible servers answer with parts
        return "".join(part.get("text") or "" for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


class UpstreamReader:
    """Turns chat.completion.chunk events into canonical events, until [DONE]."""

    def __init__(self) -> None:
        self.done = False
        self._started: set[int] = set()

    def read(self, event: str, data: str) -> list[Event]:
        if data.strip() == "[DONE]":
            self.done = True
            return []
        chunk = json_object(data)
        if chunk.get("error"):
            raise UpstreamFault(payload=chunk)
        events: list[Event] = []
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = _reasoning(delta)
            if reasoning:
                events.append(ThinkingDelta(reasoning, format="chat"))
            text = delta.get("content") or delta.get("refusal")
            if text:
                events.append(TextDelta(text))
            for tool_call in delta.get("tool_calls") or []:
                events.extend(self._tool_call(tool_call))
            if choice.get("finish_reason"):
                events.append(Finish(FINISH_READ.get(choice["finish_reason"], FinishReason.UNKNOWN)))
        if chunk.get("usage"):
            events.append(UsageReport(read_usage(chunk["usage"])))
        return events

    def _tool_call(self, tool_call: dict[str, Any]) -> list[Event]:
        """The first delta of a call carries its id and name; later ones only argument text."""
        index = tool_call.get("index", 0)
        function = tool_call.get("function") or {}
        events: list[Event] = []
        if index not in self._started:
            self._started.add(index)
            events.append(ToolCallStart(index, tool_call.get("id") or f"call_{index}", function.get("name") or ""))
        if function.get("arguments"):
            events.append(ToolCallDelta(index, function["arguments"]))
        return events
