"""Azure OpenAI behind the gateway, through the openai and anthropic SDKs as callers: the gateway's own key on Azure's
paths (api-key, or an Entra ID token), and Azure's content filter as each caller's format says it: a refused prompt
is the caller's 400 naming the filter (and no fallback takes it elsewhere), a cut completion ends as a filtered one.
Every format x whole or streamed x Chat Completions (dated deployment path) or Responses (dated, Entra ID)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from handlers.inference.upstreams import azure
from tests.conformance_support import FORMATS, Clients, refusal, send
from tests.conftest import Live, serve
from tests.fake_azure import FakeCredential
from tests.fake_upstream import FakeUpstream

KEY = "az-sdk-key-93f1a7"  # the gateway's Azure key, in the environment the config names
TOKEN = "eyJ0eXAiOiJKV1QifQ.sdk-entra-token"
CHAT_VERSION, RESPONSES_VERSION = "2024-10-21", "2025-04-01-preview"
DEPLOYMENTS = {"acme/az": "gpt-4o-prod", "acme/azr": "o4-mini-prod"}
PATHS = {"acme/az": ("/openai/deployments/gpt-4o-prod/chat/completions", {"api-version": CHAT_VERSION}),
         "acme/azr": ("/openai/responses", {"api-version": RESPONSES_VERSION})}
CREDENTIALS = {"acme/az": ("api-key", KEY), "acme/azr": ("authorization", f"Bearer {TOKEN}")}
MODELS = list(DEPLOYMENTS)


@pytest.fixture(scope="module", name="fake")
def fixture_fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        fake.azure_keys, fake.azure_tokens = {KEY}, {TOKEN}
        yield fake


@pytest.fixture(scope="module", name="credential")
def fixture_credential() -> FakeCredential:
    return FakeCredential((TOKEN, 4_102_444_800.0))  # valid until 2100: one token for the module


@pytest.fixture(scope="module", name="live")
def fixture_live(fake: FakeUpstream, credential: FakeCredential, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[Live]:
    config = {
        "upstreams": {
            "az": {"kind": "azure", "base_url": fake.azure_url, "api_key_env": "SPECWAY_SDK_AZ_KEY",
                   "azure": {"api_version": CHAT_VERSION}},
            "azr": {"kind": "azure", "base_url": fake.azure_url + "/openai",
                    "azure": {"api": "responses", "api_version": RESPONSES_VERSION, "entra": True}},
            "oa": {"kind": "openai", "base_url": fake.url},
        },
        "models": [{"id": model, "upstream": model.removeprefix("acme/"), "name": name, "reasoning": True}
                   for model, name in DEPLOYMENTS.items()] + [{"id": "acme/oa", "upstream": "oa", "name": "gpt-else"}],
        # a prompt Azure's filter refused must not be taken to another provider
        "policies": {"default": {"default_model": "acme/az", "fallbacks": {m: ["acme/oa"] for m in MODELS}}},
        "default_policy": "default",
        "cooldown": {"seconds": 0},
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECWAY_SDK_AZ_KEY", KEY)
        mp.setattr(azure, "entra_credential", lambda where: credential)  # no Azure to sign in to here
        with serve(config, tmp_path_factory.mktemp("sdk-azure")) as g:
            yield g


@pytest.fixture(scope="module", name="clients")
def fixture_clients(live: Live) -> Clients:
    return Clients(
        openai.OpenAI(base_url=live.url + "/v1", api_key=live.key, max_retries=0, timeout=10,
                      http_client=openai.DefaultHttpxClient(trust_env=False)),
        anthropic.Anthropic(base_url=live.url, api_key=live.key, max_retries=0, timeout=10,
                            http_client=anthropic.DefaultHttpxClient(trust_env=False)),
    )


@pytest.fixture(autouse=True, name="_fresh")
def fixture_fresh(fake: FakeUpstream) -> None:
    fake.reset()


def ask(fmt: str, model: str) -> dict[str, Any]:
    if fmt == "responses":
        return {"model": model, "input": "Describe the fight scene.", "max_output_tokens": 60}
    return {"model": model, "messages": [{"role": "user", "content": "Describe the fight scene."}], "max_tokens": 60}


def only_azure_called(fake: FakeUpstream, model: str, stream: bool) -> None:
    """One call, to the model's deployment on its Azure path, with the gateway's own credential; none elsewhere."""
    assert len(fake.requests) == 1, [r.path for r in fake.requests]
    got = fake.requests[0]
    header, value = CREDENTIALS[model]
    assert (got.path, got.query) == PATHS[model]
    assert got.headers.get(header) == value
    assert "api-key" not in got.headers if header == "authorization" else "authorization" not in got.headers
    assert got.body["model"] == DEPLOYMENTS[model] and bool(got.body.get("stream")) is stream


CELLS = [pytest.param(fmt, model, stream, id=f"{fmt}-to-{model.removeprefix('acme/')}-{'stream' if stream else 'whole'}")
         for fmt in FORMATS for model in MODELS for stream in (False, True)]


@pytest.mark.parametrize(("fmt", "model", "stream"), CELLS)
def test_an_answer_comes_from_the_deployment_with_the_gateways_credential(
        clients: Clients, fake: FakeUpstream, fmt: str, model: str, stream: bool) -> None:
    fake.script(text="Two knights cross swords at dawn.")
    got = send(clients, fmt, stream, ask(fmt, model))
    assert got.text == "Two knights cross swords at dawn."
    assert got.stop == {"chat": "stop", "responses": "completed", "messages": "end_turn"}[fmt]
    only_azure_called(fake, model, stream)


@pytest.mark.parametrize(("fmt", "model", "stream"), CELLS)
def test_a_prompt_the_content_filter_refuses_is_the_callers_400_naming_the_filter(
        clients: Clients, fake: FakeUpstream, fmt: str, model: str, stream: bool) -> None:
    fake.script(status=400, filtered="violence")
    error = refusal(clients, fmt, stream, ask(fmt, model))
    assert error["code"] == "upstream_rejected_request", error
    assert "Azure's content filter refused the prompt for violence (medium)" in error["message"], error
    assert KEY not in error["message"] and TOKEN not in error["message"]
    only_azure_called(fake, model, stream)  # never the fallback


FILTERED = {"chat": "content_filter", "responses": "incomplete:content_filter", "messages": "refusal"}


@pytest.mark.parametrize(("fmt", "model", "stream"), CELLS)
def test_a_completion_the_filter_cut_ends_as_filtered_in_the_callers_words(
        clients: Clients, fake: FakeUpstream, fmt: str, model: str, stream: bool) -> None:
    fake.script(text="The first knight raises", finish="content_filter", filtered="violence")
    got = send(clients, fmt, stream, ask(fmt, model))
    assert (got.text, got.stop) == ("The first knight raises", FILTERED[fmt])
    only_azure_called(fake, model, stream)


def test_one_entra_token_serves_every_request_while_it_is_valid(clients: Clients, credential: FakeCredential) -> None:
    send(clients, "chat", False, ask("chat", "acme/azr"))
    assert credential.scopes == [("https://cognitiveservices.azure.com/.default",)]
