"""A Gemini caller's request (generateContent, countTokens), parsed into the canonical Request.

Google's JSON reads both spellings of a field (thinkingBudget and thinking_budget), so every field is read with
vocabulary.pick. A thought signature is kept as a Thinking block of its own (no text, format "gemini") right before
the block of the part that carried it: it goes back only to Gemini, onto that part again.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

import orjson

from generated.models import GeminiCountTokensRequest, GeminiGenerateContentRequest
from handlers.errors import bad_request
from handlers.inference.canonical import (
    AnyTool,
    Block,
    Document,
    HostedTool,
    Image,
    Message,
    OutputFormat,
    Request,
    Role,
    Text,
    Thinking,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
    Unknown,
)
from handlers.inference.formats.common import effort, join_system, opt_float, opt_int, opt_str_list, placed, whole
from handlers.inference.formats.gemini.vocabulary import ROLES, VOCABULARY, camel, json_schema, pick
from handlers.inference.formats.tools import hosted_kind

_CONFIG = "generationConfig"
_MIMES_DOCUMENT = ("application/pdf", "text/")  # the media a Document carries; other non-image media are Google's
_GOOGLE_FILES = "https://generativelanguage.googleapis.com/"  # a Files API upload: known to Google alone
# A part's data: one of these (Google's `oneof data`)
_DATA = frozenset({"text", "inlineData", "fileData", "functionCall", "functionResponse", "executableCode",
                   "codeExecutionResult", "toolCall", "toolResponse"})


def parse(body: GeminiGenerateContentRequest) -> Request:
    return _request(body.model_dump(mode="json", by_alias=True, exclude_unset=True))


def parse_count(body: GeminiCountTokensRequest) -> Request:
    """countTokens' prompt: a whole generateContentRequest, or contents (with systemInstruction and tools, as Vertex
    AI takes them; none is an empty prompt)."""
    sent = body.model_dump(mode="json", by_alias=True, exclude_unset=True)
    inner = pick(sent, "generateContentRequest")
    if isinstance(inner, dict):
        return _request(inner)
    return _request({**sent, "contents": pick(sent, "contents") or []})


def _request(sent: dict[str, Any]) -> Request:
    config = _object(pick(sent, _CONFIG), _CONFIG)
    candidates = pick(config, "candidateCount")
    if candidates not in (None, 1):
        raise bad_request("The gateway returns one candidate: candidateCount must be 1.", f"{_CONFIG}.candidateCount")
    system, system_parts = _system(pick(sent, "systemInstruction"))
    thinking = _thinking(pick(config, "thinkingConfig"))
    output, unread_mime = _output(config)
    extra = _extra(sent, config)
    if unread_mime is not None:  # a response type canonical has no word for (text/x.enum): Google's alone
        extra[f"{_CONFIG}.responseMimeType"] = unread_mime
    contents = pick(sent, "contents")
    if not isinstance(contents, list):
        raise bad_request("contents must be a list of contents", "contents")
    return Request(
        format="gemini",
        messages=_Conversation().read(contents),
        system=system,
        system_parts=system_parts,
        effort=thinking.effort,
        thinking_budget=thinking.budget,
        thinking=thinking.on,
        max_tokens=whole(opt_float(pick(config, "maxOutputTokens")), f"{_CONFIG}.maxOutputTokens"),
        temperature=opt_float(pick(config, "temperature")),
        top_p=opt_float(pick(config, "topP")),
        stop=opt_str_list(pick(config, "stopSequences")),
        seed=opt_int(pick(config, "seed")),
        tools=_tools(pick(sent, "tools")),
        tool_choice=_tool_choice(pick(sent, "toolConfig")),
        output=output,
        extra=extra,
        body=sent,
    )


def _object(value: Any, param: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad_request(f"{param} must be an object", param)
    return value


# Declared fields the Request does not model, top-level and inside generationConfig (the spec's x-translate marks).
_EXTRA = tuple(sorted(VOCABULARY.fields.extra))


def _extra(sent: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    for name in _EXTRA:
        owner, _, leaf = name.rpartition(".")
        value = pick(config if owner == _CONFIG else sent, leaf)
        if value is not None:
            extra[name] = value
    return extra


# --- system, thinking, output --------------------------------------------------------------------------------------


def _system(value: Any) -> tuple[str | None, list[Text] | None]:
    """systemInstruction: a Content whose parts are text (or a plain string)."""
    if value is None or isinstance(value, str):
        return join_system([value]), None
    content = _object(value, "systemInstruction")
    parts = pick(content, "parts")
    if not isinstance(parts, list):
        raise bad_request("systemInstruction.parts must be a list of text parts", "systemInstruction.parts")
    texts: list[Text] = []
    for i, part in enumerate(parts):
        text = pick(part, "text")
        if not isinstance(text, str):
            at = f"systemInstruction.parts.{i}"
            raise bad_request(f"{at} must be a text part: a system instruction is text", at)
        texts.append(Text(text))
    return join_system(t.text for t in texts), None


@dataclass(frozen=True, slots=True)
class _Thinking:
    effort: str | None = None
    budget: int | None = None
    on: bool | None = None


def _thinking(raw: Any) -> _Thinking:
    """thinkingConfig: thinkingLevel is an effort word; thinkingBudget a budget (0: off, -1: the model decides)."""
    config = _object(raw, f"{_CONFIG}.thinkingConfig")
    level = pick(config, "thinkingLevel")
    if level is not None and not isinstance(level, str):
        at = f"{_CONFIG}.thinkingConfig.thinkingLevel"
        raise bad_request(f"{at} must be MINIMAL, LOW, MEDIUM or HIGH", at)
    budget = opt_int(pick(config, "thinkingBudget"))
    words = effort(level)
    if words == "thinking_level_unspecified":
        words = None
    if budget == 0:
        return _Thinking(effort=words, on=False)
    if budget is not None and budget < 0:
        return _Thinking(effort=words, on=True)
    return _Thinking(effort=words, budget=budget, on=True if budget else None)


def _output(config: dict[str, Any]) -> tuple[OutputFormat | None, str | None]:
    """(structured output, a response type canonical cannot say). JSON answers (responseMimeType application/json,
    or a schema without a type) follow responseJsonSchema (a JSON schema) or responseSchema (Google's dialect,
    translated), or are any JSON object without either."""
    mime = pick(config, "responseMimeType")
    schema, google = pick(config, "responseJsonSchema"), pick(config, "responseSchema")
    if mime is not None and not isinstance(mime, str):
        raise bad_request(f"{_CONFIG}.responseMimeType must be a string", f"{_CONFIG}.responseMimeType")
    if schema is None and google is None:
        return (OutputFormat("json_object"), None) if mime == "application/json" else (None, None)
    if mime == "text/plain":
        raise bad_request("A response schema needs responseMimeType application/json", f"{_CONFIG}.responseMimeType")
    if mime not in (None, "application/json"):
        return None, mime
    if schema is not None and google is not None:
        raise bad_request("Send responseSchema or responseJsonSchema, not both", f"{_CONFIG}.responseJsonSchema")
    given, at = (schema, "responseJsonSchema") if schema is not None else (json_schema(google), "responseSchema")
    if not isinstance(given, dict):
        raise bad_request(f"{_CONFIG}.{at} must be a schema object", f"{_CONFIG}.{at}")
    return OutputFormat("json_schema", schema=given), None


# --- tools ----------------------------------------------------------------------------------------------------------


def _tools(raw: Any) -> list[AnyTool] | None:
    """Each function declaration is a function tool; each other entry of a Tool (googleSearch, codeExecution ...) is
    one of Google's hosted tools. Never validated, like the other formats' tools."""
    if not isinstance(raw, list):
        return None
    out: list[AnyTool] = []
    for i, tool in enumerate(raw):
        if not isinstance(tool, dict):
            out.append(HostedTool(None, "unknown", tool, "gemini"))
            continue
        for key, value in tool.items():
            name = camel(key)
            if name == "functionDeclarations" and isinstance(value, list):
                out.extend(_function(spec) for spec in value)
            elif value is not None:
                out.append(HostedTool(hosted_kind(name), name, {name: value}, "gemini"))
    return out


def _function(spec: Any) -> AnyTool:
    if not isinstance(spec, dict):
        return HostedTool(None, "unknown", spec, "gemini")
    name, description = pick(spec, "name"), pick(spec, "description")
    schema = pick(spec, "parametersJsonSchema")
    if schema is None and pick(spec, "parameters") is not None:
        schema = json_schema(pick(spec, "parameters"))
    return Tool(name if isinstance(name, str) else "", description if isinstance(description, str) else None,
                schema if isinstance(schema, dict) else {}, spec, "gemini")


def _tool_choice(raw: Any) -> ToolChoice | None:
    """functionCallingConfig: AUTO, NONE, ANY (required; with one allowed name, that function). Several allowed names
    or VALIDATED is a choice only Gemini can say."""
    config = pick(raw, "functionCallingConfig")
    if not isinstance(config, dict):
        return None
    mode = pick(config, "mode")
    mode = mode.upper() if isinstance(mode, str) else "AUTO"
    names = pick(config, "allowedFunctionNames")
    names = names if isinstance(names, list) and names else None
    if mode == "NONE":
        return ToolChoice("none", config, "gemini")
    if mode == "ANY" and names is None:
        return ToolChoice("required", config, "gemini")
    if mode == "ANY" and len(names or ()) == 1 and isinstance(names[0], str):
        return ToolChoice("tool", config, "gemini", name=names[0])
    if mode in ("AUTO", "MODE_UNSPECIFIED") and names is None:
        return ToolChoice("auto", config, "gemini")
    return ToolChoice(None, config, "gemini")


# --- the conversation ----------------------------------------------------------------------------------------------


@dataclass
class _Conversation:
    """Reads contents in order. Gemini's function calls may have no id: each gets one of its place, and a function
    response without an id answers the earliest unanswered call of its name."""

    pending: defaultdict[str, deque[str]] = field(default_factory=lambda: defaultdict(deque))

    def read(self, contents: list[Any]) -> list[Message]:
        out: list[Message] = []
        for i, content in enumerate(contents):
            out.extend(self._turn(content, f"contents.{i}"))
        return out

    def _turn(self, content: Any, where: str) -> list[Message]:
        """Canonical keeps each function response in its own "tool" message, before the turn's other parts."""
        content = _object(content, where)
        role_word = pick(content, "role") or "user"
        role: Role | None = ROLES.get(role_word) if isinstance(role_word, str) else None
        if role is None:
            raise bad_request(f"{where}.role must be user or model, got {role_word!r}", f"{where}.role")
        parts = pick(content, "parts")
        if not isinstance(parts, list):
            raise bad_request(f"{where}.parts must be a list of parts", f"{where}.parts")
        results: list[Message] = []
        rest: list[Block] = []
        for j, part in enumerate(parts):
            at = f"{where}.parts.{j}"
            part = _object(part, at)
            if len(_DATA & {camel(key) for key in part}) > 1:  # Google's oneof, broken: for Google to judge
                rest.extend(placed([Unknown(part, "gemini")], at))
            elif pick(part, "functionResponse") is not None:
                results.append(Message("tool", self._response(part, at)))
            else:
                rest.extend(placed(self._part(part, at), at))
        if rest or not results:
            results.append(Message(role, rest))
        return results

    def _part(self, part: dict[str, Any], at: str) -> list[Block]:
        signature = pick(part, "thoughtSignature")
        if signature is not None and not isinstance(signature, str):
            raise bad_request(f"{at}.thoughtSignature must be a base64 string", f"{at}.thoughtSignature")
        text = pick(part, "text")
        if pick(part, "thought") is True and isinstance(text, str):
            return [Thinking(text, signature=signature or None, format="gemini" if signature else None)]
        seal: list[Block] = [Thinking("", signature=signature, format="gemini")] if signature else []
        if text is not None:
            if not isinstance(text, str):
                raise bad_request(f"{at}.text must be a string", f"{at}.text")
            return [*seal, Text(text)]
        if (call := pick(part, "functionCall")) is not None:
            return [*seal, self._call(_object(call, f"{at}.functionCall"), at)]
        if (data := pick(part, "inlineData")) is not None:
            return [*seal, *_inline(_object(data, f"{at}.inlineData"), part, at)]
        if (data := pick(part, "fileData")) is not None:
            return [*seal, *_file(_object(data, f"{at}.fileData"), part, at)]
        if part and not set(part) - {"thoughtSignature", "thought_signature", "thought"}:
            return seal  # a signature alone, or a thought flag with nothing in it
        return [*seal, Unknown(part, "gemini")]  # executableCode ..., or what the gateway cannot read: Google's  # executableCode, codeExecutionResult ...: Google's own

    def _call(self, call: dict[str, Any], at: str) -> ToolCall:
        name = pick(call, "name")
        if not isinstance(name, str) or not name:
            raise bad_request(f"{at}.functionCall.name must be a non-empty string", f"{at}.functionCall.name")
        call_id = pick(call, "id")
        call_id = call_id if isinstance(call_id, str) and call_id else "call_" + at.replace("contents.", "").replace(
            ".parts.", "_")
        self.pending[name].append(call_id)
        args = pick(call, "args")
        return ToolCall(call_id, name, orjson.dumps(args if isinstance(args, dict) else {}).decode())

    def _response(self, part: dict[str, Any], at: str) -> list[Block]:
        """A function's result as canonical text (its `output` when that is all it says; `error` marks a failure),
        then what else it holds (images, documents: `parts`) right after it, as Messages' tool results are read."""
        response = _object(pick(part, "functionResponse"), f"{at}.functionResponse")
        name = pick(response, "name")
        if not isinstance(name, str) or not name:
            raise bad_request(f"{at}.functionResponse.name must be a non-empty string", f"{at}.functionResponse.name")
        call_id = pick(response, "id")
        waiting = self.pending[name]
        if isinstance(call_id, str) and call_id:
            if call_id in waiting:
                waiting.remove(call_id)
        else:
            call_id = waiting.popleft() if waiting else ""
        text, failed = _result_text(pick(response, "response"))
        media: list[Block] = []
        for k, inner in enumerate(pick(response, "parts") or ()):
            where = f"{at}.functionResponse.parts.{k}"
            media.extend(placed(self._part(_object(inner, where), where), where))
        return [ToolResult(call_id, text, is_error=failed), *media]


def _result_text(response: Any) -> tuple[str, bool]:
    """(the result's text, whether it is an error): {"output": text} is that text, {"error": ...} an error, any other
    object its JSON."""
    if not isinstance(response, dict) or not response:
        return "", False
    if len(response) == 1 and "output" in response and isinstance(response["output"], str):
        return response["output"], False
    if len(response) == 1 and "error" in response:
        error = response["error"]
        return error if isinstance(error, str) else orjson.dumps(error).decode(), True
    return orjson.dumps(response).decode(), False


def _media(data: dict[str, Any], leaf: str) -> tuple[str, str] | None:
    """(media type, `leaf`) of inline or file data; None when either is missing, for the part to stay Google's."""
    mime, value = pick(data, "mimeType"), pick(data, leaf)
    if not (isinstance(mime, str) and mime and isinstance(value, str)):
        return None
    return mime.lower(), value


def _inline(data: dict[str, Any], part: dict[str, Any], at: str) -> list[Block]:
    """Inline bytes: an image, a PDF or a text document; audio and video (and data this cannot read) are Google's
    alone."""
    found = _media(data, "data")
    if found is None:
        return [Unknown(part, "gemini")]
    mime, content = found
    if mime.startswith("image/"):
        return [Image(data=content, media_type=mime)]
    if mime.startswith(_MIMES_DOCUMENT):
        return [Document(data=content, media_type=mime)]
    return [Unknown(part, "gemini")]


def _file(data: dict[str, Any], part: dict[str, Any], at: str) -> list[Block]:
    """A file by URI: a web URL another provider can fetch, or a Google file (Files API, gs://) known only to Google,
    carried as a file id."""
    found = _media(data, "fileUri")
    if found is None or not found[1]:
        return [Unknown(part, "gemini")]
    mime, uri = found
    web = uri.startswith(("https://", "http://")) and not uri.startswith(_GOOGLE_FILES)
    if mime.startswith("image/"):
        return [Image(url=uri) if web else Image(file_id=uri, media_type=mime)]
    if mime.startswith(_MIMES_DOCUMENT):
        return [Document(url=uri, media_type=mime) if web else Document(file_id=uri, media_type=mime)]
    return [Unknown(part, "gemini")]
