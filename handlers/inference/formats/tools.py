"""The caller's tools on their way to an upstream of another format, and the calls on their way back.

Function tools go everywhere as functions. A custom tool (free-form input: Codex's apply_patch) goes to a format
without custom tools as a function of one string parameter, `input` (its grammar told in the description); the
tools of a namespace go as functions named `<namespace>__<tool>`. The calls come back to the caller as what it
offered: the name, the namespace and the free-form input restored exactly (Crossing.call, Crossing.events).

Hosted tools (web search, code execution, Anthropic's typed tools ...) go as the upstream format's own equivalent
where it has one, with the options both formats have in its words (a web search's allowed domains and user location;
the others are left out and said so in the decision record); where it has none the tool is an offer the model cannot
take up, so it is left out and said so (the `x-specway-omitted-tools` header and the decision record), unless the
model's configuration asks for a refusal (`hosted_tools: refuse`). Function, custom and namespace tools are never left out.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from handlers.errors import unsupported
from handlers.inference.canonical import (
    AnyTool,
    CustomTool,
    Event,
    Format,
    Namespace,
    Request,
    Result,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolCallStart,
)

INPUT = "input"  # the one parameter of a custom tool offered as a function
_INPUT_SCHEMA = {"type": "object", "properties": {INPUT: {"type": "string"}}, "required": [INPUT],
                 "additionalProperties": False}
_SEPARATOR = "__"
CUSTOM_TOOLS: frozenset[Format] = frozenset({"responses"})  # the formats that have custom tools of their own
_NAME_MAX = 64  # the shortest limit among the formats' function names (OpenAI's and Anthropic's)

# A hosted tool as each format writes it, by the word the formats share for it. A format not named for a kind has
# no equivalent of it.
HOSTED: Mapping[str, Mapping[Format, dict[str, Any]]] = {
    "web_search": {"responses": {"type": "web_search"},
                   "messages": {"type": "web_search_20250305", "name": "web_search"},
                   "gemini": {"googleSearch": {}}},
}


def hosted_kind(type_word: str) -> str | None:
    """The shared word for a hosted tool written with type `type_word` (web_search, web_search_preview,
    web_search_20250305, Gemini's googleSearch ...), None when no other format has its like."""
    if type_word.startswith("web_search") or type_word == "googleSearch":
        return "web_search"
    return None


@dataclass(slots=True)
class _Flat:
    name: str  # as the caller knows it
    namespace: str | None
    custom: bool


@dataclass(slots=True)
class Crossing:
    """What an upstream speaking `target` is offered of a request's tools: functions (custom tools and namespaces
    flattened into them), the hosted tools it has an equivalent of (in its words), and what was left out."""

    functions: list[Tool] = field(default_factory=list)
    custom: list[CustomTool] = field(default_factory=list)  # custom tools, to a format that has them
    hosted: list[dict[str, Any]] = field(default_factory=list)
    omitted: list[str] = field(default_factory=list)  # the hosted tools left out, by their type
    unsaid: list[str] = field(default_factory=list)  # options of a hosted tool its equivalent has no word for
    _flat: dict[str, _Flat] = field(default_factory=dict)  # a function's name -> the tool it stands for

    @classmethod
    def of(cls, request: Request, target: Format, kind: str, refuse_hosted: bool = False) -> Crossing:
        """The crossing of `request`'s tools to an upstream of format `target` (of kind `kind`, as refusals name it).
        Tools of the target's own format are not here: the renderer passes them as the caller wrote them."""
        crossing = cls()
        for i, tool in enumerate(request.tools or ()):
            crossing._add(tool, target, kind, refuse_hosted, f"tools.{i}")
        return crossing

    def _add(self, tool: AnyTool, target: Format, kind: str, refuse_hosted: bool, where: str) -> None:
        if isinstance(tool, Tool | CustomTool) and not tool.name:
            raise unsupported(where, kind, "a tool without a name cannot be offered")
        if isinstance(tool, Tool):
            self._function(tool, None, False)
        elif isinstance(tool, CustomTool) and target in CUSTOM_TOOLS:
            self.custom.append(tool)
        elif isinstance(tool, CustomTool):
            self._function(_as_function(tool), None, True, tool.name)
        elif isinstance(tool, Namespace):
            for member in tool.tools:
                function = member if isinstance(member, Tool) else _as_function(member)
                self._function(function, tool.name, isinstance(member, CustomTool), member.name)
        elif (equivalent := HOSTED.get(tool.kind or "", {}).get(target)) is not None:
            options, unsaid = _web_search_options(tool.raw, tool.format, target)
            self.hosted.append({**equivalent, **options})
            self.unsaid.extend(f"{tool.type}.{option}" for option in unsaid)
        elif refuse_hosted:
            raise unsupported(where, kind, f"a {tool.type} tool is run by its provider, and this one has no such tool")
        else:
            self.omitted.append(tool.type)

    def _function(self, tool: Tool, namespace: str | None, custom: bool, name: str | None = None) -> None:
        original = name or tool.name
        flat = self._unique(f"{namespace}{_SEPARATOR}{original}" if namespace else original)
        if flat != tool.name:  # no longer the tool as the caller wrote it
            tool = Tool(flat, tool.description, tool.parameters, None, tool.format, tool.cache)
        self.functions.append(tool)
        if namespace is not None or custom or flat != original:
            self._flat[flat] = _Flat(original, namespace, custom)

    def _unique(self, name: str) -> str:
        """A function name every format takes, that no other function of this request has."""
        if len(name) > _NAME_MAX:
            name = name[:_NAME_MAX - 9] + "_" + hashlib.sha256(name.encode()).hexdigest()[:8]
        taken = {t.name for t in self.functions}
        stem, n = name, 1
        while name in taken:
            n += 1
            name = f"{stem[:_NAME_MAX - 4]}_{n}"
        return name

    def name(self, original: str, namespace: str | None = None) -> str:
        """The function name a tool the caller named (in `namespace`) is offered under."""
        for flat, known in self._flat.items():
            if known.name == original and known.namespace == namespace:
                return flat
        return original

    @property
    def maps(self) -> bool:
        """Whether any call coming back needs its name or input restored."""
        return bool(self._flat)

    # --- the way back ------------------------------------------------------------------------------------------------

    def call(self, call: ToolCall) -> ToolCall:
        """A call of a function that stands for a custom or namespaced tool, as the caller offered that tool."""
        known = self._flat.get(call.name)
        if known is None:
            return call
        arguments = _custom_input(call.arguments) if known.custom else call.arguments
        return ToolCall(call.id, known.name, arguments, call.cache, custom=known.custom, namespace=known.namespace)

    def result(self, result: Result) -> Result:
        result.content = [self.call(b) if isinstance(b, ToolCall) else b for b in result.content]
        return result

    async def events(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        """Stream events with calls restored. A custom tool's input arrives as pieces of `{"input": "..."}`: they are
        kept until the call is complete, then told as one piece of the input text. Closing this closes `events`."""
        custom: dict[int, list[str]] = {}  # open custom calls -> their argument pieces
        async with contextlib.aclosing(events):  # type: ignore[type-var]
            async for ev in events:
                if isinstance(ev, ToolCallDelta) and ev.index in custom:
                    custom[ev.index].append(ev.arguments)
                    continue
                if not isinstance(ev, ToolCallDelta):
                    for done in _flush(custom):
                        yield done
                known = self._flat.get(ev.name) if isinstance(ev, ToolCallStart) else None
                if isinstance(ev, ToolCallStart) and known is not None:
                    if known.custom:
                        custom[ev.index] = []
                    ev = ToolCallStart(ev.index, ev.id, known.name, custom=known.custom, namespace=known.namespace)
                yield ev
        for done in _flush(custom):
            yield done


# Web search options both formats have, as (Messages' path, Responses' path); every other option (max_uses,
# blocked_domains, search_context_size ...) has no word in the other format.
_SEARCH_OPTIONS = ((("allowed_domains",), ("filters", "allowed_domains")), (("user_location",), ("user_location",)))
_SEARCH_OWN = {"messages": {"type", "name", "cache_control"}, "responses": {"type"}}  # not options


def _web_search_options(raw: Any, source: Format, target: Format) -> tuple[dict[str, Any], list[str]]:
    """A web search's options in the target format's words, and the options it has none for. Gemini's googleSearch
    shares no option with the others (its time range filter, their domains and location): each is said."""
    if not isinstance(raw, dict) or source == target:
        return {}, []
    if "gemini" in (source, target):
        options = raw.get("googleSearch") if source == "gemini" else raw
        own = _SEARCH_OWN.get(source, set())
        said = options.items() if isinstance(options, dict) else ()
        return {}, sorted(key for key, value in said if key not in own and value is not None)
    if source not in _SEARCH_OWN or target not in _SEARCH_OWN:
        return {}, []
    at = 0 if source == "messages" else 1
    out: dict[str, Any] = {}
    said: set[str] = set(_SEARCH_OWN[source])
    for paths in _SEARCH_OPTIONS:
        value = _dig(raw, paths[at])
        if value is not None:
            _put(out, paths[1 - at], value)
            said.add(paths[at][0])
    if isinstance(raw.get("filters"), dict) and set(raw["filters"]) - {"allowed_domains"}:
        said.discard("filters")  # a filter with no Messages word
    return out, sorted(key for key in raw if key not in said and raw[key] is not None)


def _dig(raw: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = raw
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _put(out: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        out = out.setdefault(key, {})
    out[path[-1]] = value


def _flush(custom: dict[int, list[str]]) -> list[Event]:
    out: list[Event] = [ToolCallDelta(i, _custom_input("".join(pieces))) for i, pieces in custom.items()]
    custom.clear()
    return out


def _as_function(tool: CustomTool) -> Tool:
    """A custom tool as a function of one string parameter; its grammar is told, not enforced."""
    told = [tool.description or ""]
    if tool.grammar:
        told.append(f"The `{INPUT}` must follow this {tool.grammar.get('syntax', '')} grammar:\n"
                    f"{tool.grammar.get('definition', '')}")
    description = "\n\n".join(text for text in told if text) or None
    return Tool(tool.name, description, _INPUT_SCHEMA, None, tool.format)


def _custom_input(arguments: str) -> str:
    """The free-form input from a function call's `{"input": "..."}`; arguments of another shape are kept as text."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    text = value.get(INPUT) if isinstance(value, dict) else None
    return text if isinstance(text, str) else arguments
