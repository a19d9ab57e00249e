"""A scripted model for the coding-agent tests (tests/test_coding_agents.py), answering through tests/fake_upstream.py
in whichever upstream dialect the gateway speaks to it (chat, messages, responses, converse, gemini). Not product
code.

    provider = AgentProvider(Task.shell("echo specway-1a2b"), workdir)
    fake.responder = provider

Like a model it reads the request: when the last turn is the user's prompt (the task's marker in it) it calls the
agent's tool, found by name among the offered tools; when the last turn carries that tool's result it answers with
text quoting the result (kept in `provider.results`); any other request (an agent's side request: a title, a
summary) gets a short plain answer. A custom tool offered as a function (as the gateway offers Codex's apply_patch
to an upstream without custom tools) is called with its one string parameter, as such a model would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tests.fake_dialects import Reply

SIDE_ANSWER = "Specway agent test"  # what a side request gets
QUOTE = "The tool answered:"  # the final answer is this, then the tool's result
THOUGHT = "The task needs the agent's tool; I call it."  # the reasoning that comes with the call
PREAMBLE = "Calling the tool now."  # the text that comes with the call, before it


@dataclass(frozen=True)
class Task:
    """What the model asks the agent to do: run `command` in its shell tool, or create `file` holding `content`."""

    command: str | None = None
    file: str | None = None
    content: str | None = None

    @classmethod
    def shell(cls, command: str) -> Task:
        return cls(command=command)

    @classmethod
    def edit(cls, file: str, content: str) -> Task:
        return cls(file=file, content=content)


@dataclass(slots=True)
class Offered:
    """One tool of a request: its name, whether it is a free-form (custom) tool, and its parameters' names."""

    name: str
    custom: bool
    parameters: tuple[str, ...]


@dataclass
class AgentProvider:
    task: Task
    workdir: Path  # the agent's working folder: Claude Code's Write wants an absolute path
    marker: str  # a word of the prompt that tells the agent's main request from its side requests
    results: list[str] = field(default_factory=list)  # the tool results seen, in order
    calls: list[tuple[str, str]] = field(default_factory=list)  # (tool name, arguments or input) of each call made

    def __call__(self, dialect: str, body: Any) -> Reply:
        body = body if isinstance(body, dict) else {}
        tools = offered(dialect, body)
        result = tool_result(dialect, body)
        if result is not None:
            self.results.append(result)
            return Reply(text=f"{QUOTE} {result}")
        if self.marker not in last_user_text(dialect, body) or not tools:
            return Reply(text=SIDE_ANSWER)
        return self._call(tools)

    def _call(self, tools: list[Offered]) -> Reply:
        by_name = {tool.name: tool for tool in tools}
        if self.task.command is not None:
            tool = _first(by_name, "Bash", "exec_command", "shell_command", "shell", "run_shell_command")
            value: dict[str, Any] = {"command": self.task.command, "description": "Run the command"}
            if tool.name != "Bash":
                value = {"cmd": self.task.command} if "cmd" in tool.parameters else {"command": self.task.command}
        elif "Write" in by_name:
            tool = by_name["Write"]
            value = {"file_path": str(self.workdir / str(self.task.file)), "content": self.task.content}
        else:
            tool = _first(by_name, "apply_patch")
            patch = f"*** Begin Patch\n*** Add File: {self.task.file}\n+{self.task.content}\n*** End Patch\n"
            if tool.custom:
                self.calls.append((tool.name, patch))
                return Reply(text=PREAMBLE, tool_calls=[{"name": tool.name, "input": patch, "id": "call_agent_1"}],
                             reasoning=[THOUGHT])
            value = {tool.parameters[0]: patch}
        arguments = orjson.dumps(value).decode()
        self.calls.append((tool.name, arguments))
        return Reply(text=PREAMBLE, tool_calls=[{"name": tool.name, "arguments": arguments, "id": "call_agent_1"}],
                     reasoning=[THOUGHT])


def _first(tools: dict[str, Offered], *names: str) -> Offered:
    for name in names:
        if name in tools:
            return tools[name]
    raise AssertionError(f"none of {names} is offered; the tools are {sorted(tools)}")


def offered(dialect: str, body: dict[str, Any]) -> list[Offered]:
    """The callable tools of a request in `dialect` (hosted tools and namespaces are not the scripted model's)."""
    found = []
    for tool in body.get("tools") or []:
        if dialect == "chat" and tool.get("type") == "function":
            function = tool.get("function") or {}
            found.append(Offered(function.get("name", ""), False, _names(function.get("parameters"))))
        elif dialect == "responses" and tool.get("type") in ("function", "custom"):
            found.append(Offered(tool.get("name", ""), tool["type"] == "custom", _names(tool.get("parameters"))))
        elif dialect == "messages" and "input_schema" in tool:
            found.append(Offered(tool.get("name", ""), False, _names(tool.get("input_schema"))))
    for tool in (body.get("toolConfig") or {}).get("tools") or [] if dialect == "converse" else []:
        if spec := tool.get("toolSpec"):
            found.append(Offered(spec.get("name", ""), False, _names((spec.get("inputSchema") or {}).get("json"))))
    for tool in body.get("tools") or [] if dialect == "gemini" else []:
        for declared in tool.get("functionDeclarations") or []:
            schema = declared.get("parametersJsonSchema") or declared.get("parameters")
            found.append(Offered(declared.get("name", ""), False, _names(schema)))
    return found


def _names(schema: Any) -> tuple[str, ...]:
    return tuple((schema or {}).get("properties") or {}) if isinstance(schema, dict) else ()


def tool_result(dialect: str, body: dict[str, Any]) -> str | None:
    """The text of the tool result the request ends with, or None when its last turn is not a tool's result."""
    if dialect == "responses":
        items = body.get("input")
        last = items[-1] if isinstance(items, list) and items else {}
        if last.get("type") in ("function_call_output", "custom_tool_call_output"):
            return _text(last.get("output"))
        return None
    if dialect == "gemini":
        contents = body.get("contents") or []
        parts = contents[-1].get("parts") or [] if contents and contents[-1].get("role") == "user" else []
        answers = [p["functionResponse"].get("response") for p in parts if "functionResponse" in p]
        said = [a.get("output", a) if isinstance(a, dict) else a for a in answers]
        return "\n".join(s if isinstance(s, str) else orjson.dumps(s).decode() for s in said) if said else None
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    if dialect == "chat":
        return _text(last.get("content")) if last.get("role") == "tool" else None
    blocks = last.get("content") if last.get("role") == "user" and isinstance(last.get("content"), list) else []
    if dialect == "converse":
        results = [_text(block["toolResult"].get("content")) for block in blocks if "toolResult" in block]
    else:
        results = [_text(block.get("content")) for block in blocks if block.get("type") == "tool_result"]
    return "\n".join(results) if results else None


def last_user_text(dialect: str, body: dict[str, Any]) -> str:
    """The text of the request's last user turn, "" when there is none."""
    turns = body.get("input") if dialect == "responses" else body.get(
        "contents" if dialect == "gemini" else "messages")
    if isinstance(turns, str):
        return turns
    for turn in reversed(turns or []):
        if turn.get("role") == "user":
            return _text(turn.get("parts" if dialect == "gemini" else "content"))
    return ""


def _text(content: Any) -> str:
    """Text content as each dialect writes it: a string, or parts whose text is joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(part.get("text", part.get("content"))) for part in content if isinstance(part, dict))
    return ""
