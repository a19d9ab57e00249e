"""The caller's tool declarations and tool choice, read into canonical tools (never validated: a same-format
upstream gets them as written; formats/tools.py says what another format gets)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from handlers.inference.canonical import (
    AnyTool,
    CustomTool,
    Format,
    HostedTool,
    Tool,
    ToolChoice,
    ToolChoiceMode,
)
from handlers.inference.formats.tools import hosted_kind


def tool_list(raw: Any, fmt: Format, read: Callable[[dict[str, Any], str], AnyTool]) -> list[AnyTool] | None:
    """The caller's tools through `read`. Tools are never validated here (the reference says so): a same-format
    upstream gets them as written, and formats/tools.py says what another format gets."""
    if not isinstance(raw, list):
        return None
    return [read(tool, f"tools.{i}") if isinstance(tool, dict) else hosted_tool(tool, fmt)
            for i, tool in enumerate(raw)]


# How a format says a tool choice: the words it accepts as a plain string, and the types of the objects it accepts.
ChoiceTable = tuple[Mapping[str, ToolChoiceMode], Mapping[str, ToolChoiceMode]]

# The OpenAI formats: a word, or {"type": "function", ...} naming the tool.
OPENAI_CHOICES: ChoiceTable = ({"auto": "auto", "none": "none", "required": "required"}, {"function": "tool"})


def tool_choice(
    raw: Any, fmt: Format, table: ChoiceTable, name_at: tuple[str, ...], parallel: bool | None
) -> ToolChoice | None:
    """The caller's tool_choice, read through `table`; `name_at` is where a forced choice names its tool. Never
    validated, like tools: a choice the table does not know is kept as is for a same-format upstream and left out
    for any other. A caller who said only `parallel` chose "auto"."""
    if raw is None:
        return None if parallel is None else ToolChoice("auto", None, fmt, parallel=parallel)
    words, types = table
    modes, word = (types, raw.get("type")) if isinstance(raw, dict) else (words, raw)
    mode = modes.get(word) if isinstance(word, str) else None
    name = _dig(raw, name_at) if mode == "tool" else None
    if mode == "tool" and not (isinstance(name, str) and name):
        mode, name = None, None
    return ToolChoice(mode, raw, fmt, name=name, parallel=parallel)


def _dig(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def function_tool(spec: dict[str, Any], where: str, raw: dict[str, Any], fmt: Format, schema: str) -> Tool:
    """A function tool: a name, a description and a JSON schema under `schema` (both optional). One without a name
    has "" (another format refuses it by its place)."""
    description = spec.get("description")
    parameters = spec.get(schema)
    name = spec.get("name")
    return Tool(
        name=name if isinstance(name, str) else "",
        description=description if isinstance(description, str) else None,
        parameters=parameters if isinstance(parameters, dict) else {},
        raw=raw,
        format=fmt,
    )


def custom_tool(spec: dict[str, Any], raw: Any, fmt: Format) -> CustomTool:
    """A custom tool (free-form input): its name, description and grammar (a `format` of type grammar, whose syntax
    and definition Responses writes in it and Chat Completions in its `grammar` object)."""
    name, description, form = spec.get("name"), spec.get("description"), spec.get("format")
    grammar = None
    if isinstance(form, dict) and form.get("type") == "grammar":
        given = form.get("grammar") if isinstance(form.get("grammar"), dict) else form
        grammar = {"syntax": given.get("syntax"), "definition": given.get("definition")}
    return CustomTool(name if isinstance(name, str) else "", description if isinstance(description, str) else None,
                      grammar, raw, fmt)


def hosted_tool(raw: Any, fmt: Format) -> HostedTool:
    """A tool the provider runs or defines (web search, code execution, Anthropic's typed tools ...), by its type."""
    kind = raw.get("type") if isinstance(raw, dict) else None
    word = kind if isinstance(kind, str) and kind else "unknown"
    return HostedTool(hosted_kind(word), word, raw, fmt)
