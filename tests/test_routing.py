"""Routing through real upstreams: policies, effort tiers, aliases, fallbacks, cooldowns, and explain."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from generated.config import PolicySettings, ThinkingBudget
from handlers.inference.canonical import Message, Request, Text
from handlers.inference.cooldown import Cooldowns, deployment_key, upstream_key
from handlers.inference.routing import normalise_effort
from handlers.store import open_store
from tests.conftest import Live, free_port, serve
from tests.fake_upstream import FakeUpstream

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def fakes() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    with FakeUpstream() as a, FakeUpstream() as b:
        yield a, b


def config(a: FakeUpstream, b: FakeUpstream, **extra: Any) -> dict[str, Any]:
    return {
        "upstreams": {
            "a": {"kind": "openai", "base_url": a.url, "timeouts": {"connect": 1, "read": 0.5, "total": 3}},
            "b": {"kind": "anthropic", "base_url": b.anthropic_url},
        },
        "models": [
            {"id": "acme/fast", "upstream": "a", "name": "fast-up", "aliases": ["fast"]},
            {"id": "acme/strong", "upstream": "b", "name": "strong-up", "aliases": ["strong"]},
        ],
        "policies": {"default": {"default_model": "fast", "effort": {"low": ["acme/fast"], "high": ["acme/strong"]},
                                 "fallbacks": {"acme/fast": ["acme/strong"]}}},
        **extra,
    }


@pytest.fixture
def gw(fakes: tuple[FakeUpstream, FakeUpstream], tmp_path: Path) -> Iterator[Live]:
    a, b = fakes
    a.reset()
    b.reset()
    with serve(config(a, b, cooldown={"failures": 2, "window_seconds": 30, "seconds": 1}), tmp_path) as g:
        yield g


def post(gw: Live, path: str, body: dict[str, Any], key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key or gw.key}"}
    return httpx.post(f"{gw.url}{path}", json=body, headers=headers, timeout=10)


def explain(gw: Live, response: httpx.Response, key: str | None = None) -> httpx.Response:
    decision = response.headers["x-specway-decision-id"]
    return httpx.get(f"{gw.url}/v1/route/explain/{decision}", headers={"Authorization": f"Bearer {key or gw.key}"})


def test_effort_is_normalised_from_every_format() -> None:
    policy = PolicySettings(thinking_budget=ThinkingBudget(low=1000, medium=5000))
    req = Request(format="messages", messages=[Message("user", [Text("x")])])
    assert normalise_effort(Request(format="chat", messages=[], effort="HIGH"), policy) == "high"
    assert [normalise_effort(Request("messages", [], thinking_budget=n), policy) for n in (500, 3000, 9000)] == [
        "low", "medium", "high"]
    assert normalise_effort(req, policy) is None


def test_no_model_follows_the_policy_default(gw: Live, fakes: tuple[FakeUpstream, FakeUpstream]) -> None:
    r = post(gw, "/v1/chat/completions", {"messages": USER})
    assert r.json()["model"] == "acme/fast" and r.headers["x-specway-model"] == "acme/fast"
    assert fakes[0].requests[-1].body["model"] == "fast-up"
    record = explain(gw, r).json()
    assert record["requested_model"] is None and "default model acme/fast" in record["explanation"]


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {"messages": USER, "reasoning_effort": "{}"}),
    ("/v1/responses", {"input": "hi", "reasoning": {"effort": "{}"}}),
    ("/v1/messages", {"messages": USER, "max_tokens": 64, "thinking": "{}"}),
    ("/v1/messages", {"messages": USER, "max_tokens": 64, "thinking": {"effort": "{}"}}),
])
@pytest.mark.parametrize(("effort", "model"), [("low", "acme/fast"), ("high", "acme/strong")])
def test_effort_picks_the_tier_from_each_format(gw: Live, path: str, body: dict[str, Any], effort: str,
                                                 model: str) -> None:
    body = {k: (v.replace("{}", effort) if isinstance(v, str) else
                {kk: vv.replace("{}", effort) for kk, vv in v.items()} if isinstance(v, dict) else v)
            for k, v in body.items()}
    r = post(gw, path, body)
    assert r.status_code == 200, r.text
    assert r.json()["model"] == model
    assert explain(gw, r).json()["effort"] == effort


def test_anthropic_thinking_budget_maps_to_a_tier(gw: Live) -> None:
    body = {"messages": USER, "max_tokens": 64, "thinking": {"type": "enabled", "budget_tokens": 20000}}
    r = post(gw, "/v1/messages", body)
    assert r.json()["model"] == "acme/strong"
    assert explain(gw, r).json()["effort"] == "high"


def test_an_alias_resolves(gw: Live, fakes: tuple[FakeUpstream, FakeUpstream]) -> None:
    r = post(gw, "/v1/chat/completions", {"messages": USER, "model": "strong"})
    assert r.json()["model"] == "acme/strong"
    assert fakes[1].requests[-1].body["model"] == "strong-up"
    assert "an alias of acme/strong" in explain(gw, r).json()["explanation"]


def test_a_refused_model_is_a_decision_too(gw: Live) -> None:
    limited = gw.create_key(models=("fast",))
    unknown = post(gw, "/v1/chat/completions", {"messages": USER, "model": "nope"}, key=limited)
    denied = post(gw, "/v1/chat/completions", {"messages": USER, "model": "strong"}, key=limited)
    assert (unknown.status_code, denied.status_code) == (404, 403)
    assert "'strong'" in denied.json()["error"]["message"] and denied.json()["error"]["param"] == "model"
    for r, code in ((unknown, "model_not_found"), (denied, "model_not_allowed")):
        record = explain(gw, r).json()
        assert (record["outcome"], record["candidates"], record["attempts"], record["model"]) == (code, [], [], None)
        assert record["explanation"] == f"Routing refused the request: {r.json()['error']['message']}"


@pytest.mark.parametrize("fault", [{"status": 500}, {"status": 429}, {"delay": 1.5}])
@pytest.mark.parametrize("stream", [False, True])
def test_a_failure_before_the_first_byte_falls_back(gw: Live, fakes: tuple[FakeUpstream, FakeUpstream],
                                                     fault: dict[str, Any], stream: bool) -> None:
    fakes[0].script(**fault)
    r = post(gw, "/v1/chat/completions", {"messages": USER, "stream": stream})
    assert r.status_code == 200, r.text
    assert r.headers["x-specway-model"] == "acme/strong"
    record = explain(gw, r).json()
    attempts = [(a["model"], a["status"]) for a in record["attempts"]]
    expected_status = fault.get("status")
    assert attempts == [("acme/fast", expected_status), ("acme/strong", 200)]
    assert record["attempts"][0]["error"]
    assert "acme/fast failed before answering, so the fallback acme/strong answered" in record["explanation"]


def test_a_failing_upstream_cools_down_and_recovers(gw: Live, fakes: tuple[FakeUpstream, FakeUpstream]) -> None:
    a, _ = fakes
    for _ in range(2):
        a.script(status=503)
        assert post(gw, "/v1/chat/completions", {"messages": USER}).headers["x-specway-model"] == "acme/strong"
    seen = len(a.requests)
    r = post(gw, "/v1/chat/completions", {"messages": USER})
    assert r.headers["x-specway-model"] == "acme/strong" and len(a.requests) == seen  # a was not even tried
    record = explain(gw, r).json()
    assert record["candidates"][0]["verdict"] == "skipped" and "cooldown" in record["candidates"][0]["reason"]
    assert "It was skipped (deployment a/fast-up is in cooldown until " in record["explanation"]
    time.sleep(1.2)
    r = post(gw, "/v1/chat/completions", {"messages": USER})
    assert r.headers["x-specway-model"] == "acme/fast" and len(a.requests) == seen + 1


async def test_cooldown_counts_failures_in_a_window() -> None:
    now = [0.0]
    cd = Cooldowns(failures=2, window=10, seconds=5, clock=lambda: now[0], wall=lambda: 1_000_000 + now[0])
    assert not await cd.failed("u", "x")
    now[0] = 11  # the first failure left the window
    assert not await cd.failed("u", "x") and cd.remaining("u") == 0
    tripped = await cd.failed("u", "HTTP 500")
    assert tripped is not None and cd.remaining("u") == 5
    assert (tripped.state, tripped.why, tripped.until_text()) == (
        "open", "2 failures within 10 s, the last: HTTP 500", "1970-01-12T13:46:56Z")
    now[0] = 16.5
    assert cd.remaining("u") == 0 and cd.state("u") is None


async def test_a_wait_cools_at_once_and_never_shortens_a_cooldown() -> None:
    now = [0.0]
    cd = Cooldowns(failures=3, window=10, seconds=30, clock=lambda: now[0])
    d = deployment_key("up/m")
    waited = await cd.cool(d, 2.5, "HTTP 429")
    assert waited is not None and waited.state == "cooling" and cd.remaining(d) == 2.5
    assert await cd.cool(d, 1, "shorter") is waited
    for _ in range(3):
        opened = await cd.failed(d, "HTTP 500")
    assert opened is not None and cd.state(d) == opened and cd.remaining(d) == 30
    assert cd.blocking("up", "up/m") == (
        f"deployment up/m is in cooldown until {opened.until_text()} (3 failures within 10 s, the last: HTTP 500)",
        opened)
    assert cd.blocking("up", "up/other") is None  # its neighbour on the same upstream is not touched
    await cd.failed(upstream_key("up"), "refused")
    whole = await cd.failed(upstream_key("up"), "refused")
    assert whole is None and cd.blocking("up", "up/other") is None  # under the threshold of 3
    whole = await cd.failed(upstream_key("up"), "refused")
    assert whole is not None and cd.blocking("up", "up/other") == (
        f"upstream up is in cooldown until {whole.until_text()} (3 failures within 10 s, the last: refused)", whole)
    assert await Cooldowns(seconds=0).cool(d, 5, "off") is None  # seconds: 0 turns every cooldown off


def test_explain_is_private_to_the_workspace(gw: Live) -> None:
    r = post(gw, "/v1/chat/completions", {"messages": USER})
    outsider = gw.create_key(workspace_id=gw.new_workspace("outsider"))
    assert explain(gw, r).status_code == 200
    hidden = explain(gw, r, key=outsider)
    unknown = httpx.get(f"{gw.url}/v1/route/explain/{'0' * 32}", headers={"Authorization": f"Bearer {outsider}"})
    assert hidden.status_code == unknown.status_code == 404
    assert hidden.json()["error"]["code"] == unknown.json()["error"]["code"] == "decision_not_found"
    same_workspace = gw.create_key()
    assert explain(gw, r, key=same_workspace).status_code == 200


def test_explain_reads_a_streamed_request_once_it_ended(gw: Live) -> None:
    r = post(gw, "/v1/messages", {"messages": USER, "max_tokens": 32, "stream": True})
    assert r.status_code == 200 and b"message_stop" in r.content
    record = explain(gw, r).json()
    assert record["stream"] is True and record["outcome"] == "ok" and record["usage"]["output_tokens"] > 0
    # The record read back is this request's: the id the answer carried, in its header and in its message id.
    assert record["id"] == r.headers["x-specway-decision-id"]
    assert f'"id":"msg_{record["id"]}"' in r.text.replace(" ", "")
    prefixed = httpx.get(f"{gw.url}/v1/route/explain/msg_{record['id']}", headers=gw.headers)
    assert prefixed.json()["id"] == record["id"]


def test_decision_records_survive_a_graceful_shutdown(fakes: tuple[FakeUpstream, FakeUpstream],
                                                      tmp_path: Path) -> None:
    a, b = fakes
    with serve(config(a, b), tmp_path) as g:
        async def burst() -> list[str]:
            async with httpx.AsyncClient(base_url=g.url, headers=g.headers, timeout=30) as c:
                rs = await asyncio.gather(*(c.post("/v1/chat/completions", json={"messages": USER})
                                            for _ in range(150)))
            return [r.headers["x-specway-decision-id"] for r in rs if r.status_code == 200]

        ids = asyncio.run(burst())
        url = g.gateway.config.store.url  # type: ignore[union-attr]
    assert len(ids) == 150

    async def count() -> int:
        store = open_store(url)
        await store.open()
        try:
            return sum([await store.get_decision(i) is not None for i in ids])
        finally:
            await store.close()

    assert asyncio.run(count()) == 150


def test_the_readme_worked_example_holds(tmp_path: Path) -> None:
    config = {
        "upstreams": {"local-a": {"kind": "echo"}, "local-b": {"kind": "echo"}},
        "models": [{"id": "acme/fast", "upstream": "local-a", "name": "fast", "aliases": ["fast"]},
                   {"id": "acme/strong", "upstream": "local-b", "name": "strong", "aliases": ["strong"]}],
        "policies": {"default": {"default_model": "fast", "effort": {"low": ["acme/fast"],
                                                                      "high": ["acme/strong", "acme/fast"]},
                                 "fallbacks": {"acme/fast": ["acme/strong"]}}},
    }
    with serve(config, tmp_path) as g:
        r = post(g, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Plan a migration."}],
                                             "reasoning_effort": "high"})
        record = explain(g, r).json()
    assert [(c["model"], c["verdict"], c["reason"]) for c in record["candidates"]] == [
        ("acme/strong", "chosen", "first choice"),
        ("acme/fast", "fallback", "next in the 'high' tier of policy 'default'")]
    assert record["explanation"] == ("No model was named; effort 'high' picked the 'high' tier of policy 'default', "
                                     "which chose acme/strong.")
    assert record["usage"] == {"input_tokens": 3, "output_tokens": 4, "cached_input_tokens": 0,
                               "cache_write_tokens": None, "reasoning_tokens": None}


def test_cooldowns_are_shared_through_redis(fakes: tuple[FakeUpstream, FakeUpstream], tmp_path: Path) -> None:
    a, b = fakes
    a.reset()
    b.reset()
    name = f"a{uuid.uuid4().hex[:8]}"  # Redis keys are per upstream name: a fresh one per run
    cfg = config(a, b, cooldown={"failures": 2, "window_seconds": 30, "seconds": 2},
                 limits={"redis_url": "redis://127.0.0.1:6379/0"})
    cfg["upstreams"][name] = cfg["upstreams"].pop("a")
    cfg["models"][0]["upstream"] = name
    store = {"url": f"sqlite:///{tmp_path / 'shared.db'}"}
    with serve({**cfg, "store": store}, tmp_path / "one") as one, serve({**cfg, "store": store}, tmp_path / "two") as two:
        for _ in range(2):
            a.script(status=500)
            assert post(one, "/v1/chat/completions", {"messages": USER}).headers["x-specway-model"] == "acme/strong"
        seen = len(a.requests)
        r = post(two, "/v1/chat/completions", {"messages": USER}, key=one.key)
        assert r.headers["x-specway-model"] == "acme/strong" and len(a.requests) == seen  # two skipped it too
        record = explain(two, r, key=one.key).json()
        assert record["candidates"][0]["verdict"] == "skipped"


def test_weights_spread_a_tier_and_the_rest_stay_fallbacks() -> None:
    from datetime import UTC, datetime

    from generated.config import Config
    from handlers.inference.catalog import Catalog
    from handlers.inference.routing import decide
    from handlers.store.base import Key

    cfg = Config.model_validate({
        "upstreams": {"u": {"kind": "echo"}},
        "models": [{"id": "m1", "upstream": "u", "name": "m1"}, {"id": "m2", "upstream": "u", "name": "m2"}],
        "policies": {"p": {"effort": {"high": ["m1", "m2"]}, "weights": {"m1": 1, "m2": 3}}},
    })
    key = Key("key_1", "ws_1", "k", "sk-…", ("inference",), None, "p", None, datetime.now(UTC), None, None)
    chosen = []
    for _ in range(400):
        d = decide(Catalog.from_config(cfg), cfg.policies or {}, "p", key,
                   Request("chat", [Message("user", [Text("x")])], effort="high"))
        chosen.append(d.candidates[0].model.id)
        assert sorted(c.model.id for c in d.candidates) == ["m1", "m2"]  # the other one is the fallback
    share = chosen.count("m2") / len(chosen)
    assert 0.6 < share < 0.9  # weight 3 of 4


def test_an_upstream_that_refuses_the_connection_falls_back(fakes: tuple[FakeUpstream, FakeUpstream],
                                                             tmp_path: Path) -> None:
    """README: the next candidate is tried when the chosen upstream "refuses the connection"."""
    a, b = fakes
    b.reset()
    closed = free_port()  # nothing listens there: the connection is refused
    cfg = config(a, b)
    cfg["upstreams"]["a"]["base_url"] = f"http://127.0.0.1:{closed}/v1"
    with serve(cfg, tmp_path) as g:
        for stream in (False, True):
            r = post(g, "/v1/chat/completions", {"messages": USER, "stream": stream})
            assert r.status_code == 200 and r.headers["x-specway-model"] == "acme/strong", r.text
            record = explain(g, r).json()
            assert [(x["model"], x["status"]) for x in record["attempts"]] == [("acme/fast", None), ("acme/strong", 200)]
            assert record["attempts"][0]["error"]
            assert "acme/fast failed before answering, so the fallback acme/strong answered" in record["explanation"]
