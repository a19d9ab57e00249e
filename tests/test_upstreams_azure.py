"""The azure upstream against the fake's Azure paths (tests/fake_azure.py): where it calls (v1 or dated, Chat
Completions or Responses), how it signs in (api-key, or Entra ID tokens from a credential), what it makes of Azure's
content filter (a refused prompt, a cut completion, the annotations) and of its rate limits."""

from __future__ import annotations

import asyncio
import logging
import sys
import types
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from generated.config import UpstreamSettings
from handlers.config import ConfigError, parse
from handlers.inference.canonical import FinishReason, Request, Result, fold
from handlers.inference.formats.embeddings import Embed
from handlers.inference.upstreams.access_tokens import RENEW_BEFORE
from handlers.inference.upstreams.azure import AzureResponsesUpstream, AzureUpstream, resource_endpoint
from handlers.inference.upstreams.entra import EntraTokens
from handlers.inference.upstreams.failures import event_error
from handlers.inference.upstreams.registry import build_upstream
from tests.fake_azure import FakeCredential
from tests.fake_upstream import FakeUpstream
from tests.upstream_support import (
    HELLO,
    KEY,
    failure,
    fixture_fake,  # noqa: F401  (a fixture)
    fixture_server,  # noqa: F401  (a fixture)
)

DEPLOYMENT = "gpt-4o-mini prod"  # a deployment's name is the operator's: it may need quoting in a path
VERSION = "2025-04-01-preview"
TOKEN = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.entra-fake-token"


@pytest.fixture(name="azure")
def fixture_azure(fake: FakeUpstream) -> FakeUpstream:
    fake.azure_keys, fake.azure_tokens = {KEY}, {TOKEN}
    return fake


@pytest.fixture(name="made")
async def fixture_made() -> AsyncIterator[list[AzureUpstream]]:
    made: list[AzureUpstream] = []
    yield made
    for upstream in made:
        await upstream.aclose()


def make(made: list[AzureUpstream], fake: FakeUpstream, api: str = "chat", **options: Any) -> AzureUpstream:
    kind = AzureResponsesUpstream if api == "responses" else AzureUpstream
    options.setdefault("api_key", None if "entra" in options else KEY)
    upstream = kind("az", base_url=options.pop("base_url", fake.azure_url), **options)
    made.append(upstream)
    return upstream


async def answer(upstream: AzureUpstream, stream: bool, request: Request = HELLO) -> Result:
    if stream:
        return fold([event async for event in upstream.stream(request, DEPLOYMENT)])
    return await upstream.complete(request, DEPLOYMENT)


# --- where it calls, and with which key ------------------------------------------------------------------------------

QUOTED = "gpt-4o-mini%20prod"
PATHS = [  # api, api_version, the path Azure is called on, its query
    ("chat", None, "/openai/v1/chat/completions", {}),
    ("responses", None, "/openai/v1/responses", {}),
    ("chat", VERSION, f"/openai/deployments/{QUOTED}/chat/completions", {"api-version": VERSION}),
    ("responses", VERSION, "/openai/responses", {"api-version": VERSION}),
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("api", "version", "path", "query"), PATHS, ids=[f"{p[0]}-{p[1] or 'v1'}" for p in PATHS])
async def test_each_surface_is_called_on_azures_path_with_the_api_key(
        azure: FakeUpstream, made: list[AzureUpstream], api: str, version: str | None, path: str,
        query: dict[str, str], stream: bool) -> None:
    azure.script(text="Hello from Azure", usage=(9, 3, 0))
    result = await answer(make(made, azure, api, api_version=version), stream)
    got = azure.requests[-1]
    assert (got.path.replace(" ", "%20"), got.query) == (path, query)
    assert got.headers["api-key"] == KEY and "authorization" not in got.headers
    assert got.body["model"] == DEPLOYMENT  # the deployment: in the body for v1 and Responses, ignored beside a path
    assert (result.text(), result.finish_reason) == ("Hello from Azure", FinishReason.STOP)  # annotations read past
    assert (result.usage.input_tokens, result.usage.output_tokens) == (9, 3)


@pytest.mark.parametrize("given", ["https://acme.openai.azure.com", "https://acme.openai.azure.com/",
                                   "https://acme.openai.azure.com/openai", "https://acme.openai.azure.com/openai/v1/"])
def test_a_base_url_may_be_the_endpoint_or_end_in_openai_or_openai_v1(given: str) -> None:
    assert resource_endpoint(given) == "https://acme.openai.azure.com"


async def test_a_wrong_key_is_azures_401_and_its_message_never_quotes_the_key(
        azure: FakeUpstream, made: list[AzureUpstream]) -> None:
    err = await failure(make(made, azure, api_key="sk-wrong-key-42").complete(HELLO, DEPLOYMENT))
    assert (err.status, err.caller_fault, err.falls_back) == (401, False, True)
    assert "sk-wrong-key-42" not in err.message and "credentials" in err.message


async def test_the_fake_holds_the_gateway_to_azures_rules(azure: FakeUpstream) -> None:
    """A dated path without api-version is Azure's 404, a missing key its 401: the other tests' paths are checked."""
    async with httpx.AsyncClient(base_url=azure.azure_url, trust_env=False) as client:
        bare = await client.post("/openai/deployments/d/chat/completions", json={}, headers={"api-key": KEY})
        keyless = await client.post("/openai/v1/chat/completions", json={}, headers={"authorization": f"Bearer {KEY}"})
    assert (bare.status_code, bare.json()["error"]["message"]) == (404, "Resource not found")
    assert keyless.status_code == 401


async def test_embeddings_go_to_the_deployment(azure: FakeUpstream, made: list[AzureUpstream]) -> None:
    for version, path in ((None, "/openai/v1/embeddings"), (VERSION, f"/openai/deployments/{QUOTED}/embeddings")):
        vectors = await make(made, azure, api_version=version).embed(Embed(DEPLOYMENT, ["a b", "c"], {"input": ["a b", "c"]}), DEPLOYMENT)
        assert azure.requests[-1].path.replace(" ", "%20") == path
        assert azure.requests[-1].headers["api-key"] == KEY and len(vectors.data) == 2


# --- the content filter ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_prompt_the_filter_refuses_is_the_callers_400_naming_the_filter(
        azure: FakeUpstream, made: list[AzureUpstream], api: str, stream: bool) -> None:
    azure.script(status=400, filtered="violence")
    upstream = make(made, azure, api, api_version=VERSION)
    err = await failure(answer(upstream, stream))
    assert (err.kind, err.status, err.caller_fault, err.falls_back) == ("status", 400, True, False)
    assert err.message.startswith("Azure's content filter refused the prompt for violence (medium) (upstream az): ")
    assert "content management policy" in err.message and KEY not in err.message


def test_a_streams_content_filter_error_event_is_a_400() -> None:
    err = event_error("az", {"error": {"code": "content_filter", "message": "The response was filtered."}}, KEY,
                      AzureUpstream.error_statuses)
    assert (err.status, err.caller_fault, err.message) == (400, True, "The response was filtered.")


async def test_another_400_is_read_as_before(azure: FakeUpstream, made: list[AzureUpstream]) -> None:
    azure.script(status=400, error="max_tokens is too large: 999999.")
    err = await failure(make(made, azure).complete(HELLO, DEPLOYMENT))
    assert (err.status, err.message) == (400, "max_tokens is too large: 999999.")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_completion_the_filter_cut_ends_with_content_filter(
        azure: FakeUpstream, made: list[AzureUpstream], api: str, stream: bool) -> None:
    azure.script(text="Here is how", finish="content_filter", filtered="violence")
    result = await answer(make(made, azure, api), stream)
    assert (result.text(), result.finish_reason) == ("Here is how", FinishReason.CONTENT_FILTER)


@pytest.mark.parametrize("ms", [True, False], ids=["retry-after-ms", "retry-after"])
async def test_a_rate_limit_says_when_to_retry(azure: FakeUpstream, made: list[AzureUpstream], ms: bool) -> None:
    azure.script(status=429, headers={"retry-after-ms": "6500"} if ms else {"retry-after": "7"},
                 error="Requests to the ChatCompletions_Create Operation have exceeded token rate limit.")
    err = await failure(make(made, azure).complete(HELLO, DEPLOYMENT))
    assert (err.status, err.retryable, err.retry_after) == (429, True, 6.5 if ms else 7.0)


# --- Microsoft Entra ID ----------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


SCOPE = "https://cognitiveservices.azure.com/.default"


async def test_entra_tokens_are_sent_as_bearer_and_renewed_before_they_expire(
        azure: FakeUpstream, made: list[AzureUpstream]) -> None:
    clock = Clock()
    azure.azure_tokens = {TOKEN, "second-token"}
    credential = FakeCredential((TOKEN, clock.now + 3600), ("second-token", clock.now + 7200))
    upstream = make(made, azure, "responses", entra=EntraTokens("az", credential, SCOPE, clock))
    await asyncio.gather(*(upstream.complete(HELLO, DEPLOYMENT) for _ in range(5)))
    assert credential.scopes == [(SCOPE,)], "one token for every call while it is fresh"
    assert {r.headers["authorization"] for r in azure.requests} == {f"Bearer {TOKEN}"}
    assert all("api-key" not in r.headers for r in azure.requests)
    clock.now += 3600 - RENEW_BEFORE  # inside the renewal margin: the next call takes a new token
    await upstream.complete(HELLO, DEPLOYMENT)
    assert azure.requests[-1].headers["authorization"] == "Bearer second-token" and len(credential.scopes) == 2
    await upstream.aclose()
    assert credential.closed


async def test_no_entra_token_fails_over_and_names_no_secret(azure: FakeUpstream, made: list[AzureUpstream]) -> None:
    upstream = make(made, azure, entra=EntraTokens("az", FakeCredential(fail=True, secret=TOKEN), SCOPE))
    err = await failure(upstream.complete(HELLO, DEPLOYMENT))
    assert (err.status, err.falls_back, err.caller_fault) == (401, True, False)
    assert err.message == "upstream az could not get a Microsoft Entra ID token (RuntimeError)"
    assert azure.requests == [], "nothing is sent unsigned"


async def test_a_failed_renewal_keeps_a_token_still_valid(azure: FakeUpstream, made: list[AzureUpstream],
                                                          caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    credential = FakeCredential((TOKEN, clock.now + 3600), secret=TOKEN)
    upstream = make(made, azure, entra=EntraTokens("az", credential, SCOPE, clock))
    await upstream.complete(HELLO, DEPLOYMENT)
    clock.now += 3600 - 60  # renewal due, and the credential fails: the token has a minute left
    with caplog.at_level(logging.WARNING):
        await upstream.complete(HELLO, DEPLOYMENT)
    assert azure.requests[-1].headers["authorization"] == f"Bearer {TOKEN}"
    assert "renewing its Microsoft Entra ID token failed (RuntimeError)" in caplog.text and TOKEN not in caplog.text
    clock.now += 60  # expired, and still no new one
    err = await failure(upstream.complete(HELLO, DEPLOYMENT))
    assert err.status == 401 and len(azure.requests) == 2


# --- configuration ---------------------------------------------------------------------------------------------------


def config(upstream: dict[str, Any]) -> dict[str, Any]:
    return {"upstreams": {"az": upstream}, "models": [{"id": "m", "upstream": "az", "name": DEPLOYMENT}]}


@pytest.mark.parametrize(("upstream", "said"), [
    ({"kind": "openai", "base_url": "https://x/v1", "azure": {"api": "responses"}}, "upstreams.az.azure: only for"),
    ({"kind": "azure", "base_url": "https://x"}, "needs api_key_env (its key) or azure.entra"),
    ({"kind": "azure", "base_url": "https://x", "api_key_env": "K", "azure": {"entra": True}}, "not both"),
    ({"kind": "azure", "base_url": "https://x", "api_key_env": "K", "azure": {"api": "completions"}}, "azure.api"),
], ids=["azure-on-openai", "no-credential", "two-credentials", "unknown-api"])
def test_a_bad_azure_configuration_is_refused_naming_it(upstream: dict[str, Any], said: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(config(upstream), "test config")
    assert said in str(info.value)


def test_entra_without_azure_identity_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "azure.identity.aio", None)  # as if the extra were not installed
    settings = parse(config({"kind": "azure", "base_url": "https://x", "azure": {"entra": True}}), "t").upstreams
    with pytest.raises(ConfigError) as info:
        build_upstream("az", settings["az"])
    assert "upstreams.az.azure.entra" in str(info.value) and "pip install 'specway[azure]'" in str(info.value)


async def test_entra_takes_azure_identitys_default_credential(monkeypatch: pytest.MonkeyPatch,
                                                              azure: FakeUpstream) -> None:
    made: list[FakeCredential] = []

    def default_azure_credential() -> FakeCredential:
        made.append(FakeCredential((TOKEN, 4_102_444_800.0)))  # expires in 2100
        return made[-1]

    for name in ("azure", "azure.identity"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    aio = types.ModuleType("azure.identity.aio")
    aio.DefaultAzureCredential = default_azure_credential  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "azure.identity.aio", aio)
    entry = {"kind": "azure", "base_url": azure.azure_url + "/openai/v1",
             "azure": {"entra": True, "api": "responses", "entra_scope": "api://sovereign/.default"}}
    upstream = build_upstream("az", UpstreamSettings.model_validate(entry))
    assert isinstance(upstream, AzureResponsesUpstream)
    try:
        await upstream.complete(HELLO, DEPLOYMENT)
    finally:
        await upstream.aclose()
    assert (azure.requests[-1].path, azure.requests[-1].headers["authorization"]) == \
        ("/openai/v1/responses", f"Bearer {TOKEN}")
    assert made[0].scopes == [("api://sovereign/.default",)] and made[0].closed
