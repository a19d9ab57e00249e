"""Conformance: every inbound format (through its official SDK) x every upstream kind (openai, anthropic, responses,
azure through Chat Completions and through Responses, echo, bedrock, gemini, vertex with a Gemini and a Claude
model) x whole or streamed x {text, image, tools round
trip, structured output, effort/thinking, cache-control, multi-turn with system}; the refusals are in tests/test_conformance_refusals.py.

Each cell asserts what the upstream received (the fake records every request; read in the upstream's own words)
and what the caller got (through the SDK's own types). Whatever cannot be translated must be refused by name, a 400
unsupported_parameter, never a 200 that dropped it. The echo kind has no wire: its cells check the caller's side.
The bedrock cells run botocore's signing for real against the fake, which checks every signature; the vertex cells
sign in with google-auth for real (a service account's signed assertion, checked by the fake's token endpoint).
Fixtures, SDK drivers and the readers of what an upstream received are in tests/conformance_support.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conformance_support import (
    BUDGETS,
    EFFORT_FIELDS,
    FORMATS,
    MODEL,
    NATIVE,
    PLAIN,
    STOP,
    TOOL_STOP,
    Clients,
    calls_of,
    cells,
    check_usage,
    effort_of,
    fixture_clients,  # noqa: F401  (a fixture)
    fixture_fake,  # noqa: F401  (a fixture)
    fixture_fresh,  # noqa: F401  (a fixture)
    fixture_live,  # noqa: F401  (a fixture)
    images_of,
    limit_of,
    received,
    refusal,
    results_of,
    send,
    system_of,
    tools_of,
    turns_of,
    wire,
)
from tests.fake_upstream import FakeUpstream

SYSTEM = "You answer in one short sentence."
PROMPT = "What is the weather in Paris?"
TEXT = "Bonjour! Grüße, 你好 👋 — it is sunny in Paris."
USAGE = (31, 7, 5)  # what the fake reports: input, output, cache reads
MAX_TOKENS = 50
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
IMAGE_URL = "https://example.com/images/cat.png"
LOOK = "What is in this picture?"

WEATHER: dict[str, Any] = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS: dict[str, Any] = {
    "chat": [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                               "parameters": WEATHER}}],
    "responses": [{"type": "function", "name": "get_weather", "description": "The weather in a city.",
                   "parameters": WEATHER, "strict": False}],
    "messages": [{"name": "get_weather", "description": "The weather in a city.", "input_schema": WEATHER}],
}
CALL = ("call_w1", "get_weather", {"city": "Paris"})
RESULT = "18C and sunny"


def ask(fmt: str, model: str, content: Any = PROMPT, **extra: Any) -> dict[str, Any]:
    """One user turn in the caller's format (content: text, or the format's own parts)."""
    if fmt == "responses":
        entry = content if isinstance(content, str) else [{"role": "user", "content": content}]
        return {"model": model, "input": entry, "max_output_tokens": MAX_TOKENS, **extra}
    return {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": MAX_TOKENS, **extra}


def echoed(fake: FakeUpstream) -> None:
    """An echo cell: the answer came from the built-in echo, so no upstream on the wire saw anything."""
    assert fake.requests == [], [r.path for r in fake.requests]


# --- text ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fmt", "kind", "stream"), cells())
def test_text(clients: Clients, fake: FakeUpstream, fmt: str, kind: str, stream: bool) -> None:
    fake.script(text=TEXT, usage=USAGE)
    got = send(clients, fmt, stream, ask(fmt, MODEL[kind]))
    assert got.stop == STOP[fmt] and got.calls == []
    if kind == "echo":
        echoed(fake)
        assert got.text == f"Echo: {PROMPT}"
        assert got.usage["input"] and got.usage["output"] == len(got.text.split())
        return
    body = received(fake, kind, stream)
    assert turns_of(kind, body) == [("user", PROMPT)]
    assert limit_of(kind, body) == MAX_TOKENS
    assert got.text == TEXT
    check_usage(got, fmt, kind, USAGE)


# --- image -----------------------------------------------------------------------------------------------------------


IMAGE_URL_PARAM = {"chat": "messages.0.content.1.image_url.url", "responses": "input.0.content.1.image_url",
                   "messages": "messages.0.content.1.source.url"}


def image_part(fmt: str, url: str | None) -> dict[str, Any]:
    data_url = f"data:image/png;base64,{PNG}"
    if fmt == "chat":
        return {"type": "image_url", "image_url": {"url": url or data_url}}
    if fmt == "responses":
        return {"type": "input_image", "image_url": url or data_url, "detail": "auto"}
    source = {"type": "url", "url": url} if url else {"type": "base64", "media_type": "image/png", "data": PNG}
    return {"type": "image", "source": source}


@pytest.mark.parametrize("url", [None, IMAGE_URL], ids=["base64", "https"])
@pytest.mark.parametrize(("fmt", "kind", "stream"), cells())
def test_image(clients: Clients, fake: FakeUpstream, fmt: str, kind: str, stream: bool, url: str | None) -> None:
    text_part = {"type": "input_text" if fmt == "responses" else "text", "text": LOOK}
    args = ask(fmt, MODEL[kind], [text_part, image_part(fmt, url)])
    if kind == "bedrock" and url:  # Converse takes an image's bytes, and fetches no URL
        error = refusal(clients, fmt, stream, args)
        assert (error["code"], error["param"]) == ("unsupported_parameter", IMAGE_URL_PARAM[fmt]), error
        assert fake.requests == [], "a refused request never reaches the upstream"
        return
    got = send(clients, fmt, stream, args)
    if kind == "echo":
        echoed(fake)
        assert got.text == f"Echo: {LOOK} [image]"
        return
    body = received(fake, kind, stream)
    assert images_of(kind, body) == [("url", url) if url else ("base64", "image/png", PNG)]
    assert turns_of(kind, body) == [("user", LOOK)]
    assert got.text == "Hello from fake"


# --- tools round trip --------------------------------------------------------------------------------------------


def tool_history(fmt: str, model: str) -> dict[str, Any]:
    """The second turn: the caller sends back the assistant's call (as it got it) and the tool's result."""
    call_id, name, args = CALL
    if fmt == "chat":
        messages = [
            {"role": "user", "content": PROMPT},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": call_id, "content": RESULT},
        ]
        return {"model": model, "messages": messages, "tools": TOOLS[fmt], "max_tokens": MAX_TOKENS}
    if fmt == "responses":
        items = [
            {"role": "user", "content": PROMPT},
            {"type": "function_call", "call_id": call_id, "name": name, "arguments": json.dumps(args)},
            {"type": "function_call_output", "call_id": call_id, "output": RESULT},
        ]
        return {"model": model, "input": items, "tools": TOOLS[fmt], "max_output_tokens": MAX_TOKENS}
    messages = [
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": name, "input": args}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": RESULT}]},
    ]
    return {"model": model, "messages": messages, "tools": TOOLS[fmt], "max_tokens": MAX_TOKENS}


@pytest.mark.parametrize(("fmt", "kind", "stream"), cells())
def test_tools_round_trip(clients: Clients, fake: FakeUpstream, fmt: str, kind: str, stream: bool) -> None:
    call_id, name, args = CALL
    fake.script(text="", usage=USAGE, tool_calls=[{"id": call_id, "name": name, "arguments": json.dumps(args)}])
    first = send(clients, fmt, stream, ask(fmt, MODEL[kind], tools=TOOLS[fmt]))
    if kind == "echo":  # echo never calls a tool; it takes the offer and the history and answers in text
        second = send(clients, fmt, stream, tool_history(fmt, MODEL[kind]))
        echoed(fake)
        assert (first.calls, first.text, second.calls, second.text) == ([], f"Echo: {PROMPT}", [], f"Echo: {PROMPT}")
        return
    offered = received(fake, kind, stream)
    assert tools_of(kind, offered) == {name: WEATHER}
    assert first.calls == [CALL] and first.stop == TOOL_STOP[fmt]
    check_usage(first, fmt, kind, USAGE)

    fake.script(text="It is 18C and sunny in Paris.")
    second = send(clients, fmt, stream, tool_history(fmt, MODEL[kind]))
    body = received(fake, kind, stream)
    assert calls_of(kind, body) == [CALL]
    assert results_of(kind, body) == [(call_id, RESULT)]
    assert turns_of(kind, body)[0] == ("user", PROMPT)
    assert second.text == "It is 18C and sunny in Paris." and second.calls == []


# --- structured output -------------------------------------------------------------------------------------------

SCHEMA: dict[str, Any] = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
          "additionalProperties": False}
ANSWER = {"answer": "sunny"}
OUTPUT: dict[str, Any] = {
    "chat": {"response_format": {"type": "json_schema",
                                 "json_schema": {"name": "reply", "schema": SCHEMA, "strict": True}}},
    "responses": {"text": {"format": {"type": "json_schema", "name": "reply", "schema": SCHEMA, "strict": True}}},
    "messages": {"output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}},
}
FORCED_TOOL = "specway_json_reply"  # the reserved-prefix tool an Anthropic upstream is forced to call (schema "reply")
UNNAMED_TOOL = "specway_json_output"  # the same, for a schema without a name
OUTPUT_FIELD = {"chat": "response_format", "responses": "text.format", "messages": "output_config.format"}


@pytest.mark.parametrize(("fmt", "kind", "stream"), cells())
def test_structured_output(clients: Clients, fake: FakeUpstream, fmt: str, kind: str, stream: bool) -> None:
    args = ask(fmt, MODEL[kind], **OUTPUT[fmt])
    if kind == "echo":
        error = refusal(clients, fmt, stream, args)
        assert (error["code"], error["param"]) == ("unsupported_parameter", OUTPUT_FIELD[fmt]), error
        assert OUTPUT_FIELD[fmt] in error["message"] and "echo" in error["message"]
        echoed(fake)
        return
    forced_tool = (wire(kind) == "anthropic" and fmt != "messages") or kind == "bedrock"
    forced = FORCED_TOOL if fmt != "messages" else UNNAMED_TOOL  # Messages' output_config names no schema
    if forced_tool:  # Anthropic answers the forced tool; the caller must get its input as the JSON text
        fake.script(text="", tool_calls=[{"id": "toolu_out", "name": forced, "arguments": json.dumps(ANSWER)}])
    else:
        fake.script(text=json.dumps(ANSWER))
    got = send(clients, fmt, stream, args)
    body = received(fake, kind, stream)
    if NATIVE[fmt] == wire(kind):  # the caller's own words, byte for byte
        field = next(iter(OUTPUT[fmt]))
        assert body[field] == OUTPUT[fmt][field]
    elif wire(kind) == "openai":
        sent = body["response_format"]
        assert (sent["type"], sent["json_schema"]["schema"]) == ("json_schema", SCHEMA), sent
    elif wire(kind) == "responses":
        sent = body["text"]["format"]
        assert (sent["type"], sent["schema"]) == ("json_schema", SCHEMA), sent
    elif kind == "bedrock":
        assert body["toolConfig"]["toolChoice"] == {"tool": {"name": forced}}, body["toolConfig"]
        assert tools_of(kind, body) == {forced: SCHEMA}
    elif wire(kind) == "gemini":
        assert body["generationConfig"]["responseMimeType"] == "application/json"
        assert body["generationConfig"]["responseJsonSchema"] == SCHEMA and "tools" not in body
    else:
        assert body["tool_choice"] == {"type": "tool", "name": FORCED_TOOL}, body.get("tool_choice")
        assert tools_of(kind, body) == {FORCED_TOOL: SCHEMA}
    assert json.loads(got.text) == ANSWER
    assert got.calls == [] and got.stop == STOP[fmt]


# --- effort and thinking -------------------------------------------------------------------------------------------

EARLIER, AGAIN, BEFORE = "It is sunny.", "And tomorrow?", "The user asks about Paris."
SIGNED: dict[str, Any] = {"type": "thinking", "thinking": BEFORE, "signature": "EqQBCkYIBxgCKkB+c2ln/w=="}
# An earlier assistant turn with the format's own reasoning, which goes back only to the provider that made it
# (byte for byte), and to no other (the documented rule): its text and signature or encrypted content must not leak.
PRIOR: dict[str, Any] = {
    "chat": [{"role": "assistant", "content": EARLIER, "reasoning_content": BEFORE}],
    "responses": [{"type": "reasoning", "id": "rs_prior", "summary": [{"type": "summary_text", "text": BEFORE}],
                   "encrypted_content": "gAAAA-prior"},
                  {"role": "assistant", "content": EARLIER}],
    "messages": [{"role": "assistant", "content": [SIGNED, {"type": "text", "text": EARLIER}]}],
}
SEALED = {"chat": BEFORE, "responses": "gAAAA-prior", "messages": SIGNED["signature"]}
# What each caller asks for, and the tier routing makes of it with the policy's budgets (2000 <= medium's 3072).
EFFORT: dict[str, Any] = {
    "chat": {"reasoning_effort": "high"},
    "responses": {"reasoning": {"effort": "low", "summary": "auto"}},
    "messages": {"thinking": {"type": "enabled", "budget_tokens": 2000}, "max_tokens": 4000},
}
TIER = {"chat": "high", "responses": "low", "messages": "medium"}
HISTORY = {"chat": "messages", "responses": "input", "messages": "messages"}


def ask_effort(fmt: str, model: str) -> dict[str, Any]:
    turns = [{"role": "user", "content": PROMPT}, *PRIOR[fmt], {"role": "user", "content": AGAIN}]
    limit = "max_output_tokens" if fmt == "responses" else "max_tokens"
    return {"model": model, HISTORY[fmt]: turns, limit: MAX_TOKENS, **EFFORT[fmt]}


def caller_limit(fmt: str) -> int:
    return EFFORT[fmt].get("max_tokens", MAX_TOKENS)


@pytest.mark.parametrize(("fmt", "kind", "stream"), cells())
def test_effort_and_thinking(clients: Clients, fake: FakeUpstream, fmt: str, kind: str, stream: bool) -> None:
    args = ask_effort(fmt, MODEL[kind])
    got = send(clients, fmt, stream, args)
    if kind == "echo":
        echoed(fake)
        assert got.text == f"Echo: {AGAIN}"
        return
    body = received(fake, kind, stream)
    tier, same = TIER[fmt], NATIVE[fmt] == wire(kind)
    if wire(kind) in ("anthropic", "bedrock"):  # Claude's thinking (on Bedrock in additionalModelRequestFields)
        budget = 2000 if fmt == "messages" else BUDGETS[tier]
        assert effort_of(kind, body) == {"type": "enabled", "budget_tokens": budget}
        assert limit_of(kind, body) == (caller_limit(fmt) if fmt == "messages" else budget + MAX_TOKENS)
    elif wire(kind) == "gemini":  # a thinking budget for a Gemini model before Gemini 3, its thoughts shown
        budget = 2000 if fmt == "messages" else BUDGETS[tier]
        assert effort_of(kind, body) == {"thinkingBudget": budget, "includeThoughts": True}
        assert limit_of(kind, body) == caller_limit(fmt)
    else:
        assert effort_of(kind, body) == tier
        assert limit_of(kind, body) == caller_limit(fmt)
        if wire(kind) == "responses" and same:
            assert body["reasoning"] == EFFORT["responses"]["reasoning"]
    assert turns_of(kind, body) == [("user", PROMPT), ("assistant", EARLIER), ("user", AGAIN)]
    if same:
        assert body[HISTORY[fmt]] == args[HISTORY[fmt]]
    else:
        assert BEFORE not in json.dumps(body) and SEALED[fmt] not in json.dumps(body)
    assert got.text == "Hello from fake"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_effort_only_routes_for_a_plain_model(clients: Clients, fake: FakeUpstream, fmt: str, stream: bool) -> None:
    """acme/oa-plain is not a reasoning model: its upstream gets no effort field and a plain max_tokens."""
    got = send(clients, fmt, stream, ask_effort(fmt, PLAIN))
    body = received(fake, "openai", stream, model=PLAIN)
    assert [f for f in EFFORT_FIELDS if f in body] == []
    assert limit_of("openai", body, reasoning=False) == caller_limit(fmt)
    assert got.text == "Hello from fake"


THOUGHT = "The sky over Paris is clear."
# The fake shows Reply.reasoning in each dialect's way: chat's reasoning_content, an Anthropic thinking block signed
# with Reply.signature (base64 here, +/= and all, and not the earlier turn's), a Responses reasoning item with the
# fake's encrypted content.
SIGNATURE, ENCRYPTED = "ErUBCkYIBxgCKkD+dGhvdWdodA/z+fake==", "gAAAA-fake"


def reasoning_back(fmt: str, kind: str) -> list[tuple[str, str | None]]:
    """The upstream's reasoning as the caller's format shows it: (text, signature or encrypted content). Chat has only
    the text; a Responses caller gets encrypted content only from OpenAI Responses, and a Messages caller a signature
    only from Anthropic (byte for byte), else an empty one: they go back only to the provider that made them."""
    if fmt == "chat":
        return [(THOUGHT, None)]
    if fmt == "responses":
        return [(THOUGHT, ENCRYPTED if wire(kind) == "responses" else None)]
    return [(THOUGHT, SIGNATURE if wire(kind) == "anthropic" else "")]


@pytest.mark.parametrize(("fmt", "kind", "stream"),
                         cells(kinds=("openai", "anthropic", "responses", "azure-chat", "azure-responses", "bedrock",
                                      "gemini", "vertex", "vertex-claude")))
def test_upstream_reasoning_comes_back_in_the_callers_shape(clients: Clients, fake: FakeUpstream, fmt: str,
                                                            kind: str, stream: bool) -> None:
    fake.script(text=TEXT, reasoning=[THOUGHT], signature=SIGNATURE)
    got = send(clients, fmt, stream, ask_effort(fmt, MODEL[kind]))
    received(fake, kind, stream)
    assert got.text == TEXT
    assert got.reasoning == reasoning_back(fmt, kind)


# --- cache control -------------------------------------------------------------------------------------------------

EPHEMERAL, HOUR = {"type": "ephemeral"}, {"type": "ephemeral", "ttl": "1h"}
BETA = "prompt-caching-2024-07-31,extended-cache-ttl-2025-04-11"
CACHE_USAGE = (31, 7, 5, 11)  # input, output, cache reads, cache writes (only Anthropic reports writes)
MARKED_SYSTEM = [{"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}]
MARKED_USER = [{"role": "user", "content": [{"type": "text", "text": PROMPT, "cache_control": HOUR}]}]
BREAKPOINT = {"mode": "explicit"}  # OpenAI Responses' own mark; it has no Anthropic ttl, so it maps to ephemeral


def ask_cached(fmt: str, model: str) -> dict[str, Any]:
    """Marks on the system, a user block and a tool: Anthropic's words (and LiteLLM's in chat), OpenAI's breakpoints
    in Responses."""
    if fmt == "messages":
        return {"model": model, "system": MARKED_SYSTEM, "messages": MARKED_USER, "max_tokens": MAX_TOKENS,
                "tools": [{**TOOLS[fmt][0], "cache_control": EPHEMERAL}], "extra_headers": {"anthropic-beta": BETA}}
    if fmt == "chat":
        return {"model": model, "messages": [{"role": "system", "content": MARKED_SYSTEM}, *MARKED_USER],
                "tools": [{**TOOLS[fmt][0], "cache_control": EPHEMERAL}], "max_tokens": MAX_TOKENS}
    items = [{"role": "developer", "content": [{"type": "input_text", "text": SYSTEM,
                                                "prompt_cache_breakpoint": BREAKPOINT}]},
             {"role": "user", "content": [{"type": "input_text", "text": PROMPT, "prompt_cache_breakpoint": BREAKPOINT}]}]
    return {"model": model, "input": items, "tools": TOOLS[fmt], "prompt_cache_key": "conformance",
            "max_output_tokens": MAX_TOKENS}


@pytest.mark.parametrize(("fmt", "kind", "stream"), cells())
def test_cache_control(clients: Clients, fake: FakeUpstream, fmt: str, kind: str, stream: bool) -> None:
    fake.script(text=TEXT, usage=CACHE_USAGE)
    args = ask_cached(fmt, MODEL[kind])
    got = send(clients, fmt, stream, args)
    if kind == "echo":
        echoed(fake)
        return
    body = received(fake, kind, stream)
    headers = fake.requests[-1].headers
    assert (system_of(kind, body), turns_of(kind, body)) == (SYSTEM, [("user", PROMPT)])
    version = clients.anthropic.default_headers["anthropic-version"] if fmt == "messages" else "2023-06-01"
    said_version = wire(kind) == "anthropic" and kind != "vertex-claude"  # Claude on Vertex AI: in the body
    assert headers.get("anthropic-version") == (version if said_version else None)  # the caller's, or config's
    assert headers.get("anthropic-beta") == (BETA if wire(kind) == "anthropic" and fmt == "messages" else None)
    if wire(kind) == "anthropic" and fmt == "messages":  # byte for byte
        assert (body["system"], body["messages"], body["tools"]) == (args["system"], args["messages"], args["tools"])
    elif wire(kind) == "anthropic":
        user_mark = HOUR if fmt == "chat" else EPHEMERAL
        assert body["system"] == MARKED_SYSTEM
        assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": PROMPT,
                                                                   "cache_control": user_mark}]}]
        if fmt == "chat":
            assert body["tools"][0].get("cache_control") == EPHEMERAL
    elif wire(kind) == "responses" and fmt == "responses":
        assert (body["input"], body["prompt_cache_key"]) == (args["input"], "conformance")
    elif kind == "bedrock":  # each mark a cachePoint after its block; the caching betas said no more than that
        point, hour = {"cachePoint": {"type": "default"}}, {"cachePoint": {"type": "default", "ttl": "1h"}}
        assert body["system"] == [{"text": SYSTEM}, point]
        assert body["messages"] == [{"role": "user", "content": [{"text": PROMPT},
                                                                 point if fmt == "responses" else hour]}]
        assert body["toolConfig"]["tools"][1:] == ([] if fmt == "responses" else [point])
        assert "additionalModelRequestFields" not in body
    # to the other OpenAI-kind cells marks need no words: the body was accepted and answered
    assert got.text == TEXT
    check_usage(got, fmt, kind, CACHE_USAGE)


# --- multi-turn with a system prompt ---------------------------------------------------------------------------------

TURNS = [("user", "Hi, I am Ada."), ("assistant", "Hello Ada."), ("user", "I live in Paris."),
         ("assistant", "Noted."), ("user", "Where do I live?")]


def ask_turns(fmt: str, model: str) -> dict[str, Any]:
    messages = [{"role": role, "content": text} for role, text in TURNS]
    if fmt == "chat":
        return {"model": model, "messages": [{"role": "system", "content": SYSTEM}, *messages],
                "max_tokens": MAX_TOKENS}
    if fmt == "responses":
        return {"model": model, "instructions": SYSTEM, "input": messages, "max_output_tokens": MAX_TOKENS}
    return {"model": model, "system": SYSTEM, "messages": messages, "max_tokens": MAX_TOKENS}


@pytest.mark.parametrize(("fmt", "kind", "stream"), cells())
def test_multi_turn_with_system(clients: Clients, fake: FakeUpstream, fmt: str, kind: str, stream: bool) -> None:
    got = send(clients, fmt, stream, ask_turns(fmt, MODEL[kind]))
    if kind == "echo":
        echoed(fake)
        assert got.text == f"Echo: {TURNS[-1][1]}"
        return
    body = received(fake, kind, stream)
    assert system_of(kind, body) == SYSTEM
    assert turns_of(kind, body) == TURNS
    if wire(kind) == "openai":  # the system message comes first
        assert body["messages"][0]["role"] in ("system", "developer")
    assert got.text == "Hello from fake"
