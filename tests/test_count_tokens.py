"""POST /v1/messages/count_tokens through the official Anthropic SDK: forwarded to an anthropic upstream with the
body and headers a message request carries; estimated, and marked so, on every other kind; scoped like inference,
never charged, one request against the key's requests per minute, and explained like any routed request."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from generated import models
from handlers.inference.formats import messages
from handlers.inference.upstreams import AnthropicUpstream
from handlers.inference.upstreams.base import UpstreamError
from handlers.serving import count_tokens
from handlers.store.base import Limits
from tests.conftest import Live, free_port, serve
from tests.fake_upstream import FakeUpstream, count_words

AN_SECRET = "sk-ant-upstream-count-5b1f0c"
PRICE = {"input": "3", "output": "15", "cached_input": "0.3", "cache_write": "3.75"}
SYSTEM = "You count tokens for a living."
MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "How many tokens is this sentence, roughly?"},
            {"role": "assistant", "content": "About ten."},
            {"role": "user", "content": [{"type": "text", "text": "And this one?", "cache_control": {"type": "ephemeral"}}]}]
TOOLS = [{"name": "get_weather", "description": "The weather in a city.",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
BETA = "token-counting-2024-11-01,prompt-caching-2024-07-31"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture(scope="module")
def live(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    timeouts = {"connect": 2, "read": 2, "total": 5}
    config = {
        "upstreams": {
            "an": {"kind": "anthropic", "base_url": fake.anthropic_url, "api_key_env": "SPECWAY_COUNT_AN_KEY",
                   "timeouts": timeouts},
            "oa": {"kind": "openai", "base_url": fake.url, "timeouts": timeouts},
            "echo": {"kind": "echo"},
            "dead": {"kind": "anthropic", "base_url": f"http://127.0.0.1:{free_port()}", "timeouts": timeouts},
        },
        "models": [
            {"id": "acme/an", "upstream": "an", "name": "claude-up", "price": PRICE, "aliases": ["claude"]},
            {"id": "acme/oa", "upstream": "oa", "name": "gpt-up", "price": PRICE},
            {"id": "acme/echo", "upstream": "echo", "name": "echo"},
            {"id": "acme/dead", "upstream": "dead", "name": "gone"},
        ],
        "policies": {"default": {"default_model": "acme/oa"},
                     "fallback": {"default_model": "acme/dead", "fallbacks": {"acme/dead": ["acme/an"]}}},
        "default_policy": "default",
        "cooldown": {"seconds": 0},
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECWAY_COUNT_AN_KEY", AN_SECRET)
        with serve(config, tmp_path_factory.mktemp("count")) as g:
            yield g


@pytest.fixture(autouse=True)
def _fresh(fake: FakeUpstream) -> None:
    fake.reset()


def client(live: Live, key: str | None = None) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=live.url, api_key=key or live.key, max_retries=0, timeout=10)


def explain(live: Live, decision: str, key: str | None = None) -> dict[str, Any]:
    r = httpx.get(f"{live.url}/v1/route/explain/{decision}", headers={"Authorization": f"Bearer {key or live.key}"})
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_an_anthropic_upstream_counts_what_a_message_request_would_send(live: Live, fake: FakeUpstream) -> None:
    sdk = client(live)
    raw = sdk.messages.with_raw_response.count_tokens(
        model="claude", system=SYSTEM, messages=MESSAGES, tools=TOOLS,  # type: ignore[arg-type]
        thinking={"type": "enabled", "budget_tokens": 2048}, extra_headers={"anthropic-beta": BETA})
    counted = raw.parse()
    assert isinstance(counted, anthropic.types.MessageTokensCount)

    [sent] = fake.requests
    assert sent.path == "/v1/messages/count_tokens"
    assert sent.headers["x-api-key"] == AN_SECRET and "authorization" not in sent.headers
    # The caller's anthropic-version (the SDK always sends one) and anthropic-beta, as a message request's.
    assert sent.headers["anthropic-beta"] == BETA
    assert sent.headers["anthropic-version"] == sdk.default_headers["anthropic-version"]
    body = sent.body
    assert body["model"] == "claude-up"  # the upstream's own name, never the alias
    assert "max_tokens" not in body and "stream" not in body
    assert body["tools"] == TOOLS and body["messages"][0]["content"] == MESSAGES[0]["content"]
    assert counted.input_tokens == count_words(body) > 0  # the upstream's count, passed on unchanged

    assert raw.headers["x-specway-model"] == "acme/an" and "x-specway-estimated" not in raw.headers
    record = explain(live, raw.headers["x-specway-decision-id"])
    assert (record["format"], record["outcome"], record["model"], record["requested_model"]) == (
        "messages", "ok", "acme/an", "claude")
    assert record["usage"]["input_tokens"] == counted.input_tokens and record["usage_estimated"] is False
    assert record["cost"] == "0" and record["stream"] is False
    assert [(a["model"], a["status"]) for a in record["attempts"]] == [("acme/an", 200)]
    assert record["explanation"].endswith("nothing was generated or charged.")


def test_the_beta_sdk_and_the_callers_anthropic_version_reach_the_upstream(live: Live, fake: FakeUpstream) -> None:
    counted = client(live).beta.messages.count_tokens(
        model="acme/an", messages=MESSAGES, betas=["token-efficient-tools-2025-02-19"],  # type: ignore[arg-type]
        extra_headers={"anthropic-version": "2023-06-01-test"})
    [sent] = fake.requests
    # The SDK adds its own token-counting beta to the caller's; all of them go on, as sent.
    assert "token-efficient-tools-2025-02-19" in sent.headers["anthropic-beta"].split(",")
    assert sent.headers["anthropic-version"] == "2023-06-01-test"
    assert counted.input_tokens == count_words(sent.body)


@pytest.mark.parametrize("model", ["acme/oa", "acme/echo"])
def test_other_upstreams_answer_the_gateways_estimate_and_say_so(live: Live, fake: FakeUpstream, model: str) -> None:
    raw = client(live).messages.with_raw_response.count_tokens(
        model=model, system=SYSTEM, messages=MESSAGES, tools=TOOLS)  # type: ignore[arg-type]
    counted = raw.parse()
    assert fake.requests == []  # no upstream call at all
    assert raw.headers["x-specway-estimated"] == "true" and raw.headers["x-specway-model"] == model
    req = messages.parse(models.MessagesRequest.model_validate(
        {"model": model, "system": SYSTEM, "messages": MESSAGES, "tools": TOOLS}))
    assert counted.input_tokens == count_tokens.estimate(req) > 0
    record = explain(live, raw.headers["x-specway-decision-id"])
    assert record["outcome"] == "ok" and record["usage_estimated"] is True and record["attempts"] == []
    assert record["usage"]["input_tokens"] == counted.input_tokens and record["cost"] == "0"


def test_without_a_model_routing_picks_it_as_for_messages(live: Live, fake: FakeUpstream) -> None:
    r = httpx.post(f"{live.url}/v1/messages/count_tokens", headers=live.headers,
                   json={"messages": MESSAGES, "max_tokens": 10, "stream": True})  # both ignored
    assert r.status_code == 200, r.text
    assert r.headers["x-specway-model"] == "acme/oa" and r.headers["x-specway-estimated"] == "true"
    assert set(r.json()) == {"input_tokens"}
    key = live.create_key(policy="fallback")
    r = httpx.post(f"{live.url}/v1/messages/count_tokens", headers={"x-api-key": key}, json={"messages": MESSAGES})
    assert r.status_code == 200, r.text
    assert r.headers["x-specway-model"] == "acme/an" and "x-specway-estimated" not in r.headers
    record = explain(live, r.headers["x-specway-decision-id"], key)
    assert [(a["model"], a["status"]) for a in record["attempts"]][-1] == ("acme/an", 200)
    assert record["attempts"][0]["model"] == "acme/dead" and record["attempts"][0]["error"].startswith("connect")


def test_a_key_without_the_inference_scope_is_refused(live: Live, fake: FakeUpstream) -> None:
    key = live.create_key(scopes=("models:read", "explain:read"))
    with pytest.raises(anthropic.PermissionDeniedError) as caught:
        client(live, key).messages.count_tokens(model="acme/an", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.status_code == 403 and "inference" in caught.value.message
    assert fake.requests == []


def test_counting_is_never_charged(live: Live, fake: FakeUpstream) -> None:
    for credit in (Decimal(10), Decimal(0)):  # an empty workspace may count too: nothing is reserved
        ws = live.run(live.gateway.store.create_workspace(f"count-{credit}", credit))
        key = live.create_key(workspace_id=ws.id, limits=Limits(budget=Decimal(0)) if not credit else Limits())
        for model in ("acme/an", "acme/oa"):
            assert client(live, key).messages.count_tokens(model=model, messages=MESSAGES).input_tokens > 0  # type: ignore[arg-type]
        info = httpx.get(f"{live.url}/v1/key", headers={"Authorization": f"Bearer {key}"}).json()
        assert Decimal(info["workspace"]["credit"]) == credit and Decimal(info["workspace"]["reserved"]) == 0
        assert Decimal(info["spend"]["total"]) == 0 and Decimal(info["spend"]["reserved"]) == 0


def test_a_count_is_one_request_per_minute_and_takes_no_tokens(live: Live) -> None:
    key = live.create_key(limits=Limits(rpm=2, tpm=1))  # one token a minute: a message could never pass
    c = client(live, key)
    for _ in range(2):
        raw = c.messages.with_raw_response.count_tokens(model="acme/oa", messages=MESSAGES)  # type: ignore[arg-type]
        assert raw.headers["x-ratelimit-limit-requests"] == "2"
    with pytest.raises(anthropic.RateLimitError) as caught:
        c.messages.count_tokens(model="acme/oa", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.body["error"]["code"] == "rate_limit_exceeded"  # type: ignore[index]
    assert caught.value.response.headers["x-specway-decision-id"]


@pytest.mark.parametrize(("status", "expected", "code"), [
    (400, anthropic.BadRequestError, "upstream_rejected_request"),
    (500, anthropic.InternalServerError, "upstream_error"),
    (401, anthropic.InternalServerError, "upstream_auth_failed"),
])
def test_upstream_failures_are_mapped_like_the_relay_maps_them(live: Live, fake: FakeUpstream, status: int,
                                                               expected: type[Exception], code: str) -> None:
    fake.script(status=status, error="no count for you")
    with pytest.raises(expected) as caught:
        client(live).messages.count_tokens(model="acme/an", messages=MESSAGES)  # type: ignore[arg-type]
    error = caught.value.body["error"]  # type: ignore[attr-defined]
    assert error["code"] == code and AN_SECRET not in str(error)
    record = explain(live, caught.value.response.headers["x-specway-decision-id"])  # type: ignore[attr-defined]
    assert record["outcome"] == code and record["attempts"][0]["status"] == status


def test_unknown_models_and_bad_bodies_are_refused_before_any_upstream(live: Live, fake: FakeUpstream) -> None:
    with pytest.raises(anthropic.NotFoundError):
        client(live).messages.count_tokens(model="acme/nope", messages=MESSAGES)  # type: ignore[arg-type]
    r = httpx.post(f"{live.url}/v1/messages/count_tokens", headers=live.headers, json={"messages": []})
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert fake.requests == []


# --- the transport alone -------------------------------------------------------------------------------------------


def _upstream(answer: dict[str, Any], seen: list[httpx.Request]) -> AnthropicUpstream:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=answer)

    return AnthropicUpstream("an", base_url="http://upstream", api_key="k", transport=httpx.MockTransport(handler))


async def test_the_count_body_is_the_message_body_without_what_only_generation_reads() -> None:
    seen: list[httpx.Request] = []
    upstream = _upstream({"input_tokens": 42}, seen)
    req = messages.parse(models.MessagesRequest.model_validate({
        "model": "acme/an", "system": SYSTEM, "messages": MESSAGES, "max_tokens": 5, "stream": True,
        "temperature": 0.5, "top_p": 0.9, "top_k": 3, "stop_sequences": ["END"], "metadata": {"user_id": "u"}}))
    try:
        assert await upstream.count_tokens(req, "claude-up") == 42
    finally:
        await upstream.aclose()
    [sent] = seen
    assert sent.url.path == "/v1/messages/count_tokens"
    body = orjson.loads(sent.content)
    assert body["model"] == "claude-up" and body["system"] == SYSTEM and len(body["messages"]) == 3
    assert not set(body) & {"max_tokens", "stream", "temperature", "top_p", "top_k", "stop_sequences", "metadata"}


@pytest.mark.parametrize("answer", [{}, {"input_tokens": "12"}, {"input_tokens": -1}, {"input_tokens": True}])
async def test_a_count_without_a_count_is_a_protocol_failure(answer: dict[str, Any]) -> None:
    upstream = _upstream(answer, [])
    req = messages.parse(models.MessagesRequest.model_validate({"messages": MESSAGES}))
    try:
        with pytest.raises(UpstreamError) as caught:
            await upstream.count_tokens(req, "claude-up")
    finally:
        await upstream.aclose()
    assert caught.value.kind == "protocol" and "input_tokens" in caught.value.message
