"""Fallback on an upstream's own faults before the first byte reaches the caller: an answer that cannot be read
(malformed JSON, a body without choices/content/output) and a rejected credential (401/403). Each attempt shows in
the decision record; a 401/403 never reaches the caller as its own auth failure. Repeated, a 401 cools the upstream
down as a whole (its key is refused for every model), a 403 that one deployment (the key may not use that model)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Live, serve
from tests.fake_upstream import FakeUpstream, Reply

SECRET = "sk-first-SECRET-0123456789"
KINDS = ["openai", "anthropic", "responses"]
USER = [{"role": "user", "content": "hi"}]
# What each kind's reader says of a 200 without the part an answer must have.
WITHOUT = {"openai": "answered without choices", "anthropic": "answered without content",
           "responses": "answered without output"}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


def catalog(fake: FakeUpstream) -> dict[str, Any]:
    """One failing upstream of each kind (with its own key), each falling back to `second` under the default policy;
    the policy `alone` has no fallbacks."""
    base = {"openai": fake.url, "anthropic": fake.anthropic_url, "responses": fake.url}
    upstreams: dict[str, Any] = {f"first-{k}": {"kind": k, "base_url": base[k], "api_key_env": "SPECWAY_TEST_FIRST_KEY"}
                                 for k in KINDS}
    upstreams["second"] = {"kind": "openai", "base_url": fake.url}
    config = {
        "upstreams": upstreams,
        "models": [*({"id": f"acme/first-{k}", "upstream": f"first-{k}", "name": "m1"} for k in KINDS),
                   {"id": "acme/second", "upstream": "second", "name": "m2"}],
        "policies": {"default": {"default_model": "acme/second",
                                 "fallbacks": {f"acme/first-{k}": ["acme/second"] for k in KINDS}},
                     "alone": {"default_model": "acme/second"}},
    }
    return config


@pytest.fixture(scope="module")
def gw(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    mp = pytest.MonkeyPatch()
    mp.setenv("SPECWAY_TEST_FIRST_KEY", SECRET)
    try:
        with serve(catalog(fake), tmp_path_factory.mktemp("fallback")) as g:
            yield g
    finally:
        mp.undo()


@pytest.fixture(autouse=True)
def fresh(fake: FakeUpstream) -> None:
    fake.reset()


def ask(gw: Live, kind: str, stream: bool, key: str | None = None) -> httpx.Response:
    body = {"model": f"acme/first-{kind}", "messages": USER, "stream": stream}
    return httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key or gw.key}"},
                      timeout=30)


def record(gw: Live, response: httpx.Response) -> dict[str, Any]:
    decision = response.headers["x-specway-decision-id"]
    r = httpx.get(f"{gw.url}/v1/route/explain/{decision}", headers=gw.headers, timeout=10)
    assert r.status_code == 200, r.text
    return dict(r.json())


def answered_by_second(r: httpx.Response, stream: bool) -> None:
    assert r.status_code == 200, r.text
    assert r.headers["x-specway-model"] == "acme/second"
    if stream:
        assert r.headers["content-type"].startswith("text/event-stream")
        assert "data: [DONE]" in r.text and '"error"' not in r.text and '"content":"fake"' in r.text
    else:
        assert r.json()["choices"][0]["message"]["content"] == "Hello from fake"


FAULTS = {
    "malformed JSON": (Reply(malformed=True), None, "protocol: upstream first-{kind} sent malformed JSON"),
    "401": (Reply(status=401, error=f"Incorrect API key provided: {SECRET}"), 401,
            "status: upstream first-{kind} rejected the gateway's credentials"),
    "403": (Reply(status=403, error=f"key {SECRET} may not use m1"), 403,
            "status: upstream first-{kind} rejected the gateway's credentials"),
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("kind", KINDS)
def test_a_fault_of_the_first_upstream_falls_back_to_the_next(gw: Live, fake: FakeUpstream, kind: str, fault: str,
                                                               stream: bool) -> None:
    reply, status, error = FAULTS[fault]
    fake.script(reply)
    r = ask(gw, kind, stream)
    answered_by_second(r, stream)
    assert [q.body["model"] for q in fake.requests] == ["m1", "m2"]
    attempts = record(gw, r)["attempts"]
    assert [{k: a[k] for k in ("model", "upstream", "status", "error")} for a in attempts] == [
        {"model": f"acme/first-{kind}", "upstream": f"first-{kind}", "status": status,
         "error": error.format(kind=kind)},
        {"model": "acme/second", "upstream": "second", "status": 200, "error": None},
    ]
    assert SECRET not in r.text and SECRET not in str(attempts)


@pytest.mark.parametrize("kind", KINDS)
def test_a_whole_answer_without_its_content_falls_back(gw: Live, fake: FakeUpstream, kind: str) -> None:
    fake.script(body={"id": "x", "model": "m1", "usage": {}})
    r = ask(gw, kind, False)
    answered_by_second(r, False)
    first = record(gw, r)["attempts"][0]
    assert (first["status"], first["error"]) == (None, f"protocol: upstream first-{kind} {WITHOUT[kind]}")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status", [401, 403])
def test_a_rejected_credential_is_never_the_callers_auth_failure_and_trips_a_breaker(
        fake: FakeUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: int, stream: bool) -> None:
    """With nothing to fall back to, the caller gets 502 upstream_auth_failed (its own key was fine) and is told a
    retry cannot help. At the breaker's threshold (3) a 401 cools the whole upstream, a 403 only that deployment."""
    monkeypatch.setenv("SPECWAY_TEST_FIRST_KEY", SECRET)
    with serve(catalog(fake), tmp_path) as gw:  # its own gateway: the breaker it trips must not outlive the test
        key = gw.create_key(policy="alone")
        for _ in range(3):
            fake.script(status=status, error=f"Incorrect API key provided: {SECRET}")
            r = ask(gw, "openai", stream, key)
            assert r.status_code == 502, r.text
            assert r.json()["error"]["code"] == "upstream_auth_failed" and SECRET not in r.text
            assert r.headers["x-should-retry"] == "false"
            decision = record(gw, r)
            assert decision["candidates"][0]["verdict"] == "chosen"
            assert [a["status"] for a in decision["attempts"]] == [status]
        r = ask(gw, "openai", stream, key)
        assert (r.status_code, r.json()["error"]["code"]) == (503, "no_upstream_available")
        whose = "upstream first-openai" if status == 401 else "deployment first-openai/m1"
        assert f"{whose} is in cooldown until" in r.text and SECRET not in r.text
        cooldowns = gw.gateway.cooldowns
        assert (cooldowns.remaining("upstream:first-openai") > 0) == (status == 401)
        assert (cooldowns.remaining("deployment:first-openai/m1") > 0) == (status == 403)
        assert len(fake.requests) == 3


def test_an_unreadable_answer_with_nothing_to_fall_back_to_is_502(gw: Live, fake: FakeUpstream) -> None:
    key = gw.create_key(policy="alone")
    fake.script(malformed=True)
    r = ask(gw, "anthropic", False, key)
    assert (r.status_code, r.json()["error"]["code"]) == (502, "upstream_error")
    assert "malformed JSON" in r.json()["error"]["message"]


def test_the_callers_own_fault_does_not_fall_back(gw: Live, fake: FakeUpstream) -> None:
    fake.script(status=400, error="max_tokens: too large")
    r = ask(gw, "openai", False)
    assert (r.status_code, r.json()["error"]["code"]) == (400, "upstream_rejected_request")
    assert [q.body["model"] for q in fake.requests] == ["m1"]
