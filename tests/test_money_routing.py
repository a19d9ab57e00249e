"""Money-aware routing: a cost ceiling per request (the `x-specway-max-cost` header, the policy's `max_cost`) skips
candidates whose worst case is over it, and with none left answers 402 naming the ceiling and the cheapest worst
case; budget-aware step-down routes a request that names no model by a cheaper tier once the key's budget or its
workspace's credit runs low, and the decision record says why."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from handlers import config as config_mod
from handlers.store.base import Limits
from tests.conftest import Live, serve
from tests.fake_upstream import FakeUpstream

USER = [{"role": "user", "content": "Summarise the quarter."}]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


def catalog(fake: FakeUpstream, **policy: Any) -> dict[str, Any]:
    return {
        "upstreams": {"up": {"kind": "openai", "base_url": fake.url}},
        "models": [{"id": "acme/strong", "upstream": "up", "name": "strong-up", "price": {"input": "3", "output": "15"}},
                   {"id": "acme/fast", "upstream": "up", "name": "fast-up", "price": {"input": "0.1", "output": "0.4"}},
                   {"id": "acme/pricey", "upstream": "up", "name": "pricey-up",
                    "price": {"input": "1000", "output": "1000"}}],
        "policies": {"default": {"default_model": "acme/strong", "fallbacks": {"acme/strong": ["acme/fast"]},
                                 "effort": {"low": ["acme/fast"], "high": ["acme/strong"]}, **policy}},
        "server": {"key_cache_seconds": 0},  # spend as the store has it, at once
    }


@pytest.fixture
def gw(fake: FakeUpstream, tmp_path: Path) -> Iterator[Live]:
    fake.reset()
    with serve(catalog(fake), tmp_path) as g:
        g.run(g.gateway.store.add_credit(g.workspace_id, Decimal(100)))
        yield g


def post(gw: Live, body: dict[str, Any], key: str | None = None, path: str = "/v1/chat/completions",
         **headers: str) -> httpx.Response:
    return httpx.post(f"{gw.url}{path}", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {key or gw.key}", **headers})


def record(gw: Live, r: httpx.Response) -> dict[str, Any]:
    return httpx.get(f"{gw.url}/v1/route/explain/{r.headers['x-specway-decision-id']}", headers=gw.headers).json()


def test_a_ceiling_skips_what_could_cost_more_and_the_cheaper_fallback_answers(gw: Live, fake: FakeUpstream) -> None:
    # 1000 output tokens: acme/strong's worst case is about 0.015, acme/fast's about 0.0004.
    r = post(gw, {"messages": USER, "max_tokens": 1000}, **{"x-specway-max-cost": "0.01"})
    assert r.status_code == 200 and r.headers["x-specway-model"] == "acme/fast"
    decision = record(gw, r)
    assert decision["max_cost"] == "0.01"
    skipped = decision["candidates"][0]
    assert (skipped["model"], skipped["verdict"]) == ("acme/strong", "skipped")
    assert skipped["reason"].startswith("worst case 0.015")
    assert skipped["reason"].endswith(" is over the cost ceiling of 0.01 (the x-specway-max-cost header)")
    assert [q.body["model"] for q in fake.requests] == ["fast-up"]


def test_with_no_candidate_under_the_ceiling_the_answer_is_402_naming_it(gw: Live, fake: FakeUpstream) -> None:
    r = post(gw, {"messages": USER, "max_tokens": 1000}, **{"x-specway-max-cost": "0.0001"})
    assert (r.status_code, r.json()["error"]["code"]) == (402, "cost_ceiling_exceeded")
    message = r.json()["error"]["message"]
    assert message.startswith("No candidate fits the cost ceiling of 0.0001 (the x-specway-max-cost header): the "
                              "cheapest worst case is 0.000")
    assert "(acme/fast on up/fast-up)" in message and r.headers["x-should-retry"] == "false"
    assert fake.requests == [] and record(gw, r)["outcome"] == "cost_ceiling_exceeded"
    preview = post(gw, {"messages": USER, "max_tokens": 1000}, path="/v1/route/preview/chat/completions",
                   **{"x-specway-max-cost": "0.0001"}).json()
    assert preview["max_cost"] == "0.0001"
    assert preview["refusal"] == {"status": 402, "code": "cost_ceiling_exceeded", "message": message}


def test_the_header_lowers_the_policys_ceiling_and_never_raises_it(fake: FakeUpstream, tmp_path: Path) -> None:
    fake.reset()
    with serve(catalog(fake, max_cost="0.01"), tmp_path) as g:
        g.run(g.gateway.store.add_credit(g.workspace_id, Decimal(100)))
        raised = post(g, {"messages": USER, "max_tokens": 1000}, **{"x-specway-max-cost": "5"})
        lowered = post(g, {"messages": USER, "max_tokens": 1000}, **{"x-specway-max-cost": "0.0001"})
        assert raised.headers["x-specway-model"] == "acme/fast"
        assert record(g, raised)["max_cost"] == "0.01"
        assert "(the policy's max_cost)" in record(g, raised)["candidates"][0]["reason"]
        assert lowered.status_code == 402 and "0.0001 (the x-specway-max-cost header)" in lowered.text


@pytest.mark.parametrize("bad", ["lots", "-1", "1e3"])
def test_a_ceiling_that_is_not_an_amount_is_a_400_naming_the_header(gw: Live, bad: str) -> None:
    r = post(gw, {"messages": USER}, **{"x-specway-max-cost": bad})
    assert (r.status_code, r.json()["error"]["code"]) == (400, "invalid_request")
    assert "x-specway-max-cost" in r.text


def test_embeddings_take_a_ceiling_too(fake: FakeUpstream, tmp_path: Path) -> None:
    cfg = catalog(fake)
    cfg["models"].append({"id": "acme/embed", "upstream": "up", "name": "embed-up", "embeddings": True,
                          "price": {"input": "1000"}})
    fake.reset()
    with serve(cfg, tmp_path) as g:
        r = post(g, {"model": "acme/embed", "input": "one two three"}, path="/v1/embeddings",
                 **{"x-specway-max-cost": "0.000001"})
    assert (r.status_code, r.json()["error"]["code"]) == (402, "cost_ceiling_exceeded")


def spend(gw: Live, key: str, fake: FakeUpstream, amount_in_input_tokens: int) -> None:
    """Spend on `key`: acme/pricey costs 0.001 an input token; then the ledger writes it, so routing sees it."""
    fake.script(usage=(amount_in_input_tokens, 0, 0))
    assert post(gw, {"model": "acme/pricey", "messages": USER, "max_tokens": 1}, key=key).status_code == 200
    gw.run(gw.gateway.ledger.write_now())


def test_a_key_low_on_budget_is_stepped_down_and_explain_says_why(fake: FakeUpstream, tmp_path: Path) -> None:
    fake.reset()
    with serve(catalog(fake, step_down={"tier": "low", "budget_below_percent": 10}), tmp_path) as g:
        g.run(g.gateway.store.add_credit(g.workspace_id, Decimal(100)))
        key = g.create_key(limits=Limits(budget=Decimal(10), budget_period="monthly"))
        high = {"messages": USER, "reasoning_effort": "high"}
        assert post(g, high, key=key).headers["x-specway-model"] == "acme/strong"  # 100% left
        spend(g, key, fake, 9150)  # 9.15 of 10 spent (and the first request's bit): 8% left, rounded down
        r = post(g, high, key=key)
        named = post(g, {**high, "model": "acme/strong"}, key=key)
        preview = post(g, high, key=key, path="/v1/route/preview/chat/completions").json()
        thinking = {"messages": USER, "max_tokens": 64000, "thinking": {"type": "enabled", "budget_tokens": 60000}}
        counted = post(g, thinking, key=key, path="/v1/messages/count_tokens")  # as the message it counts for
        decision = record(g, r)
    assert r.headers["x-specway-model"] == "acme/fast"
    assert counted.status_code == 200 and counted.headers["x-specway-model"] == "acme/fast", counted.text
    assert decision["stepped_down"] == "stepped down to the 'low' tier: 8% of the monthly budget left"
    assert decision["effort"] == "low"
    assert decision["explanation"].startswith("Stepped down to the 'low' tier: 8% of the monthly budget left. ")
    assert preview["stepped_down"] == decision["stepped_down"]
    assert named.headers["x-specway-model"] == "acme/strong"  # a model the request names is never stepped down


def test_a_workspace_low_on_credit_is_stepped_down(fake: FakeUpstream, tmp_path: Path) -> None:
    fake.reset()
    with serve(catalog(fake, step_down={"tier": "low", "credit_below": "5"}), tmp_path) as g:
        g.run(g.gateway.store.add_credit(g.workspace_id, Decimal(3)))
        r = post(g, {"messages": USER})
        decision = record(g, r)
    assert r.headers["x-specway-model"] == "acme/fast"
    assert decision["stepped_down"] == "stepped down to the 'low' tier: 3.00 of the workspace's credit left"


@pytest.mark.parametrize(("policy", "problem"), [
    ({"max_cost": "cheap"}, "policies.default.max_cost: 'cheap' is not an amount"),
    ({"step_down": {"tier": "nope", "budget_below_percent": 5}},
     "policies.default.step_down.tier: the policy has no effort tier 'nope'"),
    ({"step_down": {"tier": "low", "credit_below": "-2"}},
     "policies.default.step_down.credit_below: '-2' is not an amount"),
])
def test_a_bad_money_setting_fails_at_startup_naming_it(fake: FakeUpstream, policy: dict[str, Any],
                                                        problem: str) -> None:
    with pytest.raises(config_mod.ConfigError) as bad:
        config_mod.parse(catalog(fake, **policy), "specway.yaml")
    assert f"specway.yaml: {problem}" in str(bad.value)
