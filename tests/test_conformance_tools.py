"""Conformance of the tool kinds: each caller format that can offer a kind (through its official SDK) x each upstream
kind on the wire (openai, anthropic, responses, bedrock) x whole or streamed. Function tools are
test_conformance.py's tools round trip (every format); here:

- custom tools (free-form input, with a grammar; Responses and Chat Completions callers offer them): the caller's
  own kind gets the tool as written, a Responses upstream a custom tool in its words; the others a function of one
  string, `input`, the grammar told in its description. The call comes back as the caller's custom tool call with
  its input text, and goes back (the next turn) as the upstream's own call.
- namespaces (Responses): flattened into functions named <namespace>__<tool> for the other kinds; the call comes back
  as the tool's own name in its namespace, and goes back (the next turn) under the flattened name.
- hosted web search ({"type": "web_search"} from Responses, web_search_20250305 from Messages): the upstream's own
  equivalent where it has one (the options both have in its words, the others left out and said so in the decision
  record's left_out); else (Chat Completions, Converse) left out visibly, in the x-specway-omitted-tools header
  and the decision record's left_out, and the caller's other tools still go.

Each cell asserts what the upstream received (in its own words) and what the caller got (through the SDK's types).
The echo kind has no wire and calls no tool: it is not a cell here.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.conformance_support import (
    MODEL,
    Clients,
    calls_of,
    cells,
    fixture_clients,  # noqa: F401  (a fixture)
    fixture_fake,  # noqa: F401  (a fixture)
    fixture_fresh,  # noqa: F401  (a fixture)
    fixture_live,  # noqa: F401  (a fixture)
    received,
    results_of,
    send,
    tools_of,
)
from tests.conftest import Live
from tests.fake_upstream import FakeUpstream

WIRE = ("openai", "anthropic", "responses", "bedrock")
PROMPT = "Add a greeting file."
LIMIT = 64

# --- custom tools ------------------------------------------------------------------------------------------------

PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+Hello, \"world\"! {not json}\n*** End Patch\n"
GRAMMAR = {"syntax": "lark", "definition": 'start: "*** Begin Patch" /(.|\\n)*/ "*** End Patch"'}
DESCRIBED = "Apply a patch to the files."
CUSTOM = {  # Responses writes the grammar in `format`, Chat Completions in format.grammar
    "responses": {"type": "custom", "name": "apply_patch", "description": DESCRIBED,
                  "format": {"type": "grammar", **GRAMMAR}},
    "chat": {"type": "custom", "custom": {"name": "apply_patch", "description": DESCRIBED,
                                          "format": {"type": "grammar", "grammar": GRAMMAR}}},
}
ONE_STRING = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"],
              "additionalProperties": False}
OWN = {"chat": "openai", "responses": "responses"}  # the kind that speaks each caller's format
CALLED = {"chat": "custom", "responses": "custom_tool_call"}  # how the caller's SDK types a custom tool's call


def _ask(tools: list[dict[str, Any]], kind: str, items: list[dict[str, Any]] | None = None,
         fmt: str = "responses") -> dict[str, Any]:
    given = [{"role": "user", "content": PROMPT}, *(items or [])]
    if fmt == "chat":
        return {"model": MODEL[kind], "messages": given, "tools": tools, "max_tokens": LIMIT}
    return {"model": MODEL[kind], "input": given, "tools": tools, "max_output_tokens": LIMIT}


def _offered(kind: str, body: dict[str, Any], name: str) -> dict[str, Any]:
    """The one tool called `name` the upstream was offered, in its own words."""
    if kind == "bedrock":
        tools = [t["toolSpec"] for t in (body.get("toolConfig") or {}).get("tools") or [] if "toolSpec" in t]
    else:
        tools = body.get("tools") or []
    found = [t.get("function", t) for t in tools if t.get("function", t).get("name") == name]
    assert len(found) == 1, tools
    return dict(found[0])


def _patched(fmt: str) -> list[dict[str, Any]]:
    """The next turn's history: the custom call as the caller got it, and its output."""
    if fmt == "chat":
        return [{"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_p1", "type": "custom", "custom": {"name": "apply_patch", "input": PATCH}}]},
                {"role": "tool", "tool_call_id": "call_p1", "content": "Done."}]
    return [{"type": "custom_tool_call", "call_id": "call_p1", "name": "apply_patch", "input": PATCH},
            {"type": "custom_tool_call_output", "call_id": "call_p1", "output": "Done."}]


@pytest.mark.parametrize(("fmt", "kind", "stream"), cells(kinds=WIRE, formats=("chat", "responses")))
def test_custom_tool(clients: Clients, fake: FakeUpstream, fmt: str, kind: str, stream: bool) -> None:
    own = OWN[fmt] == kind
    has_custom = own or kind == "responses"  # the upstream is offered a custom tool, and calls it as one
    call = {"id": "call_p1", "name": "apply_patch"}
    fake.script(text="", tool_calls=[{**call, "type": "custom", "arguments": PATCH}] if has_custom else
                [{**call, "arguments": json.dumps({"input": PATCH})}])
    got = send(clients, fmt, stream, _ask([CUSTOM[fmt]], kind, fmt=fmt))
    body = received(fake, kind, stream)
    if has_custom:
        assert body["tools"] == [CUSTOM[fmt] if own else CUSTOM["responses"]]
    else:
        assert tools_of(kind, body) == {"apply_patch": ONE_STRING}
        told = _offered(kind, body, "apply_patch")["description"]
        assert DESCRIBED in told and GRAMMAR["definition"] in told
    assert (got.calls, got.shapes) == ([("call_p1", "apply_patch", PATCH)], [(CALLED[fmt], None)])

    fake.script(text="Patched.")
    again = send(clients, fmt, stream, _ask([CUSTOM[fmt]], kind, _patched(fmt), fmt=fmt))
    body = received(fake, kind, stream)
    if own:
        assert body["messages" if fmt == "chat" else "input"][1:] == _patched(fmt)
    elif kind == "responses":
        assert body["input"][1:] == _patched("responses")
    else:
        assert calls_of(kind, body) == [("call_p1", "apply_patch", {"input": PATCH})]
        assert results_of(kind, body) == [("call_p1", "Done.")]
    assert (again.text, again.calls) == ("Patched.", [])


# --- namespaces ----------------------------------------------------------------------------------------------------

ISSUE = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
NAMESPACE = {"type": "namespace", "name": "github", "description": "GitHub.",
             "tools": [{"type": "function", "name": "create_issue", "description": "Open an issue.",
                        "parameters": ISSUE, "strict": False}]}
TITLE = {"title": "Say hello"}


@pytest.mark.parametrize(("fmt", "kind", "stream"), cells(kinds=WIRE, formats=("responses",)))
def test_namespace(clients: Clients, fake: FakeUpstream, fmt: str, kind: str, stream: bool) -> None:
    own = kind == "responses"
    call = {"id": "call_n1", "arguments": json.dumps(TITLE)}
    fake.script(text="", tool_calls=[{**call, "name": "create_issue", "namespace": "github"}] if own else
                [{**call, "name": "github__create_issue"}])
    got = send(clients, fmt, stream, _ask([NAMESPACE], kind))
    body = received(fake, kind, stream)
    if own:
        assert body["tools"] == [NAMESPACE]
    else:
        assert tools_of(kind, body) == {"github__create_issue": ISSUE}
    assert (got.calls, got.shapes) == ([("call_n1", "create_issue", TITLE)], [("function_call", "github")])

    history = [{"type": "function_call", "call_id": "call_n1", "name": "create_issue", "namespace": "github",
                "arguments": json.dumps(TITLE)},
               {"type": "function_call_output", "call_id": "call_n1", "output": "Issue 7 opened."}]
    fake.script(text="Opened.")
    again = send(clients, fmt, stream, _ask([NAMESPACE], kind, history))
    body = received(fake, kind, stream)
    if own:
        assert body["input"][1:] == history
    else:  # the call goes back under the name its tool was offered with
        assert calls_of(kind, body) == [("call_n1", "github__create_issue", TITLE)]
        assert results_of(kind, body) == [("call_n1", "Issue 7 opened.")]
    assert (again.text, again.calls) == ("Opened.", [])


# --- hosted web search ---------------------------------------------------------------------------------------------

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
FUNCTION = {"responses": {"type": "function", "name": "get_weather", "parameters": WEATHER, "strict": False},
            "messages": {"name": "get_weather", "input_schema": WEATHER}}
DOMAINS = ["example.com", "docs.example.org"]
SEARCH = {"responses": {"type": "web_search", "filters": {"allowed_domains": DOMAINS}, "search_context_size": "low"},
          "messages": {"type": "web_search_20250305", "name": "web_search", "allowed_domains": DOMAINS, "max_uses": 3}}
# The upstream's own web search, as each kind with one receives it from a caller of another format, and the option
# the caller gave that it has no word for (left out, and said so).
EQUIVALENT = {"responses": {"type": "web_search", "filters": {"allowed_domains": DOMAINS}},
              "anthropic": {"type": "web_search_20250305", "name": "web_search", "allowed_domains": DOMAINS}}
UNSAID = {"responses": "web_search_20250305.max_uses", "anthropic": "web_search.search_context_size"}
NATIVE = {"responses": "responses", "messages": "anthropic"}


def _record(live: Live, decision: str) -> dict[str, Any]:
    r = httpx.get(f"{live.url}/v1/route/explain/{decision}", headers=live.headers, timeout=10)
    assert r.status_code == 200, r.text
    return dict(r.json())


@pytest.mark.parametrize(("fmt", "kind", "stream"), cells(kinds=WIRE, formats=("responses", "messages")))
def test_hosted_web_search(clients: Clients, fake: FakeUpstream, live: Live, fmt: str, kind: str,
                           stream: bool) -> None:
    fake.script(text="It is sunny, says the web.")
    tools = [SEARCH[fmt], FUNCTION[fmt]]
    args = _ask(tools, kind) if fmt == "responses" else {
        "model": MODEL[kind], "messages": [{"role": "user", "content": PROMPT}], "tools": tools, "max_tokens": LIMIT}
    got = send(clients, fmt, stream, args)
    body = received(fake, kind, stream)
    headers = clients.headers
    record = _record(live, headers["x-specway-decision-id"])
    if kind == "bedrock":  # Converse has no hosted tool: left out, and said so
        said = SEARCH[fmt]["type"]
        assert tools_of(kind, body) == {"get_weather": WEATHER}
        assert headers["x-specway-omitted-tools"] == said
        assert record["left_out"] == [f"tool {said}: the bedrock upstream has no such tool"]
        assert (got.text, got.calls) == ("It is sunny, says the web.", [])
        return
    assert tools_of(kind, {"tools": [t for t in body["tools"] if t.get("type") in ("function", None)]}) == \
        {"get_weather": WEATHER}, "the caller's function goes, whatever happens to the hosted tool"
    hosted = [t for t in body["tools"] if t.get("type") not in ("function", None)]
    if kind == "openai":  # Chat Completions has no web search tool: left out, and said so
        said = SEARCH[fmt]["type"]
        assert hosted == []
        assert headers["x-specway-omitted-tools"] == said
        assert record["left_out"] == [f"tool {said}: the openai upstream has no such tool"]
    elif NATIVE[fmt] == kind:
        assert hosted == [SEARCH[fmt]]
        assert "x-specway-omitted-tools" not in headers and record["left_out"] == []
    else:
        assert hosted == [EQUIVALENT[kind]]
        assert "x-specway-omitted-tools" not in headers
        said = f"tool option {UNSAID[kind]}: the {kind} upstream's equivalent has no such option"
        assert record["left_out"] == [said]
    assert (got.text, got.calls) == ("It is sunny, says the web.", [])
