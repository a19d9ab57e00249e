"""Shared by the SDK conformance tests (tests/test_sdk_*.py): the official openai and anthropic SDKs, pointed at
Specway by base URL and key only.

Every inbound format (chat, responses, messages) x every upstream kind (openai, anthropic), whole, streamed and
through the SDKs' stream helpers. One fake upstream and one gateway serve each test module (the fixtures below,
imported by each); each test scripts the fake, talks through an SDK, and checks both what the SDK saw and what the
fake received.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import anthropic
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
CATALOG = ["acme/oa", "acme/an", "acme/dead"]


# --- the gateway, the fake and the clients, once per module --------------------------------------------------------
# Each fixture is fixture_<name>, registered as <name>: a test module imports it, and its tests ask for <name>.


@pytest.fixture(scope="module", name="fake")
def fixture_fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture(scope="module", name="live")
def fixture_live(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
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


@pytest.fixture(scope="module", name="clients")
def fixture_clients(live: Live) -> Clients:
    return make_clients(live, live.key)


@pytest.fixture(autouse=True, name="_fresh")
def fixture_fresh(fake: FakeUpstream, clients: Clients) -> None:
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


def call(c: Clients, fmt: str, model: str, *, stream: bool = False, **extra: Any) -> Outcome:
    return run(c, fmt, "stream" if stream else "create", request_args(fmt, model, **extra))


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
        # A Messages caller's own content shape passes through (a string stays a string); translated, it is blocks.
        assert body["messages"][0] in ({"role": "user", "content": [{"type": "text", "text": PROMPT}]},
                                       {"role": "user", "content": PROMPT})
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
