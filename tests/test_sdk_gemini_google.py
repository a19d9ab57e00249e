"""The google-genai Python SDK through the gateway to Google's own upstreams: the Gemini API (kind gemini) and Vertex
AI (kind vertex, signed in with a service account for real: tests/fake_gemini.py), a Gemini model on each, where a
Gemini caller's body goes as it was written, and a Claude model on Vertex AI, where it is translated to Anthropic's
Messages at rawPredict. Text, streamed text, a function-calling round trip with its thought signature, JSON-schema
output, an image, count_tokens and an error; each test checks what the SDK saw and what the upstream received. The
README's google-genai example (docs/clients.md, "gemini-sdk") is run here too."""

from __future__ import annotations

import base64
import json
import runpy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google import genai
from google.genai import errors, types

from handlers.inference.formats.gemini.vocabulary import pick
from tests import fake_gemini
from tests.conftest import Live, serve
from tests.docs_support import block
from tests.fake_upstream import GEMINI_KEY, FakeUpstream

KINDS = ("gemini", "vertex", "vertex-claude")
MODEL = {"gemini": "acme/gm", "vertex": "acme/vx", "vertex-claude": "acme/vc"}
NAME = {"gemini": "gemini-2.5-flash", "vertex": "gemini-2.5-pro", "vertex-claude": "claude-sonnet-4-5@20250929"}
PROJECT, LOCATION = "sdk-project", "europe-west1"
PREFIX = f"/v1/projects/{PROJECT}/locations/{LOCATION}/publishers"
PATH = {"gemini": "/v1beta/models/gemini-2.5-flash:{}", "vertex": f"{PREFIX}/google/models/gemini-2.5-pro:{{}}",
        "vertex-claude": f"{PREFIX}/anthropic/models/claude-sonnet-4-5@20250929:{{}}"}
ACTION = {False: {"gemini": "generateContent", "vertex": "generateContent", "vertex-claude": "rawPredict"},
          True: {"gemini": "streamGenerateContent", "vertex": "streamGenerateContent",
                 "vertex-claude": "streamRawPredict"}}
SYSTEM = "You answer in one short sentence."
TEXT = "Bonjour! Grüße, 你好 👋 — hello from Google's side of the fake."
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
FREE = {"input": 0, "output": 0}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture(scope="module")
def live(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    account = fake_gemini.ServiceAccount.new()
    fake.issuer = fake_gemini.TokenIssuer(account)
    key_file = account.key_file(tmp_path_factory.mktemp("gcp"), fake.token_uri)
    config = {
        "upstreams": {
            "gm": {"kind": "gemini", "base_url": fake.google_url, "api_key_env": "SPECWAY_SDKG_GEMINI"},
            "vx": {"kind": "vertex", "project": PROJECT, "location": LOCATION, "base_url": fake.google_url,
                   "credentials_env": "SPECWAY_SDKG_ACCOUNT"},
        },
        "models": [{"id": MODEL[k], "upstream": "gm" if k == "gemini" else "vx", "name": NAME[k], "price": FREE}
                   for k in KINDS] + [{"id": "acme/strong", "upstream": "gm", "name": "gemini-3-pro-preview",
                                       "reasoning": True, "price": FREE}],
        "policies": {"default": {"default_model": "acme/gm"}},
        "cooldown": {"seconds": 0},
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECWAY_SDKG_GEMINI", GEMINI_KEY)
        mp.setenv("SPECWAY_SDKG_ACCOUNT", str(key_file))
        with serve(config, tmp_path_factory.mktemp("sdk-google")) as g:
            yield g


@pytest.fixture(name="client")
def fixture_client(live: Live, fake: FakeUpstream) -> genai.Client:
    fake.reset()
    return genai.Client(api_key=live.key, http_options={"base_url": live.url, "retry_options": {"attempts": 1}})


def sent(fake: FakeUpstream, kind: str, stream: bool = False) -> dict[str, Any]:
    """The one request the upstream got, on the kind's path (the token endpoint's aside)."""
    calls = [r for r in fake.requests if r.path != "/token"]
    assert [r.path for r in calls] == [PATH[kind].format(ACTION[stream][kind])], [r.path for r in calls]
    return calls[0].body


def config(**more: Any) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(system_instruction=SYSTEM, max_output_tokens=50, temperature=0.25, **more)


@pytest.mark.parametrize("kind", KINDS)
def test_text(client: genai.Client, fake: FakeUpstream, kind: str) -> None:
    fake.script(text=TEXT, usage=(31, 7, 5))
    answer = client.models.generate_content(model=MODEL[kind], contents="Say hello.", config=config())
    assert answer.text == TEXT and answer.response_id
    usage = answer.usage_metadata
    assert usage is not None and usage.candidates_token_count == 7
    body = sent(fake, kind)
    if kind == "vertex-claude":  # translated to Messages
        assert (body["system"], body["max_tokens"], body["temperature"]) == (SYSTEM, 50, 0.25)
        assert body["anthropic_version"] == "vertex-2023-10-16"
        assert usage.prompt_token_count == 31 + 5 and usage.cached_content_token_count == 5
    else:  # the caller's own body, as it wrote it
        assert body["systemInstruction"]["parts"] == [{"text": SYSTEM}]
        assert {k: pick(body["generationConfig"], k) for k in ("maxOutputTokens", "temperature")} == {
            "maxOutputTokens": 50, "temperature": 0.25}
        assert body["contents"] == [{"role": "user", "parts": [{"text": "Say hello."}]}]
        assert (usage.prompt_token_count, usage.cached_content_token_count) == (31, 5)


@pytest.mark.parametrize("kind", KINDS)
def test_streamed_text(client: genai.Client, fake: FakeUpstream, kind: str) -> None:
    fake.script(text=TEXT)
    chunks = list(client.models.generate_content_stream(model=MODEL[kind], contents="Say hello.", config=config()))
    assert "".join(c.text or "" for c in chunks) == TEXT and len(chunks) > 2
    assert chunks[-1].candidates and chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    sent(fake, kind, stream=True)


@pytest.mark.parametrize("kind", KINDS)
def test_function_calling_round_trip(client: genai.Client, fake: FakeUpstream, kind: str) -> None:
    tool = types.Tool(function_declarations=[types.FunctionDeclaration(
        name="get_weather", description="The weather in a city.", parameters_json_schema=WEATHER)])
    fake.script(text="", reasoning=["Weather first."], signature="sig-google-1",
                tool_calls=[{"id": "fc-7", "name": "get_weather", "arguments": '{"city": "Paris"}'}])
    first = client.models.generate_content(model=MODEL[kind], contents="Weather in Paris?",
                                           config=config(tools=[tool]))
    calls = first.function_calls or []
    assert [(c.name, c.args) for c in calls] == [("get_weather", {"city": "Paris"})]
    body = sent(fake, kind)
    if kind == "vertex-claude":
        assert body["tools"][0]["name"] == "get_weather" and body["tools"][0]["input_schema"] == WEATHER
    else:
        declared = pick(body["tools"][0], "functionDeclarations")[0]  # either of Google's spellings, as sent
        assert pick(declared, "parametersJsonSchema") == WEATHER
    assert first.candidates and first.candidates[0].content is not None
    fake.reset()
    fake.script(text="18C and sunny.")
    history = [types.Content(role="user", parts=[types.Part(text="Weather in Paris?")]), first.candidates[0].content,
               types.Content(role="user", parts=[types.Part.from_function_response(
                   name="get_weather", response={"temp": 18})])]
    second = client.models.generate_content(model=MODEL[kind], contents=history, config=config(tools=[tool]))
    assert second.text == "18C and sunny."
    body = sent(fake, kind)
    if kind == "vertex-claude":  # the call and its result; Claude's signature has no place in a Gemini caller's parts
        turn = body["messages"][1]["content"]
        assert [b["type"] for b in turn] == ["tool_use"] and "sig-google-1" not in json.dumps(body)
        assert body["messages"][2]["content"][0]["type"] == "tool_result"
    else:  # Gemini's thought signature back on its call, as the SDK kept it
        model_turn = body["contents"][1]
        call = next(p for p in model_turn["parts"] if pick(p, "functionCall"))
        assert pick(call, "thoughtSignature") == base64.b64encode(b"sig-google-1").decode() or pick(
            call, "thoughtSignature") == "sig-google-1"
        answer = next(p for p in body["contents"][2]["parts"] if pick(p, "functionResponse"))
        response = pick(answer, "functionResponse")
        assert response["name"] == "get_weather" and response["response"] == {"temp": 18}


@pytest.mark.parametrize("kind", KINDS)
def test_json_schema_output(client: genai.Client, fake: FakeUpstream, kind: str) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    if kind == "vertex-claude":  # Anthropic is made to call a tool whose input is the answer
        fake.script(text="", tool_calls=[{"name": "specway_json_output", "arguments": '{"answer": "sunny"}'}])
    else:
        fake.script(text='{"answer": "sunny"}')
    answer = client.models.generate_content(model=MODEL[kind], contents="Weather?", config=config(
        response_mime_type="application/json", response_json_schema=schema))
    assert json.loads(answer.text or "") == {"answer": "sunny"}
    body = sent(fake, kind)
    if kind == "vertex-claude":
        assert body["tool_choice"]["type"] == "tool" and body["tools"][0]["input_schema"] == schema
    else:
        said = pick(body, "generationConfig")
        assert pick(said, "responseMimeType") == "application/json" and pick(said, "responseJsonSchema") == schema


@pytest.mark.parametrize("kind", KINDS)
def test_an_image(client: genai.Client, fake: FakeUpstream, kind: str) -> None:
    parts = [types.Part(text="What is this?"), types.Part.from_bytes(data=PNG, mime_type="image/png")]
    client.models.generate_content(model=MODEL[kind], contents=types.Content(role="user", parts=parts),
                                   config=config())
    body, data = sent(fake, kind), base64.b64encode(PNG).decode()
    if kind == "vertex-claude":
        image = body["messages"][0]["content"][1]
        assert image["source"] == {"type": "base64", "media_type": "image/png", "data": data}
    else:
        inline = pick(body["contents"][0]["parts"][1], "inlineData")
        assert inline["data"] == data and pick(inline, "mimeType") == "image/png"


@pytest.mark.parametrize("kind", KINDS)
def test_count_tokens(client: genai.Client, fake: FakeUpstream, kind: str) -> None:
    fake.script(usage=(42, 0, 0))
    counted = client.models.count_tokens(model=MODEL[kind], contents="How many tokens is this?")
    assert counted.total_tokens == 42
    calls = [r.path for r in fake.requests if r.path != "/token"]
    assert calls == [{"gemini": "/v1beta/models/gemini-2.5-flash:countTokens",
                      "vertex": f"{PREFIX}/google/models/gemini-2.5-pro:countTokens",
                      "vertex-claude": f"{PREFIX}/anthropic/models/count-tokens:rawPredict"}[kind]]


@pytest.mark.parametrize("kind", KINDS)
def test_an_upstream_error_is_the_sdks_own(client: genai.Client, fake: FakeUpstream, kind: str) -> None:
    fake.script(status=429, error="Resource has been exhausted (e.g. check quota).", headers={"retry-after": "7"})
    with pytest.raises(errors.APIError) as caught:
        client.models.generate_content(model=MODEL[kind], contents="Hello?", config=config())
    assert caught.value.code == 429 and caught.value.status == "RESOURCE_EXHAUSTED", caught.value


def test_the_clients_example_runs_as_written(live: Live, fake: FakeUpstream, capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    """docs/clients.md's google-genai example ("gemini-sdk"), its key and port this gateway's."""
    fake.reset()
    fake.script(text="Hello from Gemini 3.")
    code = block("gemini-sdk").replace("sk-sw-...", live.key).replace("http://127.0.0.1:8080", live.url)
    script = tmp_path / "hello_gemini.py"
    script.write_text(code)
    runpy.run_path(str(script))
    printed = capsys.readouterr().out.split()
    assert printed[:4] == ["Hello", "from", "Gemini", "3."] and len(printed) == 5
    calls = [r for r in fake.requests if r.path != "/token"]
    assert [r.path for r in calls] == ["/v1beta/models/gemini-3-pro-preview:generateContent"]
    thinking = pick(pick(calls[0].body, "generationConfig"), "thinkingConfig")
    assert pick(thinking, "thinkingLevel") == "HIGH"
