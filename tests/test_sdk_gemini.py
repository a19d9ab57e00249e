"""The google-genai Python SDK through the gateway, pointed at it by base URL and key only
(`genai.Client(api_key=RELAY_KEY, http_options={"base_url": GATEWAY})`), against models on the fake upstream of each
kind (openai, anthropic, responses): text, streamed text, a function-calling round trip, JSON-schema output, an
image, count_tokens, the model list, and errors the SDK raises as its own APIError with Google's status words. Each
test checks what the SDK saw and what the upstream received."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors, types

from tests.conftest import Live, serve
from tests.fake_upstream import FakeUpstream

KINDS = ("openai", "anthropic", "responses")
MODEL = {"openai": "acme/oa", "anthropic": "acme/an", "responses": "acme/rs"}
UPSTREAM_PATH = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages", "responses": "/v1/responses"}
SYSTEM = "You answer in one short sentence."
PROMPT = "Say hello to the Gemini SDK."
TEXT = "Bonjour! Grüße, 你好 👋 — hello from the fake upstream, streamed word by word."
USAGE = (31, 7, 5)  # input (cache reads included), output, cache reads
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture(scope="module")
def live(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    config = {
        "upstreams": {
            "oa": {"kind": "openai", "base_url": fake.url},
            "an": {"kind": "anthropic", "base_url": fake.anthropic_url},
            "rs": {"kind": "responses", "base_url": fake.url},
        },
        "models": [
            {"id": "acme/oa", "upstream": "oa", "name": "gpt-up"},
            {"id": "acme/an", "upstream": "an", "name": "claude-up", "aliases": ["claude"], "context_window": 200000,
             "max_output_tokens": 8192, "reasoning": True},
            {"id": "acme/rs", "upstream": "rs", "name": "resp-up"},
        ],
        "policies": {"default": {"default_model": "acme/an"}},
        "cooldown": {"seconds": 0},
    }
    with serve(config, tmp_path_factory.mktemp("gemini")) as g:
        yield g


_CLIENTS: dict[tuple[str, str | None, str], genai.Client] = {}  # kept: a Client closes its connections when dropped


def client(live: Live, version: str | None = None, key: str | None = None) -> genai.Client:
    """The SDK as a user points it at the gateway: the base URL and the relay key (retries off, so that each error
    reaches the test)."""
    key = key or live.key
    if (live.url, version, key) not in _CLIENTS:
        options: dict[str, Any] = {"base_url": live.url, "retry_options": {"attempts": 1}}
        if version:
            options["api_version"] = version
        _CLIENTS[live.url, version, key] = genai.Client(api_key=key, http_options=options)
    return _CLIENTS[live.url, version, key]


@pytest.fixture(autouse=True)
def _fresh(fake: FakeUpstream) -> None:
    fake.reset()


def config(**more: Any) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(system_instruction=SYSTEM, max_output_tokens=50, temperature=0.25, **more)


def received(fake: FakeUpstream, kind: str) -> dict[str, Any]:
    """The one request the upstream got, with the caller's system prompt, limit and temperature in its words."""
    assert [r.path for r in fake.requests] == [UPSTREAM_PATH[kind]]
    body = fake.requests[0].body
    assert body["temperature"] == 0.25
    if kind == "openai":
        assert body["messages"][0] == {"role": "system", "content": SYSTEM} and body["max_tokens"] == 50
    elif kind == "anthropic":
        assert body["system"] == SYSTEM and body["max_tokens"] == 50
    else:
        assert body["instructions"] == SYSTEM and body["max_output_tokens"] == 50
    return body


def usage_of(kind: str) -> tuple[int, int, int]:
    """USAGE as Gemini counts it: every prompt token (Anthropic reports its cache reads apart), the answer, cached."""
    reported, output, cached = USAGE
    return (reported + cached if kind == "anthropic" else reported), output, cached


@pytest.mark.parametrize("version", ["v1", "v1beta"])
@pytest.mark.parametrize("kind", KINDS)
def test_text(live: Live, fake: FakeUpstream, kind: str, version: str) -> None:
    fake.script(text=TEXT, usage=USAGE)
    answer = client(live, version).models.generate_content(model=MODEL[kind], contents=PROMPT, config=config())
    assert answer.text == TEXT
    headers = answer.sdk_http_response.headers
    assert answer.response_id == headers["x-specway-decision-id"] and answer.model_version == MODEL[kind]
    assert answer.candidates[0].finish_reason == types.FinishReason.STOP
    prompt, output, _ = usage_of(kind)
    meta = answer.usage_metadata
    assert (meta.prompt_token_count, meta.candidates_token_count, meta.cached_content_token_count) == usage_of(kind)
    assert meta.total_token_count == prompt + output
    body = received(fake, kind)
    assert PROMPT in json.dumps(body) and live.key not in json.dumps(fake.requests[0].headers)


@pytest.mark.parametrize("kind", KINDS)
def test_streamed_text(live: Live, fake: FakeUpstream, kind: str) -> None:
    fake.script(text=TEXT, usage=USAGE)
    chunks = list(client(live).models.generate_content_stream(model=MODEL[kind], contents=PROMPT, config=config()))
    assert len(chunks) > 2, "the text arrives in pieces"
    assert "".join(c.text or "" for c in chunks) == TEXT
    assert {c.response_id for c in chunks} == {chunks[0].sdk_http_response.headers["x-specway-decision-id"]}
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert all(c.candidates[0].finish_reason is None for c in chunks[:-1])
    meta = chunks[-1].usage_metadata
    assert (meta.prompt_token_count, meta.candidates_token_count, meta.cached_content_token_count) == usage_of(kind)
    assert received(fake, kind).get("stream") is True


def _tool_result(kind: str, body: dict[str, Any]) -> tuple[str, str]:
    """(call id, result text) of the tool result an upstream request ends with, in its dialect."""
    if kind == "openai":
        last = body["messages"][-1]
        assert last["role"] == "tool"
        return last["tool_call_id"], last["content"]
    if kind == "anthropic":
        block = body["messages"][-1]["content"][0]
        assert block["type"] == "tool_result"
        return block["tool_use_id"], block["content"]
    item = body["input"][-1]
    assert item["type"] == "function_call_output"
    return item["call_id"], item["output"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("kind", KINDS)
def test_function_calling_round_trip(live: Live, fake: FakeUpstream, kind: str, stream: bool) -> None:
    """The upstream's tool call arrives as a functionCall; the caller's functionResponse goes back as the upstream's
    own tool result for that call, and the answer after it comes back."""
    gemini = client(live)
    tools = [types.Tool(function_declarations=[types.FunctionDeclaration(
        name="get_weather", description="The weather in a city.", parameters_json_schema=WEATHER)])]
    fake.script(text="", usage=USAGE, tool_calls=[{"id": "call_w1", "name": "get_weather",
                                                   "arguments": json.dumps({"city": "Paris"})}])
    cfg = config(tools=tools, automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
                 tool_config=types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode="ANY")))
    if stream:
        chunks = list(gemini.models.generate_content_stream(model=MODEL[kind], contents=PROMPT, config=cfg))
        calls = [call for c in chunks for call in c.function_calls or ()]
        model_turn = types.Content(role="model", parts=[p for c in chunks for p in c.candidates[0].content.parts or ()])
    else:
        answer = gemini.models.generate_content(model=MODEL[kind], contents=PROMPT, config=cfg)
        calls = answer.function_calls or []
        model_turn = answer.candidates[0].content
    assert [(c.id, c.name, c.args) for c in calls] == [("call_w1", "get_weather", {"city": "Paris"})]
    first = fake.requests[0].body
    offered = {"openai": lambda b: b["tools"][0]["function"]["parameters"],
               "anthropic": lambda b: b["tools"][0]["input_schema"], "responses": lambda b: b["tools"][0]["parameters"]}
    assert offered[kind](first) == WEATHER
    forced = {"openai": "required", "anthropic": {"type": "any"}, "responses": "required"}
    assert first["tool_choice"] == forced[kind]

    fake.reset()
    fake.script(text="It is sunny in Paris.", usage=USAGE)
    turn = [types.Content(role="user", parts=[types.Part(text=PROMPT)]), model_turn,
            types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
                id=calls[0].id, name="get_weather", response={"output": "sunny, 21 C"}))])]
    answer = gemini.models.generate_content(model=MODEL[kind], contents=turn, config=config(tools=tools))
    assert answer.text == "It is sunny in Paris."
    assert _tool_result(kind, fake.requests[0].body) == ("call_w1", "sunny, 21 C")


def test_a_call_without_an_id_is_answered_by_name(live: Live, fake: FakeUpstream) -> None:
    """Gemini's own function calls may carry no id: the gateway gives each one, and the response of that name (no id
    either) answers it."""
    fake.script(text="Done.", usage=USAGE)
    turn = [types.Content(role="user", parts=[types.Part(text=PROMPT)]),
            types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(
                name="get_weather", args={"city": "Oslo"}))]),
            types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
                name="get_weather", response={"temperature": 3}))])]
    tools = [types.Tool(function_declarations=[types.FunctionDeclaration(name="get_weather",
                                                                         parameters_json_schema=WEATHER)])]
    client(live).models.generate_content(model=MODEL["anthropic"], contents=turn, config=config(tools=tools))
    messages = fake.requests[0].body["messages"]
    call, result = messages[1]["content"][0], messages[2]["content"][0]
    assert call["type"] == "tool_use" and call["input"] == {"city": "Oslo"}
    assert result == {"type": "tool_result", "tool_use_id": call["id"], "content": '{"temperature":3}'}


@pytest.mark.parametrize("kind", KINDS)
def test_json_schema_output(live: Live, fake: FakeUpstream, kind: str) -> None:
    reply = json.dumps({"city": "Paris"})
    if kind == "anthropic":  # Anthropic is made to call a tool whose input is the answer
        fake.script(text="", usage=USAGE, tool_calls=[{"id": "t", "name": "specway_json_output", "arguments": reply}])
    else:
        fake.script(text=reply, usage=USAGE)
    answer = client(live).models.generate_content(
        model=MODEL[kind], contents=PROMPT,
        config=config(response_mime_type="application/json", response_json_schema=WEATHER))
    assert json.loads(answer.text) == {"city": "Paris"}
    body = received(fake, kind)
    if kind == "openai":
        assert body["response_format"]["json_schema"]["schema"] == WEATHER
    elif kind == "anthropic":
        assert body["tools"][-1]["input_schema"] == WEATHER and body["tool_choice"]["name"] == "specway_json_output"
    else:
        assert body["text"]["format"]["schema"] == WEATHER


def test_googles_schema_dialect_becomes_a_json_schema(live: Live, fake: FakeUpstream) -> None:
    fake.script(text='{"city": "Rome"}', usage=USAGE)
    schema = types.Schema(type="OBJECT", properties={"city": types.Schema(type="STRING", nullable=True)},
                          required=["city"], property_ordering=["city"])
    client(live).models.generate_content(model=MODEL["openai"], contents=PROMPT,
                                         config=config(response_mime_type="application/json", response_schema=schema))
    sent = received(fake, "openai")["response_format"]["json_schema"]["schema"]
    assert sent == {"type": "object", "properties": {"city": {"type": ["string", "null"]}}, "required": ["city"]}


@pytest.mark.parametrize("kind", KINDS)
def test_an_image(live: Live, fake: FakeUpstream, kind: str) -> None:
    fake.script(text="A single pixel.", usage=USAGE)
    parts = [types.Part.from_bytes(data=PNG, mime_type="image/png"), types.Part(text="What is this?")]
    answer = client(live).models.generate_content(model=MODEL[kind], contents=[types.Content(role="user", parts=parts)],
                                                  config=config())
    assert answer.text == "A single pixel."
    body, data = received(fake, kind), base64.b64encode(PNG).decode()
    if kind == "openai":
        assert body["messages"][1]["content"][0] == {"type": "image_url",
                                                     "image_url": {"url": f"data:image/png;base64,{data}"}}
    elif kind == "anthropic":
        assert body["messages"][0]["content"][0] == {"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": data}}
    else:
        assert body["input"][0]["content"][0]["image_url"] == f"data:image/png;base64,{data}"


@pytest.mark.parametrize("kind", KINDS)
def test_count_tokens(live: Live, fake: FakeUpstream, kind: str) -> None:
    """An anthropic upstream counts the prompt itself; for the other kinds it is the gateway's estimate, so said."""
    fake.script(text="", usage=(42, 0, 0))
    counted = client(live).models.count_tokens(model=MODEL[kind], contents=PROMPT)
    headers = counted.sdk_http_response.headers
    if kind == "anthropic":
        assert counted.total_tokens == 42 and "x-specway-estimated" not in headers
        assert [r.path for r in fake.requests] == ["/v1/messages/count_tokens"]
    else:
        assert counted.total_tokens and headers["x-specway-estimated"] == "true" and fake.requests == []


def test_the_routing_policy_chooses_for_the_placeholder(live: Live, fake: FakeUpstream) -> None:
    fake.script(text=TEXT, usage=USAGE)
    answer = client(live).models.generate_content(model="specway", contents=PROMPT, config=config())
    assert answer.model_version == "acme/an" and fake.requests[0].path == "/v1/messages"


def test_models_are_listed_as_googles_models(live: Live) -> None:
    gemini = client(live, "v1beta")
    listed = list(gemini.models.list(config={"page_size": 2}))
    assert [m.name for m in listed] == ["models/acme/oa", "models/acme/an", "models/claude", "models/acme/rs"]
    claude = gemini.models.get(model="acme/an")
    assert (claude.input_token_limit, claude.output_token_limit, claude.thinking) == (200000, 8192, True)
    assert claude.supported_actions == ["generateContent", "streamGenerateContent", "countTokens"]
    alias = gemini.models.get(model="claude")
    assert alias.name == "models/claude" and alias.description == "An alias of acme/an."


def test_errors_are_the_sdks_own(live: Live, fake: FakeUpstream) -> None:
    """Google's error shape and status words: the SDK raises its ClientError / ServerError with them."""
    gemini = client(live)
    with pytest.raises(errors.ClientError) as unknown:
        gemini.models.generate_content(model="acme/nope", contents=PROMPT)
    assert (unknown.value.code, unknown.value.status) == (404, "NOT_FOUND")
    assert "acme/nope" in unknown.value.message
    with pytest.raises(errors.ClientError) as refused:
        client(live, key="sk-sw-not-a-key").models.generate_content(model=MODEL["openai"], contents=PROMPT)
    assert (refused.value.code, refused.value.status) == (401, "UNAUTHENTICATED")
    with pytest.raises(errors.ClientError) as invalid:
        gemini.models.generate_content(model=MODEL["openai"], contents=PROMPT, config=config(candidate_count=2))
    assert (invalid.value.code, invalid.value.status) == (400, "INVALID_ARGUMENT")
    assert "candidateCount" in invalid.value.message
    fake.script(status=429, error="slow down", headers={"retry-after": "40"})  # longer than the gateway would wait
    with pytest.raises(errors.ClientError) as upstream:  # the upstream's 429, with its wait (docs/routing.md)
        gemini.models.generate_content(model=MODEL["openai"], contents=PROMPT)
    assert (upstream.value.code, upstream.value.status) == (429, "RESOURCE_EXHAUSTED")
    reasons = [d["reason"] for d in upstream.value.details["error"]["details"] if "reason" in d]
    assert reasons == ["upstream_rate_limited"]


def test_an_untranslatable_field_is_refused_by_name(live: Live, fake: FakeUpstream) -> None:
    with pytest.raises(errors.ClientError) as refused:
        client(live).models.generate_content(model=MODEL["anthropic"], contents=PROMPT,
                                             config=config(cached_content="cachedContents/abc"))
    assert (refused.value.code, refused.value.status) == (400, "INVALID_ARGUMENT")
    assert "cachedContent" in refused.value.message and fake.requests == []


def test_an_error_mid_stream_is_googles_error_event(live: Live, fake: FakeUpstream) -> None:
    fake.script(text=TEXT, usage=USAGE, fail_after=3, error="the model broke down")
    with pytest.raises(errors.APIError) as broken:
        list(client(live).models.generate_content_stream(model=MODEL["openai"], contents=PROMPT))
    assert broken.value.code == 502 and broken.value.status == "UNAVAILABLE"


def test_a_query_key_is_accepted_and_never_logged(live: Live, fake: FakeUpstream, caplog: pytest.LogCaptureFixture
                                                  ) -> None:
    """`?key=` as Google's API takes it (curl users): the request log carries the route and the decision, never the
    query; a wrong query key is Google's 401."""
    fake.script(text=TEXT, usage=USAGE)
    body = {"contents": [{"parts": [{"text": PROMPT}]}]}
    def logged() -> list[dict[str, Any]]:
        """This test's lines only: a previous test's stream may log after that test ended."""
        ours = {ok.headers["x-request-id"], bad.headers["x-request-id"]}
        return [line for r in caplog.records if r.name == "specway.requests"
                if (line := json.loads(r.getMessage()))["request_id"] in ours]

    with caplog.at_level("INFO", logger="specway.requests"):
        ok = httpx.post(f"{live.url}/v1beta/models/{MODEL['openai']}:generateContent?key={live.key}", json=body)
        bad = httpx.post(f"{live.url}/v1beta/models/{MODEL['openai']}:generateContent?key=sk-sw-wrong", json=body)
        deadline = time.monotonic() + 10  # a line is written once its answer has left: wait for it, never a delay
        while len(logged()) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert ok.status_code == 200 and ok.json()["candidates"][0]["content"]["parts"] == [{"text": TEXT}]
    assert bad.status_code == 401 and bad.json()["error"]["status"] == "UNAUTHENTICATED"
    assert [line["route"] for line in logged()] == ["/v1beta/models/{model}:generateContent"] * 2
    assert live.key not in caplog.text and "sk-sw-wrong" not in caplog.text
    assert live.key not in json.dumps(fake.requests[0].headers) and fake.requests[0].query == {}
