"""The gemini and vertex upstreams against the fake, over real HTTP: the bodies they send in Gemini's words, what
they read back (whole and streamed), Google's errors, token counts; and Vertex AI's sign-in with google-auth for
real: a service-account key file whose token_uri is the fake's token endpoint, which verifies the signed JWT
assertion, and access tokens renewed before they expire."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from generated.config import UpstreamSettings
from handlers import config as config_mod
from handlers.config import ConfigError
from handlers.inference.canonical import (
    CustomTool,
    Document,
    FinishReason,
    HostedTool,
    Image,
    Message,
    OutputFormat,
    Request,
    Text,
    Thinking,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
    fold,
)
from handlers.inference.formats.base import Traits
from handlers.inference.upstreams.base import Upstream, UpstreamError
from handlers.inference.upstreams.gemini import GeminiUpstream
from handlers.inference.upstreams.google_tokens import GoogleTokens, credentials
from handlers.inference.upstreams.vertex import VertexUpstream
from tests import fake_gemini
from tests.fake_upstream import GEMINI_KEY, FakeUpstream, Reply
from tests.upstream_support import WEATHER, fixture_fake, fixture_server  # noqa: F401  (fixtures)

HELLO = Request(format="chat", messages=[Message("user", [Text("Hello there")])], system="Be brief.")
REASONING = Traits(reasoning=True)
PROJECT, LOCATION = "fake-project", "europe-west4"
VERTEX_PREFIX = f"/v1/projects/{PROJECT}/locations/{LOCATION}/publishers"
Build = Callable[..., Upstream]


@pytest.fixture(name="account", scope="module")
def fixture_account() -> fake_gemini.ServiceAccount:
    return fake_gemini.ServiceAccount.new()


@pytest.fixture(name="key_file")
def fixture_key_file(fake: FakeUpstream, account: fake_gemini.ServiceAccount, tmp_path: Path) -> Path:
    fake.issuer = fake_gemini.TokenIssuer(account)
    return account.key_file(tmp_path, fake.token_uri)


@pytest.fixture(name="build")
async def fixture_build(fake: FakeUpstream, key_file: Path, monkeypatch: pytest.MonkeyPatch
                        ) -> AsyncIterator[Build]:
    monkeypatch.setenv("SPECWAY_TEST_GEMINI_KEY", GEMINI_KEY)
    monkeypatch.setenv("SPECWAY_TEST_VERTEX_SA", str(key_file))
    made: list[Upstream] = []

    def make(kind: str = "gemini", **settings: Any) -> Upstream:
        if kind == "gemini":
            fields = {"kind": "gemini", "base_url": fake.google_url, "api_key_env": "SPECWAY_TEST_GEMINI_KEY"}
            upstream: Upstream = GeminiUpstream.from_settings("gem", UpstreamSettings(**{**fields, **settings}))
        else:
            fields = {"kind": "vertex", "base_url": fake.google_url, "project": PROJECT, "location": LOCATION,
                      "credentials_env": "SPECWAY_TEST_VERTEX_SA"}
            upstream = VertexUpstream.from_settings("vtx", UpstreamSettings(**{**fields, **settings}))
        made.append(upstream)
        return upstream

    yield make
    for upstream in made:
        await upstream.aclose()


PLAIN_TRAITS = Traits()


async def events(upstream: Upstream, request: Request = HELLO, model: str = "gemini-2.5-flash",
                 traits: Traits = PLAIN_TRAITS) -> list[Any]:
    return [event async for event in upstream.stream(request, model, traits)]


# --- the Gemini API ---------------------------------------------------------------------------------------------------


async def test_a_whole_answer_in_geminis_words(fake: FakeUpstream, build: Build) -> None:
    fake.script(text="Hi there", usage=(12, 3, 4))
    result = await build().complete(Request(format="chat", messages=HELLO.messages, system="Be brief.",
                                            max_tokens=50, temperature=0.5, top_p=0.9, stop=["END"], seed=7),
                                    "gemini-2.5-flash")
    sent = fake.requests[-1]
    assert sent.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert sent.headers["x-goog-api-key"] == GEMINI_KEY and "authorization" not in sent.headers
    assert sent.body == {
        "contents": [{"role": "user", "parts": [{"text": "Hello there"}]}],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "generationConfig": {"temperature": 0.5, "topP": 0.9, "maxOutputTokens": 50, "stopSequences": ["END"],
                             "seed": 7},
    }
    assert result.text() == "Hi there" and result.finish_reason is FinishReason.STOP
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.cached_input_tokens) == (12, 3, 4)
    assert result.upstream_model == "gemini-2.5-flash"


async def test_a_stream_of_thoughts_text_and_a_signed_call(fake: FakeUpstream, build: Build) -> None:
    fake.script(text="Let me look.", reasoning=["The user wants weather."], signature="sig-gemini-1",
                tool_calls=[{"name": "get_weather", "arguments": '{"city": "Paris"}'}], usage=(20, 9, 0))
    got = await events(build(), model="gemini-2.5-pro", traits=REASONING)
    assert fake.requests[-1].path == "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
    assert fake.requests[-1].query == {"alt": "sse"}
    result = fold(got)
    thinking = [b for b in result.content if isinstance(b, Thinking)]
    assert [(t.text, t.signature, t.format) for t in thinking] == [  # the signature came on the call
        ("The user wants weather.", None, "gemini"), ("", "sig-gemini-1", "gemini")]
    calls = [b for b in result.content if isinstance(b, ToolCall)]
    assert [(c.name, orjson.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert calls[0].id.startswith("call_")  # the Gemini API gives none: the reader does
    assert result.text() == "Let me look." and result.finish_reason is FinishReason.TOOL_CALLS
    thoughts = 4  # the fake counts the words of the thought summary
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.reasoning_tokens) == (
        20, 9 + thoughts, thoughts)


async def test_the_same_answer_whole_reads_the_same(fake: FakeUpstream, build: Build) -> None:
    reply = Reply(text="Let me look.", reasoning=["Weather, then."], signature="sig-2",
                  tool_calls=[{"name": "get_weather", "arguments": '{"city": "Oslo"}', "id": "fc-7"}])
    fake.script(reply)
    whole = await build().complete(HELLO, "gemini-2.5-pro", REASONING)
    fake.script(reply)
    streamed = fold(await events(build(), model="gemini-2.5-pro", traits=REASONING))
    for result in (whole, streamed):
        assert result.finish_reason is FinishReason.TOOL_CALLS and result.text() == "Let me look."
        assert [(c.id, c.name) for c in result.content if isinstance(c, ToolCall)] == [("fc-7", "get_weather")]
        assert "".join(b.signature or "" for b in result.content if isinstance(b, Thinking)) == "sig-2"


async def test_a_tool_loop_goes_back_with_names_ids_and_signatures(fake: FakeUpstream, build: Build) -> None:
    loop = Request(format="chat", tools=[Tool("get_weather", "The weather.", WEATHER, None, "chat")], messages=[
        Message("user", [Text("Weather in Paris?")]),
        Message("assistant", [Thinking("Look it up.", format="gemini"), Thinking("", signature="sig-g", format="gemini"),
                              ToolCall("fc-1", "get_weather", '{"city": "Paris"}')]),
        Message("tool", [ToolResult("fc-1", '{"temp": 21}')]),
        Message("tool", [ToolResult("fc-2", "not json", is_error=True)]),
    ])
    loop.messages[1].content.append(ToolCall("fc-2", "get_weather", '{"city": "Lyon"}'))
    await build().complete(loop, "gemini-2.5-flash")
    body = fake.requests[-1].body
    assert body["tools"] == [{"functionDeclarations": [
        {"name": "get_weather", "description": "The weather.", "parametersJsonSchema": WEATHER}]}]
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
        {"role": "model", "parts": [
            {"text": "Look it up.", "thought": True},
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": "fc-1"},
             "thoughtSignature": "sig-g"},
            {"functionCall": {"name": "get_weather", "args": {"city": "Lyon"}, "id": "fc-2"}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"temp": 21}, "id": "fc-1"}},
            {"functionResponse": {"name": "get_weather", "response": {"error": "not json"}, "id": "fc-2"}}]},
    ]


async def test_another_providers_calls_carry_the_documented_signature_to_gemini_3(fake: FakeUpstream,
                                                                                   build: Build) -> None:
    loop = Request(format="messages", messages=[
        Message("user", [Text("Weather?")]),
        Message("assistant", [Thinking("hm", signature="claude-sig", format="messages"),
                              ToolCall("toolu_1", "get_weather", '{"city": "Rome"}')]),
        Message("tool", [ToolResult("toolu_1", "sunny")]),
    ])
    await build().complete(loop, "gemini-3-pro-preview")
    model_turn = fake.requests[-1].body["contents"][1]
    assert model_turn == {"role": "model", "parts": [
        {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}, "id": "toolu_1"},
         "thoughtSignature": "skip_thought_signature_validator"}]}  # Claude's thinking never reaches Gemini
    await build().complete(loop, "gemini-2.5-flash")
    assert "thoughtSignature" not in fake.requests[-1].body["contents"][1]["parts"][0]


@pytest.mark.parametrize(("model", "effort", "budget", "expected"), [
    ("gemini-2.5-flash", "high", None, {"thinkingBudget": 16384, "includeThoughts": True}),
    ("gemini-2.5-flash", None, 2048, {"thinkingBudget": 2048, "includeThoughts": True}),
    ("gemini-3-pro-preview", "low", None, {"thinkingLevel": "low", "includeThoughts": True}),
    ("gemini-3.5-flash", "minimal", None, {"thinkingLevel": "minimal", "includeThoughts": True}),
], ids=["budget-from-tier", "callers-budget", "level", "minimal-level"])
async def test_effort_is_thinking_config(fake: FakeUpstream, build: Build, model: str, effort: str | None,
                                         budget: int | None, expected: dict[str, Any]) -> None:
    traits = Traits(reasoning=True, thinking_budgets=(1024, 8192, 16384))
    await build().complete(Request(format="chat", messages=HELLO.messages, effort=effort, thinking_budget=budget),
                           model, traits)
    assert fake.requests[-1].body["generationConfig"]["thinkingConfig"] == expected


async def test_thinking_off_and_a_model_that_does_not_reason(fake: FakeUpstream, build: Build) -> None:
    off = Request(format="messages", messages=HELLO.messages, thinking=False)
    await build().complete(off, "gemini-2.5-flash", REASONING)
    assert fake.requests[-1].body["generationConfig"] == {"thinkingConfig": {"thinkingBudget": 0}}
    await build().complete(Request(format="chat", messages=HELLO.messages, effort="high"), "gemma-3-27b-it")
    assert "generationConfig" not in fake.requests[-1].body  # effort was a routing input only


async def test_structured_output_tool_choice_and_google_search(fake: FakeUpstream, build: Build) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    search = HostedTool("web_search", "web_search", {"type": "web_search", "search_context_size": "low"},
                        "responses")
    request = Request(format="responses", messages=HELLO.messages, output=OutputFormat("json_schema", schema, "a"),
                      tools=[Tool("get_weather", None, WEATHER, None, "responses"), search],
                      tool_choice=ToolChoice("tool", None, "responses", name="get_weather"))
    upstream = build()
    await upstream.complete(request, "gemini-2.5-flash")
    body = fake.requests[-1].body
    assert body["generationConfig"] == {"responseMimeType": "application/json", "responseJsonSchema": schema}
    assert body["tools"] == [{"functionDeclarations": [{"name": "get_weather", "parametersJsonSchema": WEATHER}]},
                             {"googleSearch": {}}]
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}}
    assert upstream.left_out(request, "gemini-2.5-flash") == [
        "tool option web_search.search_context_size: the gemini upstream's equivalent has no such option"]


async def test_a_custom_tool_goes_as_a_function_and_comes_back_custom(fake: FakeUpstream, build: Build) -> None:
    patch = CustomTool("apply_patch", "Edit files.", {"syntax": "lark", "definition": "start: /.+/"}, None,
                       "responses")
    fake.script(tool_calls=[{"name": "apply_patch", "arguments": '{"input": "*** Begin Patch"}'}])
    result = await build().complete(Request(format="responses", messages=HELLO.messages, tools=[patch]),
                                    "gemini-2.5-flash")
    declared = fake.requests[-1].body["tools"][0]["functionDeclarations"][0]
    assert declared["name"] == "apply_patch" and declared["parametersJsonSchema"]["required"] == ["input"]
    call = next(b for b in result.content if isinstance(b, ToolCall))
    assert (call.custom, call.arguments) == (True, "*** Begin Patch")


async def test_at_most_one_call_is_refused_by_name(build: Build) -> None:
    one = Request(format="chat", messages=HELLO.messages, tools=[Tool("f", None, WEATHER, None, "chat")],
                  tool_choice=ToolChoice("auto", None, "chat", parallel=False))
    with pytest.raises(Exception, match="parallel_tool_calls") as caught:
        await build().complete(one, "gemini-2.5-flash")
    assert getattr(caught.value, "param", None) == "parallel_tool_calls"


async def test_images_and_documents_are_parts(fake: FakeUpstream, build: Build) -> None:
    request = Request(format="chat", messages=[Message("user", [
        Text("Look:"), Image(data="iVBORw0KGgo=", media_type="image/png"),
        Image(url="data:image/jpeg;base64,/9j/4AAQ"), Image(url="https://example.com/cat.webp"),
        Document(data="JVBERi0x", media_type="application/pdf"), Document(text="plain notes"),
        Document(url="gs://bucket/report.pdf")])])
    await build().complete(request, "gemini-2.5-flash")
    assert fake.requests[-1].body["contents"][0]["parts"] == [
        {"text": "Look:"}, {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
        {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/4AAQ"}},
        {"fileData": {"mimeType": "image/webp", "fileUri": "https://example.com/cat.webp"}},
        {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0x"}},
        {"inlineData": {"mimeType": "text/plain", "data": "cGxhaW4gbm90ZXM="}},
        {"fileData": {"mimeType": "application/pdf", "fileUri": "gs://bucket/report.pdf"}},
    ]
    for block, field in ((Image(file_id="file-abc"), "file_id"), (Image(url="https://example.com/picture"), "url")):
        with pytest.raises(Exception, match=field):
            await build().complete(Request(format="chat", messages=[Message("user", [block])]), "gemini-2.5-flash")


async def test_googles_errors_say_their_status_and_when_to_come_back(fake: FakeUpstream, build: Build,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    original = fake_gemini.error

    def with_retry_info(reply: Reply) -> dict[str, Any]:
        body = original(reply)
        body["error"]["details"] = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "27s"}]
        return body

    monkeypatch.setattr(fake_gemini, "error", with_retry_info)
    fake.script(status=429, error="Quota exceeded for generate_content_free_tier_requests")
    upstream = build()
    with pytest.raises(UpstreamError) as caught:
        await upstream.complete(HELLO, "gemini-2.5-flash")
    assert (caught.value.status, caught.value.retry_after) == (429, 27.0)
    assert "Quota exceeded" in caught.value.message and caught.value.trips_cooldown
    fake.script(fail_after=2, error="backend broke")
    with pytest.raises(UpstreamError) as mid:
        await events(upstream)
    assert (mid.value.status, mid.value.message) == (500, "backend broke")


async def test_a_wrong_key_names_no_secret(fake: FakeUpstream, build: Build, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECWAY_TEST_GEMINI_KEY", "AIza-wrong-key-123")
    with pytest.raises(UpstreamError) as caught:
        await build().complete(HELLO, "gemini-2.5-flash")
    assert caught.value.status == 401 and caught.value.falls_back  # the gateway's key, not the caller's request
    assert caught.value.message == "upstream gem rejected the gateway's credentials"


async def test_counting_tokens_sends_the_whole_prompt(fake: FakeUpstream, build: Build) -> None:
    fake.script(usage=(42, 0, 0))
    counted = await build().count_tokens(HELLO, "gemini-2.5-flash")  # type: ignore[attr-defined]
    assert counted == 42
    sent = fake.requests[-1]
    assert sent.path == "/v1beta/models/gemini-2.5-flash:countTokens"
    assert sent.body == {"generateContentRequest": {
        "model": "models/gemini-2.5-flash", "contents": [{"role": "user", "parts": [{"text": "Hello there"}]}],
        "systemInstruction": {"parts": [{"text": "Be brief."}]}}}


async def test_a_prompt_refused_before_any_candidate_is_a_content_filter(fake: FakeUpstream, build: Build) -> None:
    fake.script(body={"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
                      "usageMetadata": {"promptTokenCount": 5, "totalTokenCount": 5}})
    result = await build().complete(HELLO, "gemini-2.5-flash")
    assert result.finish_reason is FinishReason.CONTENT_FILTER and result.content == []


# --- Vertex AI ------------------------------------------------------------------------------------------------------


async def test_vertex_signs_in_with_a_service_account_and_calls_gemini(fake: FakeUpstream, build: Build,
                                                                        account: fake_gemini.ServiceAccount) -> None:
    upstream = build("vertex")
    fake.script(text="Hallo")
    result = await upstream.complete(HELLO, "gemini-2.5-flash")
    sent = fake.requests[-1]
    assert sent.path == f"{VERTEX_PREFIX}/google/models/gemini-2.5-flash:generateContent"
    assert fake.issuer is not None and sent.headers["authorization"].removeprefix("Bearer ") in fake.issuer.issued
    assert result.text() == "Hallo" and fake.issuer.refused == []
    fake.script(text="Noch einmal")
    assert fold(await events(upstream)).text() == "Noch einmal"
    assert fake.requests[-1].path == f"{VERTEX_PREFIX}/google/models/gemini-2.5-flash:streamGenerateContent"
    assert len(fake.issuer.issued) == 1  # the token is kept while it is valid


async def test_vertex_calls_claude_in_anthropics_format(fake: FakeUpstream, build: Build) -> None:
    upstream = build("vertex")
    fake.script(text="From Claude")
    result = await upstream.complete(Request(format="chat", messages=HELLO.messages, system="Be brief.", max_tokens=64),
                                     "claude-sonnet-4-5@20250929")
    sent = fake.requests[-1]
    assert sent.path == f"{VERTEX_PREFIX}/anthropic/models/claude-sonnet-4-5@20250929:rawPredict"
    assert sent.body == {"anthropic_version": "vertex-2023-10-16", "max_tokens": 64, "system": "Be brief.",
                         "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello there"}]}]}
    assert result.text() == "From Claude"
    fake.script(text="Streamed Claude")
    assert fold(await events(upstream, model="claude-sonnet-4-5@20250929")).text() == "Streamed Claude"
    sent = fake.requests[-1]
    assert sent.path.endswith(":streamRawPredict") and sent.body["stream"] is True and "model" not in sent.body
    fake.script(usage=(17, 0, 0))
    assert await upstream.count_tokens(HELLO, "claude-sonnet-4-5@20250929") == 17  # type: ignore[attr-defined]
    assert fake.requests[-1].path == f"{VERTEX_PREFIX}/anthropic/models/count-tokens:rawPredict"
    assert fake.requests[-1].body["model"] == "claude-sonnet-4-5@20250929"


async def test_a_token_that_expires_mid_test_is_renewed_without_a_failed_request(
        fake: FakeUpstream, key_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert fake.issuer is not None
    fake.issuer.lifetime = 3.0  # the fake refuses each token 3 s after it issued it
    monkeypatch.setenv("SPECWAY_TEST_VERTEX_SA", str(key_file))
    tokens = GoogleTokens("vtx", credentials("upstreams.vtx", "SPECWAY_TEST_VERTEX_SA"), renew_before=1.5)
    upstream = VertexUpstream("vtx", project=PROJECT, location=LOCATION, tokens=tokens, base_url=fake.google_url)
    try:
        started = time.monotonic()
        answered = 0
        while time.monotonic() - started < 5.0:
            fake.script(text="ok")
            assert (await upstream.complete(HELLO, "gemini-2.5-flash")).text() == "ok"
            answered += 1
            await asyncio.sleep(0.25)
    finally:
        await upstream.aclose()
    used = {r.headers["authorization"] for r in fake.requests if r.path.startswith("/v1/projects")}
    assert 2 <= len(fake.issuer.issued) < answered and len(used) == len(fake.issuer.issued)
    assert fake.issuer.refused == []


async def test_an_assertion_the_token_endpoint_refuses_fails_over_and_names_no_secret(
        fake: FakeUpstream, build: Build, account: fake_gemini.ServiceAccount) -> None:
    assert fake.issuer is not None
    fake.issuer.account = fake_gemini.ServiceAccount.new()  # the endpoint now knows another key: the signature fails
    try:
        with pytest.raises(UpstreamError) as caught:
            await build("vertex").complete(HELLO, "gemini-2.5-flash")
    finally:
        fake.issuer.account = account
    assert caught.value.status == 401 and caught.value.falls_back
    assert "could not get a Google access token (RefreshError)" in caught.value.message
    assert account.private_pem[40:80] not in caught.value.message
    assert fake.issuer.refused and not any(r.path.startswith("/v1/projects") for r in fake.requests)


# --- configuration --------------------------------------------------------------------------------------------------


def _load(tmp_path: Path, upstream: dict[str, Any]) -> None:
    path = tmp_path / "specway.yaml"
    path.write_text(orjson.dumps({"upstreams": {"g": upstream}, "models": [{"id": "m", "upstream": "g",
                                                                            "name": "gemini-2.5-flash"}]}).decode())
    config_mod.load(str(path))


@pytest.mark.parametrize(("upstream", "problem"), [
    ({"kind": "vertex", "location": "global"}, "upstreams.g.project: required for kind vertex"),
    ({"kind": "vertex", "project": "p"}, "upstreams.g.location: required for kind vertex"),
    ({"kind": "vertex", "project": "p", "location": "l", "api_key_env": "K"}, "signs in with Google credentials"),
    ({"kind": "gemini", "project": "p"}, "upstreams.g.project: only kind vertex takes it"),
    ({"kind": "openai", "base_url": "http://x/v1", "credentials_env": "X"}, "credentials_env: only kind vertex"),
])
def test_configuration_says_what_each_google_kind_needs(tmp_path: Path, upstream: dict[str, Any], problem: str
                                                        ) -> None:
    with pytest.raises(ConfigError, match=problem):
        _load(tmp_path, upstream)


def test_a_gemini_upstream_needs_no_base_url(tmp_path: Path) -> None:
    _load(tmp_path, {"kind": "gemini", "api_key_env": "GEMINI_API_KEY"})
