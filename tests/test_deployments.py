"""Deployments (a model name on an upstream): health, cooldowns and the circuit breaker are per deployment, through
the official OpenAI SDK with its default retries.

The blast radius this guards against: with one openai upstream holding two models, one SDK call (max_retries=2) to
a model whose upstream answers 500 made three failed attempts, the breaker's threshold, and the next request to the
healthy model on the same upstream was refused as "upstream openai is in cooldown"; 429s did the same, and
embeddings on that upstream were blocked too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import Live, free_port, serve
from tests.fake_upstream import FakeUpstream, Reply

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


def catalog(fake: FakeUpstream, **extra: Any) -> dict[str, Any]:
    return {
        "upstreams": {"openai": {"kind": "openai", "base_url": fake.url}},
        "models": [
            {"id": "acme/bad", "upstream": "openai", "name": "bad-up"},
            {"id": "acme/good", "upstream": "openai", "name": "good-up"},
            {"id": "acme/embed", "upstream": "openai", "name": "embed-up", "embeddings": True},
        ],
        **extra,
    }


@pytest.fixture
def gw(fake: FakeUpstream, tmp_path: Path) -> Iterator[Live]:
    fake.reset()
    with serve(catalog(fake), tmp_path) as g:  # the default breaker: 3 failures within 60 s, 30 s of cooldown
        yield g


def by_model(replies: dict[str, Callable[[], Reply]]) -> Callable[[str, Any], Reply]:
    """A responder that answers each upstream model name its own way (the default answer for the others)."""
    return lambda _dialect, body: replies.get((body or {}).get("model"), Reply)()


def sdk(gw: Live, seen: list[int] | None = None, **options: Any) -> openai.OpenAI:
    hooks = {"response": [lambda r: seen.append(r.status_code)]} if seen is not None else {}
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=gw.key, timeout=20,
                         http_client=openai.DefaultHttpxClient(event_hooks=hooks, trust_env=False), **options)


def explain(gw: Live, decision: str) -> dict[str, Any]:
    return httpx.get(f"{gw.url}/v1/route/explain/{decision}", headers=gw.headers).json()


def upstream_models(fake: FakeUpstream) -> list[str]:
    return [r.body["model"] for r in fake.requests]


def test_a_failing_model_never_takes_its_neighbours_down(gw: Live, fake: FakeUpstream) -> None:
    fake.responder = by_model({"bad-up": lambda: Reply(status=500, error="the model crashed")})
    seen: list[int] = []
    client = sdk(gw, seen)  # the SDK's default max_retries=2: three attempts, the breaker's threshold
    with pytest.raises(openai.InternalServerError) as failed:
        client.chat.completions.create(model="acme/bad", messages=USER)  # type: ignore[arg-type]
    assert (failed.value.status_code, seen) == (502, [502, 502, 502])
    assert upstream_models(fake) == ["bad-up"] * 3

    once = client.with_options(max_retries=0)  # an SDK retry would wait out a cooldown and hide it
    reply = once.chat.completions.create(model="acme/good", messages=USER)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "Hello from fake"
    vectors = once.embeddings.create(model="acme/embed", input="hello there")
    assert len(vectors.data) == 1
    assert upstream_models(fake) == ["bad-up"] * 3 + ["good-up", "embed-up"]

    with pytest.raises(openai.APIStatusError) as cooled:
        once.chat.completions.create(model="acme/bad", messages=USER)  # type: ignore[arg-type]
    error = cooled.value.response.json()["error"]
    assert (cooled.value.status_code, error["code"]) == (503, "no_upstream_available")
    assert "deployment openai/bad-up is in cooldown until " in error["message"]
    assert "3 failures within 60 s, the last: the model crashed" in error["message"]
    assert 25 <= int(cooled.value.response.headers["retry-after"]) <= 30
    assert len(fake.requests) == 5  # the cooled deployment was not asked again
    decision = explain(gw, cooled.value.response.headers["x-specway-decision-id"])
    assert decision["candidates"][0]["verdict"] == "skipped"
    assert decision["candidates"][0]["reason"].startswith("deployment openai/bad-up is in cooldown until ")


def test_a_rate_limited_model_reaches_the_caller_as_429_and_spares_its_neighbours(gw: Live,
                                                                                  fake: FakeUpstream) -> None:
    fake.responder = by_model({"bad-up": lambda: Reply(status=429, error="Rate limit reached for requests",
                                                       headers={"retry-after": "20"})})
    client = sdk(gw, max_retries=0)
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="acme/bad", messages=USER)  # type: ignore[arg-type]
    error = limited.value.response.json()["error"]
    assert error["code"] == "upstream_rate_limited" and "Rate limit reached for requests" in error["message"]
    assert (limited.value.response.headers["retry-after"], limited.value.response.headers["retry-after-ms"]) == (
        "20", "20000")

    assert client.chat.completions.create(model="acme/good", messages=USER).choices  # type: ignore[arg-type]
    assert client.embeddings.create(model="acme/embed", input="hello").data

    # One 429 with a wait cools that deployment for the wait, at once: the gateway answers it without asking.
    with pytest.raises(openai.RateLimitError) as waiting:
        client.chat.completions.create(model="acme/bad", messages=USER)  # type: ignore[arg-type]
    error = waiting.value.response.json()["error"]
    assert error["code"] == "upstream_rate_limited"
    assert "deployment openai/bad-up is rate limited until " in error["message"]
    assert "HTTP 429: its upstream asked to wait 20 s" in error["message"]
    assert 18 <= int(waiting.value.response.headers["retry-after"]) <= 20
    assert upstream_models(fake) == ["bad-up", "good-up", "embed-up"]


def test_the_upstreams_wait_reaches_the_sdk_as_a_429_it_retries(fake: FakeUpstream, tmp_path: Path) -> None:
    """A wait longer than the gateway waits out itself (retries.max_wait_seconds) is the SDK's to wait out."""
    fake.reset()
    fake.script(status=429, error="slow down", headers={"retry-after-ms": "300"})
    seen: list[int] = []
    with serve(catalog(fake, retries={"max_wait_seconds": 0.1}), tmp_path) as g:
        reply = sdk(g, seen).chat.completions.create(model="acme/good", messages=USER)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "Hello from fake"
    assert seen == [429, 200] and upstream_models(fake) == ["good-up", "good-up"]


def test_a_rate_limit_reset_header_is_the_wait_when_no_retry_after_is_given(gw: Live, fake: FakeUpstream) -> None:
    fake.script(status=429, error="tokens", headers={"x-ratelimit-remaining-requests": "12",
                                                     "x-ratelimit-reset-requests": "2s",
                                                     "x-ratelimit-remaining-tokens": "0",
                                                     "x-ratelimit-reset-tokens": "6m0s"})
    with pytest.raises(openai.RateLimitError) as limited:
        sdk(gw, max_retries=0).chat.completions.create(model="acme/good", messages=USER)  # type: ignore[arg-type]
    assert limited.value.response.headers["retry-after"] == "60"  # 6 minutes, told as the most SDKs wait
    assert 355 <= gw.gateway.cooldowns.remaining("deployment:openai/good-up") <= 360


def test_a_refused_connection_cools_the_whole_upstream(fake: FakeUpstream, tmp_path: Path) -> None:
    cfg = catalog(fake, cooldown={"failures": 2, "window_seconds": 60, "seconds": 30})
    cfg["upstreams"]["closed"] = {"kind": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1"}
    cfg["models"] += [{"id": "acme/one", "upstream": "closed", "name": "one"},
                      {"id": "acme/two", "upstream": "closed", "name": "two"}]
    with serve(cfg, tmp_path) as g:
        client = sdk(g, max_retries=0)
        with pytest.raises(openai.APIStatusError) as unreachable:
            client.chat.completions.create(model="acme/one", messages=USER)  # type: ignore[arg-type]
        assert unreachable.value.response.json()["error"]["code"] == "upstream_unavailable"
        assert unreachable.value.response.headers["x-should-retry"] == "false"  # the gateway retried it already
        decision = explain(g, unreachable.value.response.headers["x-specway-decision-id"])
        assert [(a["deployment"], a["retry"]) for a in decision["attempts"]] == [("closed/one", 0), ("closed/one", 1)]
        # Two refused connections: the breaker (2) of the whole upstream tripped, so its other model is skipped too.
        with pytest.raises(openai.APIStatusError) as cooled:
            client.chat.completions.create(model="acme/two", messages=USER)  # type: ignore[arg-type]
        assert "upstream closed is in cooldown until" in cooled.value.response.json()["error"]["message"]
        assert g.gateway.cooldowns.remaining("upstream:closed") > 0
        assert g.gateway.cooldowns.remaining("upstream:openai") == 0
        assert client.chat.completions.create(model="acme/good", messages=USER).choices  # type: ignore[arg-type]


def test_a_candidate_that_can_never_fit_says_not_to_retry(fake: FakeUpstream, tmp_path: Path) -> None:
    cfg = catalog(fake)
    cfg["models"][1]["context_window"] = 10
    with serve(cfg, tmp_path) as g:
        r = httpx.post(f"{g.url}/v1/chat/completions", headers=g.headers,
                       json={"model": "acme/good", "messages": USER, "max_tokens": 100})
    assert (r.status_code, r.json()["error"]["code"]) == (503, "no_upstream_available")
    assert r.headers["x-should-retry"] == "false" and "retry-after" not in r.headers
