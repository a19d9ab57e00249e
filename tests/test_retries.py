"""Retries before the first byte (config `retries`): a refused connection, or a 429/5xx whose upstream named a wait
the gateway may wait out, is tried again after the candidates' first pass, with a jittered backoff, inside the
request's deadline; what no retry fixes is not retried; giving up after retrying says `x-should-retry: false`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from generated.config import RetrySettings
from handlers.inference.upstreams.base import UpstreamError
from handlers.serving.retries import Retries
from tests.conftest import Live, free_port, serve
from tests.fake_upstream import FakeUpstream

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def fakes() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    with FakeUpstream() as a, FakeUpstream() as b:
        yield a, b


def catalog(a: FakeUpstream, b: FakeUpstream, **extra: Any) -> dict[str, Any]:
    return {
        "upstreams": {"a": {"kind": "openai", "base_url": a.url}, "b": {"kind": "anthropic", "base_url": b.anthropic_url},
                      "closed": {"kind": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1"}},
        "models": [{"id": "acme/a", "upstream": "a", "name": "a-up"}, {"id": "acme/b", "upstream": "b", "name": "b-up"},
                   {"id": "acme/closed", "upstream": "closed", "name": "gone"}],
        "policies": {"default": {"default_model": "acme/a", "fallbacks": {"acme/a": ["acme/b"]}},
                     "alone": {"default_model": "acme/a"},
                     "spare": {"default_model": "acme/closed", "fallbacks": {"acme/closed": ["acme/a"]}}},
        "retries": {"backoff_seconds": 0.01, "max_backoff_seconds": 0.05},
        **extra,
    }


@pytest.fixture
def gw(fakes: tuple[FakeUpstream, FakeUpstream], tmp_path: Path) -> Iterator[Live]:
    for f in fakes:
        f.reset()
    with serve(catalog(*fakes), tmp_path) as g:
        yield g


def post(gw: Live, body: dict[str, Any], policy: str = "alone") -> httpx.Response:
    """A request by a key of `policy` (by default one without fallbacks)."""
    key = gw.keys.get(policy) or gw.keys.setdefault(policy, gw.create_key(policy=policy))
    return httpx.post(f"{gw.url}/v1/chat/completions", json={"messages": USER, **body},
                      headers={"Authorization": f"Bearer {key}"}, timeout=30)


def attempts(gw: Live, r: httpx.Response) -> list[tuple[str, int | None, int]]:
    record = httpx.get(f"{gw.url}/v1/route/explain/{r.headers['x-specway-decision-id']}", headers=gw.headers).json()
    return [(a["deployment"], a["status"], a["retry"]) for a in record["attempts"]]


@pytest.mark.parametrize("stream", [False, True])
def test_a_short_named_wait_is_waited_out_on_the_same_deployment(gw: Live, fakes: tuple[FakeUpstream, FakeUpstream],
                                                                 stream: bool) -> None:
    a, b = fakes
    a.script(status=429, error="slow down", headers={"retry-after-ms": "150"})
    b.script(status=529, error="overloaded", headers={"retry-after": "1"})
    r = post(gw, {"stream": stream}, policy="default")
    assert r.status_code == 200 and r.headers["x-specway-model"] == "acme/a", r.text
    # Both deployments named a wait within retries.max_wait_seconds (2 s): the retry goes to the first one free.
    assert attempts(gw, r) == [("a/a-up", 429, 0), ("b/b-up", 529, 0), ("a/a-up", 200, 1)]
    record = httpx.get(f"{gw.url}/v1/route/explain/{r.headers['x-specway-decision-id']}", headers=gw.headers).json()
    assert "the gateway retried 1 time." in record["explanation"]


def test_a_refused_connection_is_retried_and_giving_up_says_not_to_retry(gw: Live) -> None:
    r = post(gw, {"model": "acme/closed"})
    assert (r.status_code, r.json()["error"]["code"]) == (503, "upstream_unavailable")
    assert r.headers["x-should-retry"] == "false"
    assert attempts(gw, r) == [("closed/gone", None, 0), ("closed/gone", None, 1), ("closed/gone", None, 2)]


def test_what_no_retry_fixes_is_not_retried(gw: Live, fakes: tuple[FakeUpstream, FakeUpstream]) -> None:
    a, b = fakes
    a.script(status=500, error="crashed")  # no wait named: the SDK's to retry
    r = post(gw, {"model": "acme/a"})
    assert (r.status_code, r.json()["error"]["code"]) == (502, "upstream_error")
    assert "x-should-retry" not in r.headers and attempts(gw, r) == [("a/a-up", 500, 0)]
    a.script(status=429, error="later", headers={"retry-after": "30"})  # longer than max_wait_seconds
    r = post(gw, {"model": "acme/a"})
    assert (r.status_code, r.headers["retry-after"]) == (429, "30") and "x-should-retry" not in r.headers
    assert attempts(gw, r) == [("a/a-up", 429, 0)]
    b.script(status=400, error="bad request")
    r = post(gw, {"model": "acme/b"})
    assert r.status_code == 400 and attempts(gw, r) == [("b/b-up", 400, 0)]


def test_a_fallback_answers_before_any_retry(gw: Live) -> None:
    r = post(gw, {}, policy="spare")
    assert r.status_code == 200 and r.headers["x-specway-model"] == "acme/a"
    assert attempts(gw, r) == [("closed/gone", None, 0), ("a/a-up", 200, 0)]


def test_no_retry_starts_past_the_deadline(fakes: tuple[FakeUpstream, FakeUpstream], tmp_path: Path) -> None:
    a, _ = fakes
    a.reset()
    a.script(status=429, error="slow down", headers={"retry-after": "1"})
    with serve(catalog(*fakes, retries={"deadline_seconds": 0.5}), tmp_path) as g:
        r = post(g, {"model": "acme/a"})
        assert (r.status_code, r.headers["retry-after"]) == (429, "1")
        assert attempts(g, r) == [("a/a-up", 429, 0)]


def test_a_candidate_whose_breaker_tripped_is_not_retried(fakes: tuple[FakeUpstream, FakeUpstream],
                                                          tmp_path: Path) -> None:
    with serve(catalog(*fakes, cooldown={"failures": 1, "window_seconds": 60, "seconds": 30}), tmp_path) as g:
        r = post(g, {"model": "acme/closed"})
        assert r.status_code == 503 and attempts(g, r) == [("closed/gone", None, 0)]


def test_the_backoff_doubles_with_jitter_and_counts_the_retries() -> None:
    settings = RetrySettings(max_retries=3, backoff_seconds=0.1, max_backoff_seconds=0.3, deadline_seconds=60)
    retries = Retries(settings, started=time.perf_counter())
    pauses = [retries.pause([0.0]) for _ in range(4)]
    assert pauses[3] is None and retries.round == 3
    for pause, full in zip(pauses[:3], (0.1, 0.2, 0.3), strict=True):
        assert pause is not None and full / 2 <= pause <= full
    named = Retries(settings, started=time.perf_counter())
    assert named.pause([1.5, 0.8]) == 0.8  # the soonest named wait, when it is longer than the backoff
    assert named.pause([]) is None and named.round == 1  # nothing worth a retry: none counted
    late = Retries(settings, started=time.perf_counter() - 59.95)
    assert late.pause([0.0]) is None  # its backoff would end past the deadline
    refused, wait, long = (UpstreamError("connect", "x"), UpstreamError("status", "x", status=503, retry_after=2),
                           UpstreamError("status", "x", status=429, retry_after=2.5))
    assert [named.worth(e) for e in (refused, wait, long, UpstreamError("timeout", "x"))] == [True, True, False, False]


def test_the_sdk_does_not_retry_what_the_gateway_gave_up_on(gw: Live, fakes: tuple[FakeUpstream, FakeUpstream]
                                                            ) -> None:
    a, _ = fakes
    for _ in range(3):  # the first try and both retries
        a.script(status=429, error="slow down", headers={"retry-after-ms": "50"})
    seen: list[int] = []
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=gw.create_key(policy="alone"), timeout=20,
                           http_client=openai.DefaultHttpxClient(
                               event_hooks={"response": [lambda r: seen.append(r.status_code)]}, trust_env=False))
    with pytest.raises(openai.RateLimitError) as limited:  # the SDK's default max_retries=2 are not used
        client.chat.completions.create(model="acme/a", messages=USER)  # type: ignore[arg-type]
    assert limited.value.response.headers["x-should-retry"] == "false"
    assert seen == [429] and len(a.requests) == 3
