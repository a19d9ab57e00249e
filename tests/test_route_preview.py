"""POST /v1/route/preview/...: the plan a request would get, for every format, without sending anything; and for 50
randomized policies (allowlists, effort tiers, weights, fallbacks, balances, affinity, cost ceilings, step-down,
cooldowns, context windows, several deployments with quotas) the real request then does what the preview said: the same candidates in the same
order, with the same verdicts and reasons, the same first deployment tried, or the same refusal."""

from __future__ import annotations

import random
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from handlers.inference.cooldown import Cooldowns, deployment_key, upstream_key
from tests.conftest import Live, serve
from tests.fake_upstream import FakeUpstream

FORMATS = {"chat": "chat/completions", "responses": "responses", "messages": "messages", "embeddings": "embeddings"}
UPSTREAMS = ("u1", "u2", "u3")
TIERS = ("minimal", "low", "medium", "high")


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


def models(rng: random.Random) -> list[dict[str, Any]]:
    """Ten chat models over three upstreams (some sharing one), with random windows and prices, and two embedding
    models."""
    made = []
    for i in range(10):
        m: dict[str, Any] = {"id": f"acme/m{i}", "upstream": rng.choice(UPSTREAMS), "name": f"up-{i}",
                             "aliases": [f"a{i}"], "price": {"input": str(rng.choice([0, 0.5, 3, 10])),
                                                             "output": str(rng.choice([2, 15]))}}
        if rng.random() < 0.3:
            m["context_window"] = rng.choice([30, 300])
        if rng.random() < 0.4:  # several deployments, some with quotas a request can fill
            m["deployments"] = [{"upstream": up, "name": f"up-{i}-{up}", "weight": rng.choice([0, 1, 2]),
                                 **rng.choice([{}, {"rpm": 1}, {"tpm": 300}]),
                                 "price": {"output": str(rng.choice([1, 4]))}}
                                for up in rng.sample(UPSTREAMS, rng.randint(2, 3))]
            del m["upstream"], m["name"]
        made.append(m)
    made += [{"id": f"acme/e{i}", "upstream": "u1", "name": f"embed-{i}", "embeddings": True,
              "price": {"input": "0.02"}} for i in range(2)]
    return made


def policy(rng: random.Random, ids: list[str]) -> dict[str, Any]:
    chosen: dict[str, Any] = {"default_model": rng.choice(ids)}
    chosen["effort"] = {t: rng.sample(ids, rng.randint(1, 3)) for t in TIERS if rng.random() < 0.6}
    chosen["fallbacks"] = {m: rng.sample(ids, rng.randint(1, 3)) for m in rng.sample(ids, 4)}
    if rng.random() < 0.5:
        chosen["weights"] = {m: rng.choice([0, 1, 3]) for m in rng.sample(ids, 4)}
    chosen["balance"] = rng.choice(["weighted", "least_busy", "latency", "cost"])
    if chosen["effort"] and rng.random() < 0.4:  # the workspace has 1000 of credit: stepped down below 5000
        chosen["step_down"] = {"tier": rng.choice(sorted(chosen["effort"])), "credit_below": rng.choice(["5000", "1"])}
    if rng.random() < 0.2:
        chosen["max_cost"] = rng.choice(["0.001", "0.05"])
    chosen["affinity"] = rng.random() < 0.8
    return chosen


RNG = random.Random(24)
CATALOG = models(RNG)
CHAT_IDS = [m["id"] for m in CATALOG if not m.get("embeddings")]
POLICIES = {f"p{i}": policy(RNG, CHAT_IDS) for i in range(50)}


@pytest.fixture(scope="module")
def gw(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    config = {
        "upstreams": {"u1": {"kind": "openai", "base_url": fake.url},
                      "u2": {"kind": "anthropic", "base_url": fake.anthropic_url},
                      "u3": {"kind": "responses", "base_url": fake.url}},
        "models": CATALOG,
        "policies": POLICIES,
        "retries": {"max_retries": 0},
    }
    with serve(config, tmp_path_factory.mktemp("preview")) as g:
        g.run(g.gateway.store.add_credit(g.workspace_id, Decimal(1000)))
        yield g


def body(rng: random.Random, fmt: str) -> dict[str, Any]:
    words = " ".join(f"w{i}" for i in range(rng.choice([3, 60, 400])))
    named = rng.choice([None, None, None, rng.choice(CHAT_IDS), f"a{rng.randrange(10)}", "acme/unknown"])
    effort = rng.choice([None, *TIERS])
    if fmt == "embeddings":
        return {"model": rng.choice(["acme/e0", "acme/e1", rng.choice(CHAT_IDS)]), "input": words}
    if fmt == "chat":
        made: dict[str, Any] = {"messages": [{"role": "user", "content": words}], "max_tokens": rng.choice([8, 100])}
        if effort:
            made["reasoning_effort"] = effort
    elif fmt == "responses":
        made = {"input": words, "max_output_tokens": rng.choice([16, 100])}
        if effort:
            made["reasoning"] = {"effort": effort}
    else:
        made = {"messages": [{"role": "user", "content": words}], "max_tokens": rng.choice([8, 100])}
        if effort:
            made["thinking"] = {"type": "enabled", "budget_tokens": rng.choice([1024, 4096, 20000])}
    return {**made, **({"model": named} if named else {})}


def cool_some(gw: Live, rng: random.Random) -> None:
    """A fresh set of breakers, a few deployments and sometimes a whole upstream cooling down, for long enough that
    none ends between the preview and the request."""
    cooldowns = Cooldowns()
    deployments = [f"{d['upstream']}/{d['name']}" for m in CATALOG for d in m.get("deployments") or [m]]

    async def cool() -> None:
        gw.gateway.cooldowns = cooldowns
        for d in rng.sample(deployments, rng.randint(0, 4)):
            await cooldowns.cool(deployment_key(d), 600, "a test's wait")
        if rng.random() < 0.3:
            for _ in range(cooldowns.failures):
                await cooldowns.failed(upstream_key(rng.choice(UPSTREAMS)), "refused")

    gw.run(cool())


def rows(candidates: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    return [(c["model"], c["deployment"], c["verdict"], c["reason"]) for c in candidates]


@pytest.mark.parametrize("case", range(50))
def test_the_request_does_what_its_preview_said(gw: Live, fake: FakeUpstream, case: int) -> None:
    """Twice per policy: the second request of the same conversation is planned with the first one's deployment
    remembered (affinity) and its quotas taken."""
    rng = random.Random(1000 + case)
    name = f"p{case}"
    allow = None if rng.random() < 0.5 else (*rng.sample(CHAT_IDS, 5), "acme/e0")
    key = gw.keys.get(name) or gw.keys.setdefault(name, gw.create_key(policy=name, models=allow))
    headers = {"Authorization": f"Bearer {key}"}
    if rng.random() < 0.4:
        headers["x-specway-max-cost"] = rng.choice(["0.0001", "0.002", "0.5"])
    fmt = list(FORMATS)[case % 4]
    sent = body(rng, fmt)
    cool_some(gw, rng)
    for _ in range(2):
        agree(gw, fake, FORMATS[fmt], sent, headers)


def agree(gw: Live, fake: FakeUpstream, path: str, sent: dict[str, Any], headers: dict[str, str]) -> None:
    preview = httpx.post(f"{gw.url}/v1/route/preview/{path}", json=sent, headers=headers, timeout=10)
    assert preview.status_code == 200, preview.text
    plan = preview.json()
    assert plan["object"] == "route.preview" and FORMATS[plan["format"]] == path
    fake.reset()
    real = httpx.post(f"{gw.url}/v1/{path}", json=sent, headers=headers, timeout=30)
    decision = httpx.get(f"{gw.url}/v1/route/explain/{real.headers['x-specway-decision-id']}", headers=headers).json()
    assert rows(decision["candidates"]) == rows(plan["candidates"])
    assert [decision[f] for f in ("affinity", "max_cost", "stepped_down", "effort")] == [
        plan[f] for f in ("affinity", "max_cost", "stepped_down", "effort")]
    if plan["refusal"] is not None:
        assert (real.status_code, real.json()["error"]["code"]) == (plan["refusal"]["status"],
                                                                    plan["refusal"]["code"]), real.text
        assert real.json()["error"]["message"] == plan["refusal"]["message"]
        assert decision["attempts"] == []
    else:
        first = next(c for c in plan["candidates"] if c["verdict"] == "chosen")
        assert real.status_code == 200, real.text
        assert decision["attempts"][0]["deployment"] == first["deployment"]
        assert real.headers["x-specway-model"] == first["model"]


def test_a_preview_sends_charges_and_records_nothing(gw: Live, fake: FakeUpstream) -> None:
    fake.reset()
    gw.gateway.cooldowns = Cooldowns()
    priced = next(m for m in CATALOG if "context_window" not in m and "deployments" not in m
                  and not m.get("embeddings"))
    r = httpx.post(f"{gw.url}/v1/route/preview/chat/completions", headers=gw.headers,
                   json={"model": priced["id"], "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1000})
    plan = r.json()
    first = plan["candidates"][0]
    assert (first["model"], first["verdict"], first["reason"]) == (priced["id"], "chosen", "first choice")
    inp, out = Decimal(priced["price"]["input"]), Decimal(priced["price"]["output"])
    worst = (inp * plan["input_tokens"] + out * 1000) / 1_000_000
    assert Decimal(first["worst_case_cost"]) == worst
    assert plan["max_output_tokens"] == 1000 and fake.requests == []
    assert plan["explanation"].endswith(f"{priced['id']} on {first['deployment']} would be tried first.")
    assert "x-specway-decision-id" not in r.headers


def test_preview_needs_the_explain_scope(gw: Live) -> None:
    inference_only = gw.create_key(scopes=("inference",))
    r = httpx.post(f"{gw.url}/v1/route/preview/messages", headers={"Authorization": f"Bearer {inference_only}"},
                   json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10})
    assert (r.status_code, r.json()["error"]["code"]) == (403, "insufficient_scope")


def test_a_bad_body_is_refused_as_the_real_endpoint_refuses_it(gw: Live) -> None:
    r = httpx.post(f"{gw.url}/v1/route/preview/messages", headers=gw.headers, json={"messages": "nope"})
    assert (r.status_code, r.json()["error"]["code"]) == (400, "invalid_request")
