"""Support for tests/test_conformance.py: the gateway and fake upstream it drives, the official SDKs as callers,
what a caller got (read through the SDK's own types), and what an upstream received (read in its own words).

One gateway and one fake upstream per module. Every upstream kind has one reasoning model (effort is forwarded to
it); acme/oa-plain is an ordinary model on the openai upstream (effort only routes). The policy's thinking budgets
are not the defaults, so a budget that reaches Anthropic is visibly the policy's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests import fake_gemini
from tests.conftest import Live, serve
from tests.fake_upstream import AWS_KEY, GEMINI_KEY, FakeUpstream, aws_environment

FORMATS = ("chat", "responses", "messages")
# azure-chat and azure-responses are the azure kind through each of its surfaces: Chat Completions on the dated
# deployment path, Responses on the v1 API (tests/fake_azure.py); each reads as the openai or responses kind whose wire
# shapes it speaks (wire()), apart from its path, its query and its api-key. bedrock speaks Converse, its own; gemini
# Gemini's generateContent. vertex and vertex-claude are one vertex upstream (signed in with a service account for
# real, tests/fake_gemini.py): a Gemini model, read as the gemini kind, and a Claude model, read as the anthropic kind,
# apart from their paths and token.
KINDS = ("openai", "anthropic", "responses", "azure-chat", "azure-responses", "echo", "bedrock", "gemini", "vertex",
         "vertex-claude")
NATIVE = {"chat": "openai", "responses": "responses", "messages": "anthropic"}  # the kind that speaks each format
MODEL = {"openai": "acme/oa", "anthropic": "acme/an", "responses": "acme/rs", "azure-chat": "acme/az",
         "azure-responses": "acme/azr", "echo": "acme/echo", "bedrock": "acme/bd", "gemini": "acme/gm",
         "vertex": "acme/vx", "vertex-claude": "acme/vc"}
PLAIN = "acme/oa-plain"  # not a reasoning model: effort routes, and is never forwarded
BEDROCK_MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"  # an inference profile id: Claude, with a colon
UPSTREAM_MODEL = {"openai": "gpt-up", "anthropic": "claude-up", "responses": "resp-up", "azure-chat": "gpt-az-deploy",
                  "azure-responses": "resp-az-deploy", PLAIN: "gpt-plain", "bedrock": BEDROCK_MODEL,
                  "gemini": "gemini-up", "vertex": "gemini-vx", "vertex-claude": "claude-vx@20250929"}
AZURE_VERSION = "2024-10-21"
BEDROCK_REGION = "us-east-1"
VERTEX_PROJECT, VERTEX_LOCATION = "conformance-project", "us-east5"
UPSTREAM_PATH = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages", "responses": "/v1/responses",
                 "azure-chat": "/openai/deployments/gpt-az-deploy/chat/completions",
                 "azure-responses": "/openai/v1/responses"}
UPSTREAM_QUERY = {"azure-chat": {"api-version": AZURE_VERSION}}
# Every price of a model the known-model data prices (the cache's too: a worst case takes the highest input price).
FREE = {"input": 0, "output": 0, "cached_input": 0, "cache_write": 0}
BUDGETS = {"low": 1024, "medium": 3072, "high": 6144}  # the policy's thinking_budget (not the defaults)
SECRETS = {"oa": "sk-conf-oa-51c2", "an": "sk-ant-conf-9e7a", "rs": "sk-conf-rs-3b8d", "az": "az-conf-key-7c1e",
           "azr": "az-conf-key-40d9", "gm": GEMINI_KEY}
UPSTREAM = {"openai": "oa", "anthropic": "an", "responses": "rs", "azure-chat": "az", "azure-responses": "azr"}
KEY_HEADER = {"anthropic": "x-api-key", "azure-chat": "api-key", "azure-responses": "api-key",
              "gemini": "x-goog-api-key"}  # else a bearer
WIRE = {"azure-chat": "openai", "azure-responses": "responses", "vertex": "gemini", "vertex-claude": "anthropic"}


def wire(kind: str) -> str:
    """The kind whose wire shapes `kind` speaks: itself, but for the azure cells."""
    return WIRE.get(kind, kind)


def cell(fmt: str, kind: str, *rest: Any, stream: bool, label: str = "") -> Any:
    """One pytest param, with an id like chat-to-anthropic[-label]-stream."""
    name = "-".join([f"{fmt}-to-{kind}", *([label] if label else []), "stream" if stream else "whole"])
    return pytest.param(fmt, kind, *rest, stream, id=name)


def cells(kinds: tuple[str, ...] = KINDS, formats: tuple[str, ...] = FORMATS) -> list[Any]:
    """(fmt, kind, stream) for every format x kind x whole or streamed."""
    return [cell(fmt, kind, stream=stream) for fmt in formats for kind in kinds for stream in (False, True)]


# --- fixtures: one fake upstream, one gateway and one pair of SDK clients per module --------------------------------


@pytest.fixture(scope="module", name="fake")
def fixture_fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture(scope="module", name="live")
def fixture_live(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    timeouts = {"connect": 2, "read": 5, "total": 10}
    upstreams: dict[str, Any] = {
        "oa": {"kind": "openai", "base_url": fake.url, "api_key_env": "SPECWAY_CONF_OA", "timeouts": timeouts},
        "an": {"kind": "anthropic", "base_url": fake.anthropic_url, "api_key_env": "SPECWAY_CONF_AN",
               "timeouts": timeouts},
        "rs": {"kind": "responses", "base_url": fake.url, "api_key_env": "SPECWAY_CONF_RS", "timeouts": timeouts},
        "az": {"kind": "azure", "base_url": fake.azure_url, "api_key_env": "SPECWAY_CONF_AZ", "timeouts": timeouts,
               "azure": {"api_version": AZURE_VERSION}},
        "azr": {"kind": "azure", "base_url": fake.azure_url + "/openai/v1", "api_key_env": "SPECWAY_CONF_AZR",
                "timeouts": timeouts, "azure": {"api": "responses"}},
        "echo": {"kind": "echo"},
        "bd": {"kind": "bedrock", "region": BEDROCK_REGION, "base_url": fake.bedrock_url, "timeouts": timeouts},
        "gm": {"kind": "gemini", "base_url": fake.google_url, "api_key_env": "SPECWAY_CONF_GM", "timeouts": timeouts},
        "vx": {"kind": "vertex", "project": VERTEX_PROJECT, "location": VERTEX_LOCATION, "base_url": fake.google_url,
               "credentials_env": "SPECWAY_CONF_VX_ACCOUNT", "timeouts": timeouts},
    }
    models = [
        {"id": "acme/oa", "upstream": "oa", "name": "gpt-up", "reasoning": True},
        {"id": PLAIN, "upstream": "oa", "name": "gpt-plain"},
        {"id": "acme/an", "upstream": "an", "name": "claude-up", "reasoning": True},
        {"id": "acme/rs", "upstream": "rs", "name": "resp-up", "reasoning": True},
        {"id": "acme/az", "upstream": "az", "name": "gpt-az-deploy", "reasoning": True},
        {"id": "acme/azr", "upstream": "azr", "name": "resp-az-deploy", "reasoning": True},
        {"id": "acme/echo", "upstream": "echo", "name": "echo", "reasoning": True},
        # A real id, which the known-model data prices: free here, as the other kinds' made-up names are.
        {"id": "acme/bd", "upstream": "bd", "name": BEDROCK_MODEL, "reasoning": True, "price": FREE},
        {"id": "acme/gm", "upstream": "gm", "name": "gemini-up", "reasoning": True},
        {"id": "acme/vx", "upstream": "vx", "name": "gemini-vx", "reasoning": True},
        {"id": "acme/vc", "upstream": "vx", "name": "claude-vx@20250929", "reasoning": True},
    ]
    config = {
        "upstreams": upstreams,
        "models": models,
        "policies": {"default": {"default_model": "acme/oa", "thinking_budget": BUDGETS}},
        "default_policy": "default",
        "cooldown": {"seconds": 0},  # a refused request must never take its upstream out of the next test
        "retries": {"max_retries": 0},  # each failure reaches the caller as its upstream sent it (test_retries.py)
    }
    fake.azure_keys = {SECRETS["az"], SECRETS["azr"]}
    with pytest.MonkeyPatch.context() as mp:
        for name, secret in SECRETS.items():
            mp.setenv(f"SPECWAY_CONF_{name.upper()}", secret)
        aws_environment(mp, tmp_path_factory.mktemp("aws"))
        account = fake_gemini.ServiceAccount.new()
        fake.issuer = fake_gemini.TokenIssuer(account)
        mp.setenv("SPECWAY_CONF_VX_ACCOUNT", str(account.key_file(tmp_path_factory.mktemp("gcp"), fake.token_uri)))
        with serve(config, tmp_path_factory.mktemp("conformance")) as g:
            yield g


@dataclass
class Clients:
    openai: openai.OpenAI
    anthropic: anthropic.Anthropic
    answers: list[httpx.Response] = field(default_factory=list)  # every answer's response (headers), in order

    @property
    def headers(self) -> httpx.Headers:
        """The headers of the last answer."""
        return self.answers[-1].headers


@pytest.fixture(scope="module", name="clients")
def fixture_clients(live: Live) -> Clients:
    answers: list[httpx.Response] = []
    hooks = {"response": [answers.append]}
    return Clients(
        openai.OpenAI(base_url=live.url + "/v1", api_key=live.key, max_retries=0, timeout=10,
                      http_client=openai.DefaultHttpxClient(trust_env=False, event_hooks=hooks)),
        anthropic.Anthropic(base_url=live.url, api_key=live.key, max_retries=0, timeout=10,
                            http_client=anthropic.DefaultHttpxClient(trust_env=False, event_hooks=hooks)),
        answers,
    )


@pytest.fixture(autouse=True, name="_fresh")
def fixture_fresh(fake: FakeUpstream, clients: Clients) -> None:
    fake.reset()
    clients.answers.clear()


# --- the caller's side: one request through the SDK, read back through its types ------------------------------------


@dataclass
class Got:
    """What the caller got, in one shape for every format."""

    text: str
    calls: list[tuple[str, str, Any]]  # (call id, name, decoded arguments)
    stop: str  # finish_reason, stop_reason, or the response status (":" its incomplete reason)
    usage: dict[str, int | None]  # input (as the format counts it), output, cached (reads), cache_write
    reasoning: list[tuple[str, str | None]]  # (text, signature or encrypted content)
    # (item type, namespace) of each call: a Responses caller's function_call or custom_tool_call (whose arguments
    # in `calls` are its input text), "tool_use" or "function" elsewhere
    shapes: list[tuple[str, str | None]] = field(default_factory=list)


def send(c: Clients, fmt: str, stream: bool, args: dict[str, Any]) -> Got:
    return {"chat": _chat, "responses": _responses, "messages": _messages}[fmt](c, stream, args)


def refusal(c: Clients, fmt: str, stream: bool, args: dict[str, Any]) -> dict[str, Any]:
    """The error object of the 400 the SDK raised: {"type", "code", "message", "param"}."""
    sdk: Any = anthropic if fmt == "messages" else openai
    with pytest.raises(sdk.BadRequestError) as info:
        send(c, fmt, stream, args)
    body = info.value.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    assert isinstance(body, dict), f"no error body on {info.value!r}"
    return body


def _chat_usage(u: Any) -> dict[str, int | None]:
    details = u.prompt_tokens_details
    return {"input": u.prompt_tokens, "output": u.completion_tokens,
            "cached": details.cached_tokens if details else None,
            "cache_write": details.cache_write_tokens if details else None}


def _chat(c: Clients, stream: bool, args: dict[str, Any]) -> Got:
    if stream:
        return _chat_stream(c, args)
    r = c.openai.chat.completions.create(**args)
    choice, m = r.choices[0], r.choices[0].message
    calls = [(t.id, t.custom.name, t.custom.input) if t.type == "custom" else
             (t.id, t.function.name, json.loads(t.function.arguments)) for t in m.tool_calls or []]
    thought = getattr(m, "reasoning_content", None)
    return Got(m.content or "", calls, choice.finish_reason, _chat_usage(r.usage), [(thought, None)] if thought else [],
               [(t.type, None) for t in m.tool_calls or []])


def _chat_stream(c: Clients, args: dict[str, Any]) -> Got:
    chunks = list(c.openai.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}))
    text: list[str] = []
    thought: list[str] = []
    stop = ""
    calls: dict[int, list[Any]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            thought.append(getattr(choice.delta, "reasoning_content", None) or "")
            for tc in choice.delta.tool_calls or []:
                custom = getattr(tc, "custom", None)  # a custom tool's call: the SDK's delta type has no word for it
                named = custom["name"] if custom and "name" in custom else tc.function.name if tc.function else None
                entry = calls.setdefault(tc.index, [tc.id, named, "", "custom" if custom else "function"])
                entry[2] += (custom.get("input") if custom else tc.function.arguments if tc.function else None) or ""
            stop = choice.finish_reason or stop
    assert chunks[-1].choices == [] and chunks[-1].usage is not None, "include_usage: the last chunk is the usage"
    ordered = [entry for _, entry in sorted(calls.items())]
    return Got("".join(text), [(i, n, a if k == "custom" else json.loads(a or "{}")) for i, n, a, k in ordered], stop,
               _chat_usage(chunks[-1].usage), [("".join(thought), None)] if "".join(thought) else [],
               [(k, None) for *_, k in ordered])


def _responses(c: Clients, stream: bool, args: dict[str, Any]) -> Got:
    if stream:
        events = list(c.openai.responses.create(**args, stream=True))
        assert events[-1].type == "response.completed", [e.type for e in events]
        r = events[-1].response
        assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == r.output_text
    else:
        r = c.openai.responses.create(**args)
    stop = r.status if r.incomplete_details is None else f"{r.status}:{r.incomplete_details.reason}"
    u = r.usage
    details = u.input_tokens_details
    usage = {"input": u.input_tokens, "output": u.output_tokens, "cached": details.cached_tokens,
             "cache_write": details.cache_write_tokens}
    called = [i for i in r.output if i.type in ("function_call", "custom_tool_call")]
    calls = [(i.call_id, i.name, i.input if i.type == "custom_tool_call" else json.loads(i.arguments)) for i in called]
    reasoning = [("".join(s.text for s in i.summary), i.encrypted_content) for i in r.output if i.type == "reasoning"]
    shapes = [(i.type, getattr(i, "namespace", None)) for i in called]
    return Got(r.output_text, calls, stop, usage, reasoning, shapes)


def _messages(c: Clients, stream: bool, args: dict[str, Any]) -> Got:
    if stream:  # the SDK's own stream helper checks and accumulates every event
        with c.anthropic.messages.stream(**args) as s:
            m = s.get_final_message()
    else:
        m = c.anthropic.messages.create(**args)
    u = m.usage
    usage = {"input": u.input_tokens, "output": u.output_tokens, "cached": u.cache_read_input_tokens,
             "cache_write": u.cache_creation_input_tokens}
    return Got("".join(b.text for b in m.content if b.type == "text"),
               [(b.id, b.name, b.input) for b in m.content if b.type == "tool_use"], m.stop_reason or "", usage,
               [(b.thinking, b.signature) for b in m.content if b.type == "thinking"])


STOP = {"chat": "stop", "responses": "completed", "messages": "end_turn"}
TOOL_STOP = {"chat": "tool_calls", "responses": "completed", "messages": "tool_use"}


WRITES_REPORTED = ("anthropic", "responses", "bedrock")  # (Gemini writes no cache as it answers)  # the fake's chat dialect never reports cache writes


APART = ("anthropic", "bedrock")  # the kinds whose input count leaves out cache reads and writes


def expected_usage(fmt: str, kind: str, reported: tuple[int, ...]) -> dict[str, int | None]:
    """What the fake reported, as `fmt` says it. OpenAI kinds count cache reads and writes inside their input;
    Anthropic and Bedrock report them apart from their input tokens. Chat and Responses count every prompt token (cache reads in
    cached_tokens, writes in cache_write_tokens); Messages counts reads and writes apart."""
    inp, out, cached, *rest = reported
    kind = wire(kind)
    write = rest[0] if rest and kind in WRITES_REPORTED else 0
    prompt = inp + cached + write if kind in APART else inp
    if fmt == "messages":
        return {"input": prompt - cached - write, "output": out, "cached": cached, "cache_write": write}
    return {"input": prompt, "output": out, "cached": cached, "cache_write": write}


def check_usage(got: Got, fmt: str, kind: str, reported: tuple[int, ...]) -> None:
    want = expected_usage(fmt, kind, reported)
    seen = dict(got.usage)
    if not want["cache_write"] and seen["cache_write"] is None:  # no writes reported: 0 or absent both say so
        seen["cache_write"] = 0
    assert seen == want


# --- the upstream's side: what it received, in its own words --------------------------------------------------------


def received(fake: FakeUpstream, kind: str, stream: bool, model: str | None = None, index: int = -1) -> dict[str, Any]:
    """The body of the request the fake received (the last by default), on the kind's path, for its model."""
    assert fake.requests, "the upstream received nothing"
    got = fake.requests[index]
    if kind == "bedrock":
        return _received_by_bedrock(fake, stream, index)
    if kind in ("gemini", "vertex", "vertex-claude"):
        return _received_by_google(fake, kind, stream, index)
    assert (got.path, got.query) == (UPSTREAM_PATH[kind], UPSTREAM_QUERY.get(kind, {})), (got.path, got.query)
    assert got.body["model"] == UPSTREAM_MODEL[model or kind], got.body.get("model")
    assert bool(got.body.get("stream")) is stream
    secret, header = SECRETS[UPSTREAM[kind]], KEY_HEADER.get(kind, "authorization")
    assert got.headers.get(header) == (secret if kind in KEY_HEADER else f"Bearer {secret}"), \
        "the upstream's own key, never the caller's"
    return dict(got.body)


def _received_by_bedrock(fake: FakeUpstream, stream: bool, index: int) -> dict[str, Any]:
    """A Converse body: the model and the streaming in the path, the request signed with the fake's AWS key (the
    fake refuses any other, so that it answered says the signature was right)."""
    got = fake.requests[index]
    assert got.path == f"/model/{BEDROCK_MODEL}/{'converse-stream' if stream else 'converse'}", got.path
    assert "model" not in got.body and "stream" not in got.body and "modelId" not in got.body
    assert got.headers["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={AWS_KEY.access_key}/")
    assert f"/{BEDROCK_REGION}/bedrock/aws4_request" in got.headers["authorization"]
    assert fake.bad_signatures == []
    return dict(got.body)


def _received_by_google(fake: FakeUpstream, kind: str, stream: bool, index: int) -> dict[str, Any]:
    """A generateContent body (or Claude's Messages body on Vertex AI): the model and the streaming in the path, the
    Gemini API's key, or an access token the fake's token endpoint issued to the service account."""
    got = fake.requests[index]
    model = UPSTREAM_MODEL[kind]
    if kind == "gemini":
        assert got.path == f"/v1beta/models/{model}:{'streamGenerateContent' if stream else 'generateContent'}"
        assert got.headers.get("x-goog-api-key") == GEMINI_KEY and "authorization" not in got.headers
    else:
        publisher = "anthropic" if kind == "vertex-claude" else "google"
        actions = ("streamRawPredict", "rawPredict") if kind == "vertex-claude" else (
            "streamGenerateContent", "generateContent")
        assert got.path == (f"/v1/projects/{VERTEX_PROJECT}/locations/{VERTEX_LOCATION}/publishers/{publisher}/"
                            f"models/{model}:{actions[0] if stream else actions[1]}"), got.path
        assert fake.issuer is not None and fake.issuer.valid(got.headers.get("authorization", ""))
        assert "x-goog-api-key" not in got.headers
    assert (got.query == {"alt": "sse"}) is (stream and kind != "vertex-claude"), got.query
    assert "model" not in got.body
    if kind == "vertex-claude":
        assert got.body["anthropic_version"] == "vertex-2023-10-16"
        assert bool(got.body.get("stream")) is stream
    return dict(got.body)


def text_of(content: Any) -> str:
    """The text of a content string, or of a list of parts or blocks of any format."""
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(p.get("text", "") for p in content if p.get("type") in ("text", "input_text", "output_text")
                   or (set(p) == {"text"}))  # a Converse text block is {"text": ...}


def _items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A Responses body's input as a list of items (a plain string is one user message)."""
    raw = body.get("input")
    return [{"type": "message", "role": "user", "content": raw}] if isinstance(raw, str) else list(raw or [])


def _turns(kind: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages (role + content) the upstream received, system ones included where the kind puts them there."""
    if wire(kind) == "gemini":  # contents of parts; a thought is no text of the conversation
        return [{"role": "assistant" if c["role"] == "model" else c["role"],
                 "content": [p for p in c["parts"] if not p.get("thought")]} for c in body.get("contents") or []]
    if wire(kind) == "responses":
        return [i for i in _items(body) if i.get("type", "message") == "message"]
    return list(body.get("messages") or [])


def _parts(kind: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for m in _turns(kind, body) if isinstance(m.get("content"), list) for p in m["content"]]


def system_of(kind: str, body: dict[str, Any]) -> str:
    if wire(kind) in ("anthropic", "bedrock"):
        return text_of(body.get("system"))
    if wire(kind) == "gemini":
        return text_of((body.get("systemInstruction") or {}).get("parts"))
    said = [text_of(m.get("content")) for m in _turns(kind, body) if m.get("role") in ("system", "developer")]
    return "\n".join(([body["instructions"]] if body.get("instructions") else []) + said)


def turns_of(kind: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of every user and assistant message that has text, in order."""
    return [(m["role"], text) for m in _turns(kind, body)
            if m.get("role") in ("user", "assistant") and (text := text_of(m.get("content")))]


def images_of(kind: str, body: dict[str, Any]) -> list[tuple[str, ...]]:
    """("base64", media type, data) or ("url", url) for every image the upstream received."""
    out: list[tuple[str, ...]] = []
    for p in _parts(kind, body):
        if wire(kind) == "gemini" and ("inlineData" in p or "fileData" in p):
            out.append(("base64", p["inlineData"]["mimeType"], p["inlineData"]["data"]) if "inlineData" in p
                       else ("url", p["fileData"]["fileUri"]))
        elif kind == "bedrock" and "image" in p:
            image = p["image"]
            out.append(("base64", f"image/{image['format']}", image["source"]["bytes"]))
        elif wire(kind) == "anthropic" and p.get("type") == "image":
            src = p["source"]
            out.append(("base64", src["media_type"], src["data"]) if src["type"] == "base64" else ("url", src["url"]))
        elif p.get("type") in ("image_url", "input_image"):
            url = p["image_url"]["url"] if isinstance(p["image_url"], dict) else p["image_url"]
            if url.startswith("data:"):
                head, data = url[5:].split(",", 1)
                out.append(("base64", head.removesuffix(";base64"), data))
            else:
                out.append(("url", url))
    return out


def tools_of(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """Offered function tools: name -> JSON schema of the arguments."""
    if kind == "bedrock":
        tools = (body.get("toolConfig") or {}).get("tools") or []
        return {t["toolSpec"]["name"]: t["toolSpec"]["inputSchema"]["json"] for t in tools if "toolSpec" in t}
    tools = body.get("tools") or []
    if wire(kind) == "gemini":
        return {d["name"]: d.get("parametersJsonSchema") for t in tools for d in t.get("functionDeclarations", [])}
    if wire(kind) == "openai":
        return {t["function"]["name"]: t["function"].get("parameters") for t in tools}
    return {t["name"]: t.get("input_schema" if wire(kind) == "anthropic" else "parameters") for t in tools}


def calls_of(kind: str, body: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(call id, name, decoded arguments) of every tool call in the history the upstream received."""
    if wire(kind) == "openai":
        return [(t["id"], t["function"]["name"], json.loads(t["function"]["arguments"]))
                for m in _turns(kind, body) for t in m.get("tool_calls") or []]
    if wire(kind) == "responses":
        return [(i["call_id"], i["name"], json.loads(i["arguments"])) for i in _items(body)
                if i.get("type") == "function_call"]
    if kind == "bedrock":
        return [(p["toolUse"]["toolUseId"], p["toolUse"]["name"], p["toolUse"]["input"]) for p in _parts(kind, body)
                if "toolUse" in p]
    if wire(kind) == "gemini":
        return [(p["functionCall"]["id"], p["functionCall"]["name"], p["functionCall"]["args"])
                for p in _parts(kind, body) if "functionCall" in p]
    return [(p["id"], p["name"], p["input"]) for p in _parts(kind, body) if p.get("type") == "tool_use"]


def results_of(kind: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """(call id, text) of every tool result the upstream received."""
    if wire(kind) == "openai":
        return [(m["tool_call_id"], text_of(m["content"])) for m in _turns(kind, body) if m["role"] == "tool"]
    if wire(kind) == "responses":
        return [(i["call_id"], text_of(i["output"])) for i in _items(body) if i.get("type") == "function_call_output"]
    if kind == "bedrock":
        return [(p["toolResult"]["toolUseId"], text_of(p["toolResult"]["content"])) for p in _parts(kind, body)
                if "toolResult" in p]
    if wire(kind) == "gemini":  # a result that is no JSON object is the response's output
        return [(p["functionResponse"]["id"], p["functionResponse"]["response"]["output"]) for p in _parts(kind, body)
                if "functionResponse" in p]
    return [(p["tool_use_id"], text_of(p["content"])) for p in _parts(kind, body) if p.get("type") == "tool_result"]


def effort_of(kind: str, body: dict[str, Any]) -> Any:
    """The effort field in the kind's own words, or None when none arrived."""
    return {"openai": body.get("reasoning_effort"), "responses": (body.get("reasoning") or {}).get("effort"),
            "anthropic": body.get("thinking"),
            "bedrock": (body.get("additionalModelRequestFields") or {}).get("thinking"),
            "gemini": (body.get("generationConfig") or {}).get("thinkingConfig")}[wire(kind)]


EFFORT_FIELDS = ("reasoning_effort", "reasoning", "thinking")  # no kind may receive these for a non-reasoning model


def limit_of(kind: str, body: dict[str, Any], reasoning: bool = True) -> Any:
    """The token limit the upstream received (an openai reasoning model takes max_completion_tokens)."""
    if wire(kind) == "openai":
        other = "max_tokens" if reasoning else "max_completion_tokens"
        assert other not in body, f"{other} sent to a {'reasoning' if reasoning else 'plain'} chat model"
        return body.get("max_completion_tokens" if reasoning else "max_tokens")
    if kind == "bedrock":
        return (body.get("inferenceConfig") or {}).get("maxTokens")
    if wire(kind) == "gemini":
        return (body.get("generationConfig") or {}).get("maxOutputTokens")
    return body.get("max_tokens" if wire(kind) == "anthropic" else "max_output_tokens")
