"""SDK conformance: the official openai and anthropic SDKs, pointed at Specway by base URL and key only.

Every inbound format (chat, responses, messages) x every upstream kind (openai, anthropic), whole, streamed and
through the SDKs' stream helpers. One fake upstream and one gateway serve the whole module; each test scripts the
fake, talks through an SDK, and checks both what the SDK saw and what the fake received.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

from tests.conftest import Live, free_port, serve
from tests.fake_upstream import FakeUpstream

OA_SECRET = "sk-upstream-oa-2f9c41d7e0b3a5"  # the upstream keys, set in the environment the config names
AN_SECRET = "sk-ant-upstream-8d1e5a6b3c7041"
SYSTEM = "You answer in one short sentence."
PROMPT = "Say hello to the conformance suite."
TEXT = "Bonjour! Grüße, 你好 👋 — hello from the fake upstream, streamed word by word."
USAGE = (31, 7, 5)  # what the fake reports: (input, output, cache reads)
MAX_TOKENS = 50
TEMPERATURE = 0.25

FORMATS = ("chat", "responses", "messages")
KINDS = ("openai", "anthropic")
MODES = ("create", "stream", "helper")  # whole; the raw event stream; the SDK's stream helper and its final object
MODEL = {"openai": "acme/oa", "anthropic": "acme/an"}
UPSTREAM_MODEL = {"openai": "gpt-up", "anthropic": "claude-up"}
UPSTREAM_PATH = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
PREFIX = {"chat": "chatcmpl-", "responses": "resp_", "messages": "msg_"}
SDK: dict[str, ModuleType] = {"chat": openai, "responses": openai, "messages": anthropic}

WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER_DESC = "The weather in a city."
TOOLS = {
    "chat": [{"type": "function", "function": {"name": "get_weather", "description": WEATHER_DESC,
                                               "parameters": WEATHER_SCHEMA}}],
    "responses": [{"type": "function", "name": "get_weather", "description": WEATHER_DESC,
                   "parameters": WEATHER_SCHEMA, "strict": False}],
    "messages": [{"name": "get_weather", "description": WEATHER_DESC, "input_schema": WEATHER_SCHEMA}],
}


# --- the gateway, the fake and the clients, once per module --------------------------------------------------------


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture(scope="module")
def live(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    timeouts = {"connect": 2, "read": 1, "total": 5}
    config = {
        "upstreams": {
            "oa": {"kind": "openai", "base_url": fake.url, "api_key_env": "SPECWAY_SDK_OA_KEY", "timeouts": timeouts},
            "an": {"kind": "anthropic", "base_url": fake.anthropic_url, "api_key_env": "SPECWAY_SDK_AN_KEY",
                   "timeouts": timeouts},
            "dead": {"kind": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1", "timeouts": timeouts},
        },
        "models": [
            {"id": "acme/oa", "upstream": "oa", "name": "gpt-up"},
            {"id": "acme/an", "upstream": "an", "name": "claude-up", "display_name": "Acme Claude"},
            {"id": "acme/dead", "upstream": "dead", "name": "gone"},
        ],
        "policies": {
            "default": {"default_model": "acme/oa"},
            "with-fallback": {"default_model": "acme/oa", "fallbacks": {"acme/oa": ["acme/an"]}},
        },
        "default_policy": "default",
        "cooldown": {"seconds": 0},  # each error case must reach its upstream (tests/test_routing.py covers cooldowns)
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECWAY_SDK_OA_KEY", OA_SECRET)
        mp.setenv("SPECWAY_SDK_AN_KEY", AN_SECRET)
        with serve(config, tmp_path_factory.mktemp("sdk")) as g:
            yield g


class Seen:
    """Every HTTP response an SDK client received; a response hook sees a stream's headers before its body."""

    def __init__(self) -> None:
        self.responses: list[httpx2.Response] = []

    def __call__(self, response: httpx2.Response) -> None:
        self.responses.append(response)

    @property
    def last(self) -> httpx2.Response:
        return self.responses[-1]


@dataclass
class Clients:
    openai: openai.OpenAI
    anthropic: anthropic.Anthropic
    seen: Seen


def make_clients(live: Live, key: str, *, retries: int = 0, x_api_key: bool = False) -> Clients:
    seen = Seen()

    def http(sdk: ModuleType) -> Any:
        return sdk.DefaultHttpxClient(event_hooks={"response": [seen]}, trust_env=False)

    oa = openai.OpenAI(base_url=live.url + "/v1", api_key=key, max_retries=retries, timeout=10, http_client=http(openai))
    if x_api_key:
        # An explicit (never sent) api_key keeps the SDK from looking for credentials; Authorization is omitted,
        # so x-api-key is the only credential on the wire, as older Anthropic SDKs send it.
        an = anthropic.Anthropic(base_url=live.url, api_key="sk-never-sent", max_retries=retries, timeout=10,
                                 default_headers={"Authorization": anthropic.omit, "x-api-key": key},
                                 http_client=http(anthropic))
    else:
        an = anthropic.Anthropic(base_url=live.url, api_key=key, max_retries=retries, timeout=10,
                                 http_client=http(anthropic))
    return Clients(oa, an, seen)


@pytest.fixture(scope="module")
def clients(live: Live) -> Clients:
    return make_clients(live, live.key)


@pytest.fixture(autouse=True)
def _fresh(fake: FakeUpstream, clients: Clients) -> None:
    fake.reset()
    clients.seen.responses.clear()


# --- one request through the SDK, as an Outcome -------------------------------------------------------------------


@dataclass
class Outcome:
    """What the caller got, read back from the SDK's own types, in one shape for every format."""

    id: str
    model: str
    text: str
    stop: str  # finish_reason, stop_reason, or the response status (":" its incomplete reason)
    usage: dict[str, int | None]  # input / output / cached (/ total where the format has one)
    calls: list[tuple[str, str, Any]]  # (call id, name, decoded arguments)
    headers: httpx2.Headers
    deltas: str | None = None  # the text as it arrived in deltas (streams only)
    ids: set[str] = field(default_factory=set)  # every id a chunk or event carried
    models: set[str] = field(default_factory=set)  # every model a chunk or event carried


def request_args(fmt: str, model: str, **extra: Any) -> dict[str, Any]:
    """The same request in each format: a system text, one user turn, max tokens and temperature."""
    if fmt == "chat":
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]
        return {"model": model, "messages": messages, "max_tokens": MAX_TOKENS, "temperature": TEMPERATURE, **extra}
    if fmt == "responses":
        return {"model": model, "instructions": SYSTEM, "input": PROMPT, "max_output_tokens": MAX_TOKENS,
                "temperature": TEMPERATURE, **extra}
    # anthropic 2.x dropped temperature from messages.create; callers send it as an extra body field.
    return {"model": model, "system": SYSTEM, "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": MAX_TOKENS, "extra_body": {"temperature": TEMPERATURE}, **extra}


def run(c: Clients, fmt: str, mode: str, args: dict[str, Any]) -> Outcome:
    return _DRIVERS[(fmt, mode)](c, args)


# chat


def _chat_outcome(done: Any, headers: httpx2.Headers, **kw: Any) -> Outcome:
    choice, u = done.choices[0], done.usage
    usage = {"input": u.prompt_tokens, "output": u.completion_tokens, "total": u.total_tokens,
             "cached": u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else None}
    calls = [(t.id, t.function.name, json.loads(t.function.arguments)) for t in choice.message.tool_calls or []]
    return Outcome(done.id, done.model, choice.message.content or "", choice.finish_reason, usage, calls, headers,
                   **kw)


def _chat_create(c: Clients, args: dict[str, Any]) -> Outcome:
    return _chat_outcome(c.openai.chat.completions.create(**args), c.seen.last.headers)


def _chat_stream(c: Clients, args: dict[str, Any]) -> Outcome:
    stream = c.openai.chat.completions.create(**args, stream=True, stream_options={"include_usage": True})
    headers = c.seen.last.headers
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None, "include_usage: the last chunk is the usage"
    text, calls, finish = [], {}, None
    for chunk in chunks:
        assert chunk.object == "chat.completion.chunk"
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            for tc in choice.delta.tool_calls or []:
                entry = calls.setdefault(tc.index, [tc.id, tc.function.name, ""])
                entry[2] += tc.function.arguments or ""
            finish = choice.finish_reason or finish
    u = chunks[-1].usage
    usage = {"input": u.prompt_tokens, "output": u.completion_tokens, "total": u.total_tokens,
             "cached": u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else None}
    return Outcome(chunks[0].id, chunks[0].model, "".join(text), finish or "", usage,
                   [(i, n, json.loads(a)) for _, (i, n, a) in sorted(calls.items())], headers, "".join(text),
                   {ch.id for ch in chunks}, {ch.model for ch in chunks})


def _chat_helper(c: Clients, args: dict[str, Any]) -> Outcome:
    with c.openai.chat.completions.stream(**args, stream_options={"include_usage": True}) as s:
        headers = c.seen.last.headers
        deltas = "".join(ev.delta for ev in s if ev.type == "content.delta")
        done = s.get_final_completion()
    return _chat_outcome(done, headers, deltas=deltas)


# responses


def _responses_outcome(r: Any, headers: httpx2.Headers, **kw: Any) -> Outcome:
    stop = r.status if r.incomplete_details is None else f"{r.status}:{r.incomplete_details.reason}"
    u = r.usage
    usage = {"input": u.input_tokens, "output": u.output_tokens, "total": u.total_tokens,
             "cached": u.input_tokens_details.cached_tokens}
    calls = [(i.call_id, i.name, json.loads(i.arguments)) for i in r.output if i.type == "function_call"]
    return Outcome(r.id, r.model, r.output_text, stop, usage, calls, headers, **kw)


def _responses_create(c: Clients, args: dict[str, Any]) -> Outcome:
    return _responses_outcome(c.openai.responses.create(**args), c.seen.last.headers)


def _responses_stream(c: Clients, args: dict[str, Any]) -> Outcome:
    stream = c.openai.responses.create(**args, stream=True)
    headers = c.seen.last.headers
    events = list(stream)
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"], types
    assert types[-1] == "response.completed", types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    arguments = {e.item_id: "" for e in events if e.type == "response.function_call_arguments.delta"}
    for e in events:
        if e.type == "response.function_call_arguments.delta":
            arguments[e.item_id] += e.delta
    final = events[-1].response
    for item in final.output:
        if item.type == "function_call":
            assert arguments.get(item.id) == item.arguments, "the argument deltas add up to the final arguments"
    responses = [events[0].response, events[1].response, final]
    return _responses_outcome(final, headers, deltas=deltas, ids={r.id for r in responses},
                              models={r.model for r in responses})


def _responses_helper(c: Clients, args: dict[str, Any]) -> Outcome:
    with c.openai.responses.stream(**args) as s:
        headers = c.seen.last.headers
        deltas = "".join(e.delta for e in s if e.type == "response.output_text.delta")
        final = s.get_final_response()
    return _responses_outcome(final, headers, deltas=deltas)


# messages


def _messages_outcome(m: Any, headers: httpx2.Headers, **kw: Any) -> Outcome:
    text = "".join(b.text for b in m.content if b.type == "text")
    calls = [(b.id, b.name, b.input) for b in m.content if b.type == "tool_use"]
    usage = {"input": m.usage.input_tokens, "output": m.usage.output_tokens, "cached": m.usage.cache_read_input_tokens}
    return Outcome(m.id, m.model, text, m.stop_reason or "", usage, calls, headers, **kw)


def _messages_create(c: Clients, args: dict[str, Any]) -> Outcome:
    return _messages_outcome(c.anthropic.messages.create(**args), c.seen.last.headers)


def _messages_stream(c: Clients, args: dict[str, Any]) -> Outcome:
    stream = c.anthropic.messages.create(**args, stream=True)
    headers = c.seen.last.headers
    events = list(stream)
    types = [e.type for e in events]
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"], types
    text, calls = [], {}
    for e in events:
        if e.type == "content_block_start" and e.content_block.type == "tool_use":
            calls[e.index] = [e.content_block.id, e.content_block.name, ""]
        elif e.type == "content_block_delta" and e.delta.type == "text_delta":
            text.append(e.delta.text)
        elif e.type == "content_block_delta" and e.delta.type == "input_json_delta":
            calls[e.index][2] += e.delta.partial_json
    start, delta = events[0].message, events[-2]
    usage = {"input": delta.usage.input_tokens, "output": delta.usage.output_tokens,
             "cached": delta.usage.cache_read_input_tokens}
    return Outcome(start.id, start.model, "".join(text), delta.delta.stop_reason or "", usage,
                   [(i, n, json.loads(a or "{}")) for _, (i, n, a) in sorted(calls.items())], headers, "".join(text))


def _messages_helper(c: Clients, args: dict[str, Any]) -> Outcome:
    with c.anthropic.messages.stream(**args) as s:
        headers = c.seen.last.headers
        deltas = "".join(s.text_stream)
        final = s.get_final_message()
    return _messages_outcome(final, headers, deltas=deltas)


_DRIVERS: dict[tuple[str, str], Callable[[Clients, dict[str, Any]], Outcome]] = {
    ("chat", "create"): _chat_create,
    ("chat", "stream"): _chat_stream,
    ("chat", "helper"): _chat_helper,
    ("responses", "create"): _responses_create,
    ("responses", "stream"): _responses_stream,
    ("responses", "helper"): _responses_helper,
    ("messages", "create"): _messages_create,
    ("messages", "stream"): _messages_stream,
    ("messages", "helper"): _messages_helper,
}


# --- expectations ----------------------------------------------------------------------------------------------------


def expected_usage(fmt: str, kind: str) -> dict[str, int]:
    """USAGE as the fake reported it, in `fmt`'s usage shape.

    OpenAI's prompt_tokens include cached tokens; Anthropic's input_tokens exclude cache reads. The Responses and
    Chat shapes count every prompt token, Messages counts the cache reads apart.
    """
    reported_in, out, cached = USAGE
    prompt = reported_in if kind == "openai" else reported_in + cached
    if fmt == "messages":
        return {"input": prompt - cached, "output": out, "cached": cached}
    return {"input": prompt, "output": out, "total": prompt + out, "cached": cached}


def check_answer(o: Outcome, fmt: str, kind: str, text: str = TEXT) -> None:
    decision = o.headers["x-specway-decision-id"]
    assert o.id == PREFIX[fmt] + decision, (o.id, decision)
    assert o.ids <= {o.id}, f"every chunk or event carries the one id: {o.ids}"
    assert o.model == MODEL[kind] and o.models <= {MODEL[kind]}, (o.model, o.models)
    assert o.text == text
    if o.deltas is not None:
        assert o.deltas == text, "the deltas add up to the whole text"
    assert o.headers["x-specway-model"] == MODEL[kind]


def check_received(fake: FakeUpstream, live: Live, kind: str, *, stream: bool) -> dict[str, Any]:
    """The one request the fake received: the upstream's model name, system, max tokens, temperature, its key."""
    assert len(fake.requests) == 1, [r.path for r in fake.requests]
    got = fake.requests[0]
    body = got.body
    assert got.path == UPSTREAM_PATH[kind]
    assert body["model"] == UPSTREAM_MODEL[kind]
    assert body["max_tokens"] == MAX_TOKENS
    assert body["temperature"] == TEMPERATURE
    assert bool(body.get("stream")) is stream
    assert live.key not in json.dumps(got.headers), "the caller's relay key never reaches an upstream"
    if kind == "openai":
        assert body["messages"][0] == {"role": "system", "content": SYSTEM}
        assert body["messages"][1] == {"role": "user", "content": PROMPT}
        assert got.headers["authorization"] == f"Bearer {OA_SECRET}"
        if stream:
            assert body["stream_options"] == {"include_usage": True}
    else:
        assert body["system"] == SYSTEM
        assert body["messages"][0] == {"role": "user", "content": [{"type": "text", "text": PROMPT}]}
        assert got.headers["x-api-key"] == AN_SECRET
        assert "authorization" not in got.headers
        assert got.headers.get("anthropic-version")
    return body


def error_of(exc: Exception) -> dict[str, Any]:
    """The error object of an SDK exception: {"type", "code", "message", "param"}."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    assert isinstance(body, dict), f"no error body on {exc!r}"
    return body


def matrix(with_modes: bool = False) -> list[Any]:
    """pytest params over formats x kinds (x modes), with readable ids."""
    rows = [(f, k, m) for f in FORMATS for k in KINDS for m in MODES] if with_modes else \
        [(f, k) for f in FORMATS for k in KINDS]
    return [pytest.param(*row, id="-".join(row)) for row in rows]


# --- the answer: text, usage, ids, model, what the upstream received ---------------------------------------------


@pytest.mark.parametrize(("fmt", "kind", "mode"), matrix(with_modes=True))
def test_answer_arrives_complete(clients: Clients, fake: FakeUpstream, live: Live, fmt: str, kind: str,
                                 mode: str) -> None:
    fake.script(text=TEXT, usage=USAGE)
    o = run(clients, fmt, mode, request_args(fmt, MODEL[kind]))
    check_answer(o, fmt, kind)
    assert o.usage == expected_usage(fmt, kind)
    assert o.stop == {"chat": "stop", "responses": "completed", "messages": "end_turn"}[fmt]
    assert o.calls == []
    body = check_received(fake, live, kind, stream=mode != "create")
    assert "tools" not in body
    sent = clients.seen.last.request.headers  # both SDKs send the relay key as a Bearer token
    assert sent["authorization"] == f"Bearer {live.key}" and "x-api-key" not in sent


STOPS = {  # canonical name -> (openai word, anthropic word), and how each caller format says it
    "length": (("length", "max_tokens"), {"chat": "length", "messages": "max_tokens",
                                          "responses": "incomplete:max_output_tokens"}),
    "content_filter": (("content_filter", "refusal"), {"chat": "content_filter", "messages": "refusal",
                                                       "responses": "incomplete:content_filter"}),
    "stop": (("stop", "end_turn"), {"chat": "stop", "messages": "end_turn", "responses": "completed"}),
}


@pytest.mark.parametrize("reason", list(STOPS))
@pytest.mark.parametrize("mode", ["create", "stream"])
@pytest.mark.parametrize(("fmt", "kind"), matrix())
def test_stop_reasons_are_mapped(clients: Clients, fake: FakeUpstream, fmt: str, kind: str, mode: str,
                                 reason: str) -> None:
    (oa_word, an_word), expected = STOPS[reason]
    fake.script(text=TEXT, usage=USAGE, finish=oa_word if kind == "openai" else an_word)
    o = run(clients, fmt, mode, request_args(fmt, MODEL[kind]))
    assert o.stop == expected[fmt]
    assert o.text == TEXT and o.usage == expected_usage(fmt, kind)


@pytest.mark.parametrize("mode", ["create", "stream"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_stop_sequence_survives_messages_to_anthropic(clients: Clients, fake: FakeUpstream, fmt: str,
                                                      mode: str) -> None:
    """Only Messages has a word for it; the other formats call it a plain stop."""
    fake.script(text=TEXT, finish="stop_sequence")
    o = run(clients, fmt, mode, request_args(fmt, "acme/an", **SAMPLING[fmt]))
    assert o.stop == {"chat": "stop", "responses": "completed", "messages": "stop_sequence"}[fmt]


@pytest.mark.parametrize("kind", KINDS)
def test_messages_stream_starts_with_the_input_tokens_when_the_upstream_does(clients: Clients, fake: FakeUpstream,
                                                                             kind: str) -> None:
    fake.script(text=TEXT, usage=USAGE)
    events = list(clients.anthropic.messages.create(**request_args("messages", MODEL[kind]), stream=True))
    start = events[0].message.usage  # type: ignore[union-attr]
    expected = expected_usage("messages", kind)
    # An Anthropic upstream reports them in its own message_start; an OpenAI one only at the end.
    assert (start.input_tokens, start.cache_read_input_tokens) == (
        (expected["input"], expected["cached"]) if kind == "anthropic" else (0, None))


SAMPLING = {  # the caller's top_p and stop words, per format (anthropic 2.x sends top_p as an extra body field)
    "chat": {"top_p": 0.9, "stop": ["END"]},
    "responses": {"top_p": 0.9},
    "messages": {"extra_body": {"temperature": TEMPERATURE, "top_p": 0.9}, "stop_sequences": ["END"]},
}


@pytest.mark.parametrize(("fmt", "kind"), matrix())
def test_sampling_fields_reach_the_upstream(clients: Clients, fake: FakeUpstream, live: Live, fmt: str,
                                           kind: str) -> None:
    run(clients, fmt, "create", request_args(fmt, MODEL[kind], **SAMPLING[fmt]))
    body = check_received(fake, live, kind, stream=False)
    assert body["top_p"] == 0.9
    if fmt != "responses":
        assert body["stop" if kind == "openai" else "stop_sequences"] == ["END"]


@pytest.mark.parametrize("kind", KINDS)
def test_chat_max_tokens_spellings(clients: Clients, fake: FakeUpstream, kind: str) -> None:
    messages = [{"role": "user", "content": PROMPT}]
    clients.openai.chat.completions.create(model=MODEL[kind], messages=messages, max_completion_tokens=77)
    clients.openai.chat.completions.create(model=MODEL[kind], messages=messages)
    sent, unbounded = (r.body for r in fake.requests)
    assert sent["max_tokens"] == 77
    # Anthropic requires max_tokens: the upstream's default_max_tokens (4096) fills in; OpenAI gets none.
    assert unbounded.get("max_tokens") == (None if kind == "openai" else 4096)


@pytest.mark.parametrize("kind", KINDS)
def test_chat_stream_without_include_usage_has_no_usage_chunk(clients: Clients, fake: FakeUpstream,
                                                              kind: str) -> None:
    fake.script(text=TEXT, usage=USAGE)
    chunks = list(clients.openai.chat.completions.create(**request_args("chat", MODEL[kind]), stream=True))
    assert all(len(ch.choices) == 1 and ch.usage is None for ch in chunks)
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == TEXT
    assert chunks[-1].choices[0].finish_reason == "stop"


def responses_object(c: Clients, mode: str, args: dict[str, Any]) -> Any:
    """The final Response object, as the SDK returns it whole, in response.completed, or from the helper."""
    if mode == "create":
        return c.openai.responses.create(**args)
    if mode == "stream":
        return list(c.openai.responses.create(**args, stream=True))[-1].response
    with c.openai.responses.stream(**args) as s:
        return s.get_final_response()


@pytest.mark.parametrize("mode", MODES)
def test_responses_echo_the_request_settings(clients: Clients, fake: FakeUpstream, mode: str) -> None:
    r = responses_object(clients, mode, request_args("responses", "acme/an", tools=TOOLS["responses"]))
    assert (r.temperature, r.max_output_tokens) == (TEMPERATURE, MAX_TOKENS)
    assert [t.name for t in r.tools] == ["get_weather"]


@pytest.mark.parametrize("mode", MODES)
def test_responses_echo_the_instructions(clients: Clients, fake: FakeUpstream, mode: str) -> None:
    assert responses_object(clients, mode, request_args("responses", "acme/oa")).instructions == SYSTEM


# --- tool calls -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fmt", "kind", "mode"), matrix(with_modes=True))
def test_upstream_tool_call_arrives_as_the_callers_tool_call(clients: Clients, fake: FakeUpstream, live: Live,
                                                              fmt: str, kind: str, mode: str) -> None:
    paris, tokyo = {"city": "Paris", "unit": "celsius"}, {"city": "Tokyo"}
    fake.script(text="Let me check.", usage=USAGE, tool_calls=[
        {"id": "call_w1", "name": "get_weather", "arguments": json.dumps(paris)},
        {"id": "call_w2", "name": "get_weather", "arguments": json.dumps(tokyo)},
    ])
    o = run(clients, fmt, mode, request_args(fmt, MODEL[kind], tools=TOOLS[fmt]))
    check_answer(o, fmt, kind, text="Let me check.")
    assert o.calls == [("call_w1", "get_weather", paris), ("call_w2", "get_weather", tokyo)]
    assert o.stop == {"chat": "tool_calls", "messages": "tool_use", "responses": "completed"}[fmt]
    assert o.usage == expected_usage(fmt, kind)
    body = check_received(fake, live, kind, stream=mode != "create")
    if kind == "openai":
        assert body["tools"] == [{"type": "function", "function": {"name": "get_weather", "description": WEATHER_DESC,
                                                                   "parameters": WEATHER_SCHEMA}}]
    else:
        assert body["tools"] == [{"name": "get_weather", "description": WEATHER_DESC, "input_schema": WEATHER_SCHEMA}]


@pytest.mark.parametrize("mode", ["create", "stream"])
@pytest.mark.parametrize(("fmt", "kind"), matrix())
def test_a_tool_call_without_text(clients: Clients, fake: FakeUpstream, fmt: str, kind: str, mode: str) -> None:
    fake.script(text="", usage=USAGE, tool_calls=[{"id": "call_x", "name": "get_weather", "arguments": "{}"}])
    o = run(clients, fmt, mode, request_args(fmt, MODEL[kind], tools=TOOLS[fmt]))
    check_answer(o, fmt, kind, text="")
    assert o.calls == [("call_x", "get_weather", {})]
    assert o.stop == {"chat": "tool_calls", "messages": "tool_use", "responses": "completed"}[fmt]


TOOL_CHOICES = [  # caller format, upstream kind, what the caller sends, what the upstream must receive
    pytest.param("chat", "openai", "required", "required", id="chat-openai-required"),
    pytest.param("messages", "anthropic", {"type": "tool", "name": "get_weather"},
                 {"type": "tool", "name": "get_weather"}, id="messages-anthropic-named"),
    pytest.param("chat", "anthropic", {"type": "function", "function": {"name": "get_weather"}},
                 {"type": "tool", "name": "get_weather"}, id="chat-anthropic-named"),
    pytest.param("chat", "anthropic", "required", {"type": "any"}, id="chat-anthropic-required"),
    pytest.param("messages", "openai", {"type": "tool", "name": "get_weather"},
                 {"type": "function", "function": {"name": "get_weather"}}, id="messages-openai-named"),
    pytest.param("messages", "openai", {"type": "any"}, "required", id="messages-openai-any"),
    pytest.param("responses", "openai", {"type": "function", "name": "get_weather"},
                 {"type": "function", "function": {"name": "get_weather"}}, id="responses-openai-named"),
    pytest.param("responses", "openai", "required", "required", id="responses-openai-required"),
    pytest.param("responses", "anthropic", "required", {"type": "any"}, id="responses-anthropic-required"),
    pytest.param("responses", "anthropic", {"type": "function", "name": "get_weather"},
                 {"type": "tool", "name": "get_weather"}, id="responses-anthropic-named"),
    pytest.param("chat", "anthropic", "none", {"type": "none"}, id="chat-anthropic-none"),
    pytest.param("messages", "openai", {"type": "auto"}, "auto", id="messages-openai-auto"),
]


@pytest.mark.parametrize(("fmt", "kind", "choice", "upstream_choice"), TOOL_CHOICES)
def test_tool_choice_reaches_the_upstream_in_its_format(clients: Clients, fake: FakeUpstream, fmt: str, kind: str,
                                                        choice: Any, upstream_choice: Any) -> None:
    fake.script(text="", tool_calls=[{"id": "call_x", "name": "get_weather", "arguments": '{"city": "Paris"}'}])
    run(clients, fmt, "create", request_args(fmt, MODEL[kind], tools=TOOLS[fmt], tool_choice=choice))
    assert fake.requests[0].body.get("tool_choice") == upstream_choice


PARALLEL = [  # caller format, upstream kind, what the caller sends, what the upstream must receive
    pytest.param("messages", "openai", {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
                 {"tool_choice": "auto", "parallel_tool_calls": False}, id="messages-openai"),
    pytest.param("chat", "anthropic", {"parallel_tool_calls": False},
                 {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}, id="chat-anthropic"),
    pytest.param("responses", "anthropic", {"tool_choice": "required", "parallel_tool_calls": False},
                 {"tool_choice": {"type": "any", "disable_parallel_tool_use": True}}, id="responses-anthropic"),
]


@pytest.mark.parametrize(("fmt", "kind", "sent", "received"), PARALLEL)
def test_one_call_at_most_reaches_the_upstream_in_its_format(clients: Clients, fake: FakeUpstream, fmt: str,
                                                             kind: str, sent: Any, received: Any) -> None:
    run(clients, fmt, "create", request_args(fmt, MODEL[kind], tools=TOOLS[fmt], **sent))
    body = fake.requests[0].body
    assert {key: body.get(key) for key in received} == received
    assert "parallel_tool_calls" not in body or kind == "openai"


def tool_round_trip(fmt: str, model: str) -> dict[str, Any]:
    """A second turn: the assistant called get_weather(city=Paris) as call_7 and the caller sends its result."""
    call = {"city": "Paris"}
    if fmt == "chat":
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": PROMPT},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_7", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(call)}}
            ]},
            {"role": "tool", "tool_call_id": "call_7", "content": "18C and sunny"},
        ]
        return {"model": model, "messages": messages, "tools": TOOLS[fmt], "max_tokens": MAX_TOKENS}
    if fmt == "responses":
        items = [
            {"role": "user", "content": PROMPT},
            {"type": "function_call", "call_id": "call_7", "name": "get_weather", "arguments": json.dumps(call)},
            {"type": "function_call_output", "call_id": "call_7", "output": "18C and sunny"},
        ]
        return {"model": model, "instructions": SYSTEM, "input": items, "tools": TOOLS[fmt],
                "max_output_tokens": MAX_TOKENS}
    messages = [
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call_7", "name": "get_weather", "input": call}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_7", "content": "18C and sunny"}]},
    ]
    return {"model": model, "system": SYSTEM, "messages": messages, "tools": TOOLS[fmt], "max_tokens": MAX_TOKENS}


@pytest.mark.parametrize(("fmt", "kind"), matrix())
def test_tool_results_reach_the_upstream_in_its_format(clients: Clients, fake: FakeUpstream, fmt: str,
                                                       kind: str) -> None:
    fake.script(text="It is 18C and sunny in Paris.")
    o = run(clients, fmt, "create", tool_round_trip(fmt, MODEL[kind]))
    assert o.text == "It is 18C and sunny in Paris."
    body = fake.requests[0].body
    if kind == "openai":
        assert body["messages"][0] == {"role": "system", "content": SYSTEM}
        call, result = body["messages"][-2:]
        assert call["role"] == "assistant" and not call.get("content")
        assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in call["tool_calls"]] \
            == [("call_7", "get_weather", {"city": "Paris"})]
        assert result == {"role": "tool", "tool_call_id": "call_7", "content": "18C and sunny"}
    else:
        assert body["system"] == SYSTEM
        assert body["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": PROMPT}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "call_7", "name": "get_weather",
                                               "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_7", "content": "18C and sunny"}]},
        ]


# --- models -----------------------------------------------------------------------------------------------------------


CATALOG = ["acme/oa", "acme/an", "acme/dead"]


def test_openai_models_list_and_retrieve(clients: Clients) -> None:
    models = list(clients.openai.models.list())  # iterates every page to the end
    assert [m.id for m in models] == CATALOG
    assert all(m.object == "model" and m.owned_by and m.created > 0 for m in models)
    one = clients.openai.models.retrieve("acme/oa")
    assert (one.id, one.object) == ("acme/oa", "model")


@pytest.mark.parametrize("x_api_key", [False, True], ids=["bearer", "x-api-key"])
def test_anthropic_models_list_and_retrieve(live: Live, x_api_key: bool) -> None:
    c = make_clients(live, live.key, x_api_key=x_api_key)
    page = c.anthropic.models.list()
    assert page.has_more is False
    models = []
    for m in page:  # auto-pagination: must stop, has_more is false
        models.append(m)
        assert len(models) <= len(CATALOG), "the SDK kept paging"
    assert [m.id for m in models] == CATALOG
    paged = [m.id for m in itertools.islice(c.anthropic.models.list(limit=1), 10)]
    assert paged == CATALOG, "paging by after_id reaches every model, then stops"
    assert all(m.type == "model" and m.display_name and m.created_at for m in models)
    assert models[1].display_name == "Acme Claude"
    assert c.anthropic.models.retrieve("acme/an").display_name == "Acme Claude"


def test_anthropic_x_api_key_style(live: Live, fake: FakeUpstream) -> None:
    c = make_clients(live, live.key, x_api_key=True)
    for mode in ("create", "stream", "helper"):
        fake.script(text=TEXT, usage=USAGE)
        o = run(c, "messages", mode, request_args("messages", "acme/an"))
        check_answer(o, "messages", "anthropic")
        sent = c.seen.last.request.headers
        assert sent["x-api-key"] == live.key and "authorization" not in sent


# --- errors through the SDK ---------------------------------------------------------------------------------------


def call(c: Clients, fmt: str, model: str, *, stream: bool = False, **extra: Any) -> Outcome:
    return run(c, fmt, "stream" if stream else "create", request_args(fmt, model, **extra))


@pytest.mark.parametrize("fmt", FORMATS)
def test_missing_key_is_authentication_error(live: Live, fake: FakeUpstream, fmt: str) -> None:
    c = make_clients(live, live.key)
    omit = {"Authorization": SDK[fmt].omit}
    with pytest.raises(SDK[fmt].AuthenticationError) as e:
        call(c, fmt, "acme/oa", extra_headers=omit)
    assert e.value.status_code == 401
    assert error_of(e.value)["code"] == "invalid_api_key"
    assert "No relay key" in error_of(e.value)["message"]
    assert "authorization" not in c.seen.last.request.headers
    assert fake.requests == []


@pytest.mark.parametrize(("fmt", "x_api_key"), [
    ("chat", False), ("responses", False), ("messages", False), pytest.param("messages", True, id="messages-x-api-key"),
])
def test_invalid_key_is_authentication_error(live: Live, fake: FakeUpstream, fmt: str, x_api_key: bool) -> None:
    bad = "sk-sw-not-a-real-key-0000"
    c = make_clients(live, bad, x_api_key=x_api_key)
    with pytest.raises(SDK[fmt].AuthenticationError) as e:
        call(c, fmt, "acme/oa")
    assert error_of(e.value)["code"] == "invalid_api_key"
    assert "not valid" in error_of(e.value)["message"]
    assert bad not in e.value.response.text
    assert fake.requests == []


EMPTY = {"chat": ("messages", []), "responses": ("input", []), "messages": ("messages", [])}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_bad_body_is_bad_request(clients: Clients, fake: FakeUpstream, fmt: str, stream: bool) -> None:
    param, empty = EMPTY[fmt]
    with pytest.raises(SDK[fmt].BadRequestError) as e:
        call(clients, fmt, "acme/oa", stream=stream, **{param: empty})
    assert error_of(e.value)["param"] == param
    assert fake.requests == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_unknown_model_is_not_found(clients: Clients, fake: FakeUpstream, fmt: str) -> None:
    with pytest.raises(SDK[fmt].NotFoundError) as e:
        call(clients, fmt, "acme/no-such-model")
    assert error_of(e.value)["code"] == "model_not_found"
    assert fake.requests == []


def stream_matrix() -> list[Any]:
    return [pytest.param(f, k, s, id=f"{f}-{k}-{'stream' if s else 'whole'}") for f in FORMATS for k in KINDS
            for s in (False, True)]


@pytest.mark.parametrize(("fmt", "kind", "stream"), stream_matrix())
def test_upstream_400_is_bad_request_with_the_upstreams_message(clients: Clients, fake: FakeUpstream, fmt: str,
                                                                kind: str, stream: bool) -> None:
    fake.script(status=400, error="max_tokens: 999999 is greater than the model's maximum of 8192")
    with pytest.raises(SDK[fmt].BadRequestError) as e:
        call(clients, fmt, MODEL[kind], stream=stream)
    err = error_of(e.value)
    assert err["code"] == "upstream_rejected_request"
    assert "max_tokens: 999999 is greater than the model's maximum of 8192" in err["message"]
    assert len(fake.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_upstream_400_never_echoes_the_upstream_key(clients: Clients, fake: FakeUpstream, kind: str) -> None:
    secret = OA_SECRET if kind == "openai" else AN_SECRET
    fake.script(status=400, error=f"bad request for key {secret}: messages too long")
    with pytest.raises(openai.BadRequestError) as e:
        call(clients, "chat", MODEL[kind])
    assert secret not in e.value.response.text
    assert "messages too long" in error_of(e.value)["message"]


@pytest.mark.parametrize(("fmt", "kind", "stream"), stream_matrix())
def test_upstream_401_is_502_without_the_upstream_key(clients: Clients, fake: FakeUpstream, fmt: str, kind: str,
                                                     stream: bool) -> None:
    secret = OA_SECRET if kind == "openai" else AN_SECRET
    fake.script(status=401, error=f"Incorrect API key provided: {secret}")
    with pytest.raises(SDK[fmt].InternalServerError) as e:
        call(clients, fmt, MODEL[kind], stream=stream)
    assert e.value.status_code == 502
    assert error_of(e.value)["code"] == "upstream_auth_failed"
    assert secret in json.dumps(fake.requests[0].headers), "the gateway did send its key upstream"
    seen = e.value.response.text + str(e.value) + json.dumps(dict(e.value.response.headers))
    assert secret not in seen and secret[-8:] not in seen


@pytest.mark.parametrize(("fmt", "kind", "stream"), [
    ("chat", "openai", False), ("messages", "anthropic", True), ("responses", "anthropic", False),
    ("messages", "openai", True),
])
def test_upstream_slower_than_read_timeout_is_504(clients: Clients, fake: FakeUpstream, fmt: str, kind: str,
                                                  stream: bool) -> None:
    fake.script(delay=1.6)  # the upstreams' read timeout is 1 s; waiting it out would be a 200
    with pytest.raises(SDK[fmt].InternalServerError) as e:
        call(clients, fmt, MODEL[kind], stream=stream)
    assert e.value.status_code == 504
    assert error_of(e.value)["code"] == "upstream_timeout"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_closed_port_upstream_is_503(clients: Clients, fmt: str, stream: bool) -> None:
    with pytest.raises(SDK[fmt].InternalServerError) as e:
        call(clients, fmt, "acme/dead", stream=stream)
    assert e.value.status_code == 503
    assert error_of(e.value)["code"] == "upstream_unavailable"


@pytest.mark.parametrize(("fmt", "kind", "stream"), stream_matrix())
def test_upstream_500_is_502(clients: Clients, fake: FakeUpstream, fmt: str, kind: str, stream: bool) -> None:
    fake.script(status=500, error="the model crashed")
    with pytest.raises(SDK[fmt].InternalServerError) as e:
        call(clients, fmt, MODEL[kind], stream=stream)
    assert e.value.status_code == 502
    err = error_of(e.value)
    assert err["code"] == "upstream_error" and "the model crashed" in err["message"]


@pytest.mark.parametrize(("fmt", "kind"), [("chat", "anthropic"), ("messages", "openai"), ("responses", "openai")])
def test_upstream_429_is_503_with_a_bounded_retry_after(clients: Clients, fake: FakeUpstream, fmt: str,
                                                        kind: str) -> None:
    fake.script(status=429, error="slow down", headers={"retry-after": "120"})
    with pytest.raises(SDK[fmt].APIStatusError) as e:
        call(clients, fmt, MODEL[kind])
    assert e.value.status_code == 503
    assert error_of(e.value)["code"] == "upstream_overloaded"
    assert 1 <= int(e.value.response.headers["retry-after"]) <= 60


@pytest.mark.parametrize("fmt", ["chat", "messages"])
def test_the_sdk_retries_a_gateway_5xx(live: Live, fake: FakeUpstream, fmt: str) -> None:
    c = make_clients(live, live.key, retries=1)
    fake.script(status=500, error="transient")
    fake.script(text=TEXT, usage=USAGE)
    o = call(c, fmt, "acme/oa")
    assert o.text == TEXT
    assert [r.status_code for r in c.seen.responses] == [502, 200]
    assert len(fake.requests) == 2


# --- streams that break -------------------------------------------------------------------------------------------


def fault_matrix() -> list[Any]:
    return [pytest.param(f, k, m, fault, id=f"{f}-{k}-{m}-{fault}") for f in FORMATS for k in KINDS
            for m in ("stream", "helper") for fault in ("cut", "error-event")]


@pytest.mark.parametrize(("fmt", "kind", "mode", "fault"), fault_matrix())
def test_a_stream_broken_midway_raises_in_the_sdk(clients: Clients, fake: FakeUpstream, fmt: str, kind: str,
                                                  mode: str, fault: str) -> None:
    """Never a short answer that looks complete: the SDK raises from the format's error event."""
    words = " ".join(f"w{i}" for i in range(12))
    if fault == "cut":
        fake.script(text=words, usage=USAGE, cut_after=4)  # connection closed after 4 chunks, no terminator
    else:
        fake.script(text=words, usage=USAGE, fail_after=4, error="upstream overloaded mid-answer")
    with pytest.raises(SDK[fmt].APIError) as e:
        run(clients, fmt, mode, request_args(fmt, MODEL[kind]))
    assert clients.seen.last.status_code == 200, "the failure came after the first byte"
    err = error_of(e.value)
    assert err["code"] == "upstream_error", err
    if fault == "error-event":
        assert "upstream overloaded mid-answer" in err["message"]


def open_stream(c: Clients, fmt: str, model: str) -> tuple[Iterator[Any], Callable[[], None]]:
    args = request_args(fmt, model)
    if fmt == "chat":
        s = c.openai.chat.completions.create(**args, stream=True)
    elif fmt == "responses":
        s = c.openai.responses.create(**args, stream=True)
    else:
        s = c.anthropic.messages.create(**args, stream=True)
    return iter(s), s.close


@pytest.mark.parametrize(("fmt", "kind"), matrix())
def test_client_disconnect_cancels_the_upstream_request(clients: Clients, fake: FakeUpstream, live: Live, fmt: str,
                                                        kind: str) -> None:
    fake.script(text=" ".join(f"w{i}" for i in range(60)), chunk_delay=0.05)  # about 3 s of stream
    events, close = open_stream(clients, fmt, MODEL[kind])
    for _ in range(4):
        next(events)
    decision = clients.seen.last.headers["x-specway-decision-id"]
    close()
    deadline = time.monotonic() + 2.5
    while fake.disconnects == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fake.disconnects == 1, "the gateway kept reading an upstream stream nobody listens to"
    record = explain(live, live.key, decision)
    assert record["outcome"] == "cancelled"


# --- fallback ---------------------------------------------------------------------------------------------------------


def explain(live: Live, key: str, decision: str) -> dict[str, Any]:
    """GET /v1/route/explain/{id}; a streamed answer's record is written just after its last byte."""
    deadline = time.monotonic() + 2
    with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {key}"}, timeout=5) as h:
        while True:
            r = h.get(f"/v1/route/explain/{decision}")
            if r.status_code == 200 or time.monotonic() > deadline:
                assert r.status_code == 200, r.text
                return r.json()
            time.sleep(0.05)


@pytest.mark.parametrize("mode", ["create", "stream", "helper"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_fallback_answers_from_the_next_model(live: Live, fake: FakeUpstream, fmt: str, mode: str) -> None:
    key = live.create_key(policy="with-fallback")
    c = make_clients(live, key)
    fake.script(status=500, error="primary down")
    fake.script(text=TEXT, usage=USAGE)
    o = run(c, fmt, mode, request_args(fmt, "acme/oa"))
    check_answer(o, fmt, "anthropic")
    assert o.usage == expected_usage(fmt, "anthropic")
    assert [r.path for r in fake.requests] == ["/v1/chat/completions", "/v1/messages"]
    assert [r.body["model"] for r in fake.requests] == ["gpt-up", "claude-up"]
    record = explain(live, key, o.headers["x-specway-decision-id"])
    assert [(a["model"], a["status"]) for a in record["attempts"]] == [("acme/oa", 500), ("acme/an", 200)]
    assert record["model"] == "acme/an" and record["outcome"] == "ok"
    assert "fallback" in record["explanation"]


# --- the TypeScript SDKs ----------------------------------------------------------------------------------------------


TS_DIR = Path(__file__).parent / "sdk_ts"


@pytest.fixture(scope="module")
def ts_sdks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/sdk_ts installed with `npm ci` (from its lockfile) in a temporary copy."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are not installed: the TypeScript SDK check needs Node >= 20")
    work = tmp_path_factory.mktemp("sdk_ts")
    for name in ("package.json", "package-lock.json", "check.mjs"):
        shutil.copy(TS_DIR / name, work / name)
    command = [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--prefer-offline"]
    proc = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        message = f"npm ci failed in {work}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return work


TS_STEPS = [  # (name in check.mjs's output, format, upstream kind, streamed)
    ("chat", "chat", "openai", False),
    ("chatStream", "chat", "anthropic", True),
    ("responses", "responses", "anthropic", False),
    ("responsesStream", "responses", "openai", True),
    ("messages", "messages", "openai", False),
    ("messagesStream", "messages", "anthropic", True),
]


def test_typescript_sdks(ts_sdks: Path, live: Live, fake: FakeUpstream) -> None:
    for n, _ in enumerate(TS_STEPS):
        fake.script(text=f"TypeScript reply number {n}.", usage=USAGE)
    fake.script(text=" ".join(f"w{i}" for i in range(12)), fail_after=4, error="ts chat broke")
    fake.script(text=" ".join(f"w{i}" for i in range(12)), fail_after=4, error="ts messages broke")
    env = {**os.environ, "SPECWAY_URL": live.url, "SPECWAY_KEY": live.key}
    proc = subprocess.run([shutil.which("node") or "node", "check.mjs"], cwd=ts_sdks, env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    for n, (name, fmt, kind, _) in enumerate(TS_STEPS):
        got = out[name]
        assert got["text"] == f"TypeScript reply number {n}.", (name, got)
        assert got["model"] == MODEL[kind] and got["id"].startswith(PREFIX[fmt]), (name, got)
        assert got["usage"] == expected_usage(fmt, kind), (name, got)
        if "deltas" in got:
            assert got["deltas"] == got["text"], (name, got)
    assert [(r.path, r.body["model"], bool(r.body.get("stream"))) for r in fake.requests[: len(TS_STEPS)]] == [
        (UPSTREAM_PATH[kind], UPSTREAM_MODEL[kind], stream) for _, _, kind, stream in TS_STEPS
    ]
    assert "ts chat broke" in out["chatBroken"], out["chatBroken"]
    assert "ts messages broke" in out["messagesBroken"], out["messagesBroken"]
    assert out["badKey"] == 401
    assert out["xKeySent"] and all(h == {"authorization": False, "xApiKey": True} for h in out["xKeySent"])
    assert out["openaiModels"] == CATALOG and out["anthropicModels"] == CATALOG
