"""Several deployments behind one catalog id: balanced by the policy's `weighted`, `least_busy`, `latency` or `cost`,
kept under their rpm/tpm quotas (in Redis across workers), a conversation kept on its deployment (session affinity),
a rate-limited deployment's traffic moved to its sibling and back; GET /v1/route/deployments shows their health."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from handlers import config as config_mod
from tests.conftest import Live, serve
from tests.fake_upstream import FakeUpstream, Reply

REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture(autouse=True)
def fresh(fake: FakeUpstream) -> None:
    fake.reset()


def catalog(fake: FakeUpstream, balance: str = "weighted", deployments: list[dict[str, Any]] | None = None,
            **extra: Any) -> dict[str, Any]:
    """One catalog model, acme/chat, on deployments of upstreams a, b and c (all the fake, told apart by name)."""
    return {
        "upstreams": {name: {"kind": "openai", "base_url": fake.url} for name in ("a", "b", "c")},
        "models": [{"id": "acme/chat", "aliases": ["chat"],
                    "deployments": deployments or [{"upstream": "a", "name": "dep-a"},
                                                   {"upstream": "b", "name": "dep-b"}]}],
        "policies": {"default": {"default_model": "acme/chat", "balance": balance}},
        **extra,
    }


def ask(client: httpx.Client | Live, conversation: str, turns: int = 1, **headers: str) -> httpx.Response:
    """One request of a conversation (its first message), at its `turns`-th turn."""
    messages: list[dict[str, str]] = [{"role": "user", "content": conversation}]
    for i in range(1, turns):
        messages += [{"role": "assistant", "content": f"answer {i}"}, {"role": "user", "content": f"more {i}"}]
    if isinstance(client, Live):
        return httpx.post(f"{client.url}/v1/chat/completions", json={"messages": messages},
                          headers={**client.headers, **headers}, timeout=30)
    return client.post("/v1/chat/completions", json={"messages": messages}, headers=headers)


def record(gw: Live, r: httpx.Response) -> dict[str, Any]:
    return httpx.get(f"{gw.url}/v1/route/explain/{r.headers['x-specway-decision-id']}", headers=gw.headers).json()


def dep(name: str) -> str:
    """The deployment of the fake's model `name` here: dep-a is on upstream a."""
    return f"{name[-1]}/{name}"


def served(fake: FakeUpstream) -> Counter[str]:
    return Counter(r.body["model"] for r in fake.requests)


def test_weighted_balancing_lands_within_5_percent_of_the_weights(fake: FakeUpstream, tmp_path: Path) -> None:
    deployments = [{"upstream": "a", "name": "dep-a", "weight": 1}, {"upstream": "b", "name": "dep-b", "weight": 2},
                   {"upstream": "c", "name": "dep-c", "weight": 1}]
    with serve(catalog(fake, deployments=deployments), tmp_path) as gw:
        async def burst() -> list[int]:
            async with httpx.AsyncClient(base_url=gw.url, headers=gw.headers, timeout=30) as c:
                limit = asyncio.Semaphore(16)

                async def one(i: int) -> int:
                    async with limit:
                        r = await c.post("/v1/chat/completions",
                                         json={"messages": [{"role": "user", "content": f"conversation {i}"}]})
                        return r.status_code

                return await asyncio.gather(*(one(i) for i in range(1000)))

        assert set(asyncio.run(burst())) == {200}
    shares = {name: n / 1000 for name, n in served(fake).items()}
    assert sum(served(fake).values()) == 1000
    for name, weight in (("dep-a", 0.25), ("dep-b", 0.5), ("dep-c", 0.25)):
        assert abs(shares[name] - weight) <= 0.05, shares


def test_least_busy_moves_traffic_away_from_a_slowed_deployment(fake: FakeUpstream, tmp_path: Path) -> None:
    with FakeUpstream() as slow:
        cfg = catalog(fake, "least_busy")
        cfg["upstreams"]["a"]["base_url"] = slow.url  # a/dep-a answers only when the test lets it
        with serve(cfg, tmp_path) as gw:
            slow.hold()

            async def run() -> list[httpx.Response]:
                async with httpx.AsyncClient(base_url=gw.url, headers=gw.headers, timeout=30) as c:
                    pending = []
                    for i in range(50):
                        held, answered = len(slow.requests), len(fake.requests)
                        task = asyncio.ensure_future(c.post("/v1/chat/completions", json={
                            "messages": [{"role": "user", "content": f"conversation {i}"}]}))
                        while (len(slow.requests), len(fake.requests)) == (held, answered):  # until one has it
                            await asyncio.sleep(0.002)
                        if len(fake.requests) > answered:
                            await task  # b/dep-b answers at once; a/dep-a's stay in flight
                        pending.append(task)
                    slow.release()
                    return await asyncio.gather(*pending)

            answers = asyncio.run(run())
        assert all(r.status_code == 200 for r in answers)
        assert len(slow.requests) <= 1 and len(fake.requests) >= 49  # once one call is stuck there, none follows


def test_latency_moves_traffic_away_from_a_slowed_deployment(fake: FakeUpstream, tmp_path: Path) -> None:
    with serve(catalog(fake, "latency"), tmp_path) as gw, httpx.Client(base_url=gw.url, headers=gw.headers,
                                                                      timeout=30) as c:
        for i in range(20):
            assert ask(c, f"warm {i}").status_code == 200
        slowed = fake.requests[-1].body["model"]  # the one the latency balance was sending traffic to
        fake.responder = lambda _dialect, body: Reply(delay=0.3 if body["model"] == slowed else 0.0)
        before = len(fake.requests)
        for i in range(50):
            assert ask(c, f"slow {i}").status_code == 200
        after = [r.body["model"] for r in fake.requests[before:]]
    # Its first slow answer takes its average far above the other's; a pause of the machine can cost one more.
    assert after.count(slowed) <= 5 and slowed not in after[-20:], after


def test_cost_balancing_takes_the_cheapest_deployment(fake: FakeUpstream, tmp_path: Path) -> None:
    deployments = [{"upstream": "a", "name": "dep-a", "price": {"input": "3", "output": "15"}},
                   {"upstream": "b", "name": "dep-b", "price": {"input": "1", "output": "5"}}]
    with serve(catalog(fake, "cost", deployments), tmp_path) as gw:
        gw.run(gw.gateway.store.add_credit(gw.workspace_id, Decimal(10)))
        r = ask(gw, "hello")
        decision = record(gw, r)
    assert served(fake) == {"dep-b": 1}
    assert decision["candidates"][0]["deployment"] == "b/dep-b"
    assert decision["candidates"][0]["reason"].startswith("first choice; balance cost: deployment b/dep-b, worst case ")
    assert decision["candidates"][1] == {"model": "acme/chat", "upstream": "a", "deployment": "a/dep-a",
                                         "verdict": "fallback", "reason": "another deployment of acme/chat"}


def test_affinity_keeps_a_20_turn_conversation_on_one_deployment(fake: FakeUpstream, tmp_path: Path) -> None:
    """Under `latency` the two equally healthy deployments would trade places as their averages move; affinity keeps
    the conversation where it started, and explain says affinity decided."""
    with serve(catalog(fake, "latency"), tmp_path) as gw:
        for i in range(4):  # both measured
            ask(gw, f"warm {i}")
        before = len(fake.requests)
        decisions = [record(gw, ask(gw, "Plan a migration.", turns)) for turns in range(1, 21)]
        used = {r.body["model"] for r in fake.requests[before:]}
        assert len(used) == 1 and len(fake.requests) - before == 20
        assert decisions[0]["affinity"] == {"source": "conversation", "deployment": None, "decided": False}
        kept = decisions[0]["attempts"][0]["deployment"]
        for d in decisions[1:]:
            assert d["affinity"] == {"source": "conversation", "deployment": kept, "decided": True}
            assert "session affinity (conversation): the conversation's last request went to deployment " \
                   f"{kept}" in d["candidates"][0]["reason"]


@pytest.mark.parametrize(("source", "first", "again"), [
    ("x-specway-session", {"headers": {"x-specway-session": "s-1"}}, {"headers": {"x-specway-session": "s-1"}}),
    ("prompt_cache_key", {"body": {"prompt_cache_key": "pk-1"}}, {"body": {"prompt_cache_key": "pk-1"}}),
])
def test_a_session_named_by_the_caller_keeps_its_deployment_across_conversations(
        fake: FakeUpstream, tmp_path: Path, source: str, first: dict[str, Any], again: dict[str, Any]) -> None:
    with serve(catalog(fake, "least_busy"), tmp_path) as gw:
        r1 = httpx.post(f"{gw.url}/v1/chat/completions", headers={**gw.headers, **first.get("headers", {})},
                        json={"messages": [{"role": "user", "content": "one"}], **first.get("body", {})})
        assert r1.status_code == 200
        r2 = httpx.post(f"{gw.url}/v1/chat/completions", headers={**gw.headers, **again.get("headers", {})},
                        json={"messages": [{"role": "user", "content": "another first message"}],
                              **again.get("body", {})})
        second = record(gw, r2)
    assert fake.requests[0].body["model"] == fake.requests[1].body["model"]
    assert second["affinity"]["source"] == source and second["affinity"]["decided"] is True


def test_anthropic_metadata_user_id_is_a_session(fake: FakeUpstream, tmp_path: Path) -> None:
    with serve(catalog(fake, "least_busy"), tmp_path) as gw:
        for text in ("one", "two"):
            r = httpx.post(f"{gw.url}/v1/messages", headers=gw.headers, json={
                "messages": [{"role": "user", "content": text}], "max_tokens": 20,
                "metadata": {"user_id": "user-7"}})
            assert r.status_code == 200
        decision = record(gw, r)
    assert decision["affinity"] == {"source": "metadata.user_id", "deployment": dep(fake.requests[0].body["model"]),
                                    "decided": True}
    assert fake.requests[0].body["model"] == fake.requests[1].body["model"]


def test_a_429_storm_moves_traffic_to_the_sibling_and_back_after_the_wait(fake: FakeUpstream, tmp_path: Path) -> None:
    storm = {"on": True}
    fake.responder = lambda _dialect, body: (Reply(status=429, error="slow down", headers={"retry-after-ms": "400"})
                                             if storm["on"] and body["model"] == "dep-a" else Reply())
    with serve(catalog(fake), tmp_path) as gw, httpx.Client(base_url=gw.url, headers=gw.headers, timeout=30) as c:
        during = [ask(c, f"during {i}") for i in range(20)]
        assert all(r.status_code == 200 for r in during)
        assert served(fake)["dep-a"] == 1  # the first 429 cooled it for its wait: nothing more was sent there
        assert any("deployment a/dep-a is rate limited until" in cand["reason"]
                   for cand in record(gw, during[-1])["candidates"])
        storm["on"] = False
        time.sleep(0.5)  # the upstream's wait is over
        before = served(fake)["dep-a"]
        after = [ask(c, f"after {i}") for i in range(20)]
        assert all(r.status_code == 200 for r in after)
    assert served(fake)["dep-a"] - before >= 5  # its share of new conversations is back


def test_per_deployment_rpm_holds_exactly_across_two_workers_with_redis(fake: FakeUpstream, tmp_path: Path) -> None:
    name = f"a{uuid.uuid4().hex[:8]}"  # the quota's Redis key is per deployment: a fresh one per run
    cfg = catalog(fake, deployments=[{"upstream": name, "name": "dep-a", "rpm": 10, "weight": 100},
                                     {"upstream": "b", "name": "dep-b", "weight": 1}],
                  limits={"redis_url": REDIS})
    cfg["upstreams"][name] = cfg["upstreams"]["a"]
    cfg["store"] = {"url": f"sqlite:///{tmp_path / 'shared.db'}"}
    with serve(cfg, tmp_path / "one") as one, serve(cfg, tmp_path / "two") as two:
        async def burst() -> list[int]:
            async with httpx.AsyncClient(timeout=30) as c:
                async def send(i: int) -> int:
                    gw = (one, two)[i % 2]
                    r = await c.post(f"{gw.url}/v1/chat/completions", headers={"Authorization": f"Bearer {one.key}"},
                                     json={"messages": [{"role": "user", "content": f"conversation {i}"}]})
                    return r.status_code

                return await asyncio.gather(*(send(i) for i in range(40)))

        assert set(asyncio.run(burst())) == {200}
    assert served(fake) == {"dep-a": 10, "dep-b": 30}


def test_a_deployment_at_its_token_quota_is_skipped_and_its_sibling_answers(fake: FakeUpstream, tmp_path: Path
                                                                            ) -> None:
    cfg = catalog(fake, deployments=[{"upstream": "a", "name": "dep-a", "tpm": 1000, "weight": 100},
                                     {"upstream": "b", "name": "dep-b"}])
    with serve(cfg, tmp_path) as gw:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 600}
        fake.script(usage=(500, 300, 0))  # it used 800 of the 1000: the next 600 do not fit
        first = httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=gw.headers)
        preview = httpx.post(f"{gw.url}/v1/route/preview/chat/completions", json=body, headers=gw.headers).json()
        second = httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=gw.headers)
        listed = httpx.get(f"{gw.url}/v1/route/deployments", headers=gw.headers).json()
    assert first.status_code == second.status_code == 200
    assert served(fake) == {"dep-a": 1, "dep-b": 1}
    skipped = preview["candidates"][0]
    assert (skipped["deployment"], skipped["verdict"]) == ("a/dep-a", "skipped")
    assert skipped["reason"] == "deployment a/dep-a is at its quota of 1000 tokens per minute"
    assert [d["state"] for d in listed["data"]] == ["healthy", "healthy"]  # a small request still fits in a/dep-a


def test_the_deployments_list_shows_health_in_flight_and_latency(fake: FakeUpstream, tmp_path: Path) -> None:
    cfg = catalog(fake, deployments=[{"upstream": "a", "name": "dep-a", "rpm": 100},
                                     {"upstream": "b", "name": "dep-b", "weight": 2}])
    cfg["models"].append({"id": "acme/other", "upstream": "c", "name": "dep-c"})
    cfg["cooldown"] = {"failures": 1, "window_seconds": 60, "seconds": 30}
    fake.responder = lambda _dialect, body: Reply(status=500) if body["model"] == "dep-c" else Reply()
    with serve(cfg, tmp_path) as gw:
        assert ask(gw, "measure me").status_code == 200
        other = httpx.post(f"{gw.url}/v1/chat/completions", headers=gw.headers,
                           json={"model": "acme/other", "messages": [{"role": "user", "content": "x"}]})
        assert other.status_code == 502
        listed = httpx.get(f"{gw.url}/v1/route/deployments", headers=gw.headers)
        narrow = gw.create_key(models=("chat",))
        theirs = httpx.get(f"{gw.url}/v1/route/deployments", headers={"Authorization": f"Bearer {narrow}"}).json()
    assert listed.status_code == 200 and listed.json()["object"] == "list"
    rows = {d["id"]: d for d in listed.json()["data"]}
    assert list(rows) == ["a/dep-a", "b/dep-b", "c/dep-c"]
    first = rows[dep(fake.requests[0].body["model"])]
    assert first["state"] == "healthy" and first["latency_ms"] > 0 and first["in_flight"] == 0
    assert rows["a/dep-a"] | {"latency_ms": None} == {
        "id": "a/dep-a", "object": "route.deployment", "upstream": "a", "model": "dep-a", "catalog_ids": ["acme/chat"],
        "state": "healthy", "cooldown_until": None, "reason": None, "in_flight": 0, "latency_ms": None, "weight": 1.0,
        "rpm": 100, "tpm": None}
    broken = rows["c/dep-c"]
    assert broken["state"] == "open" and broken["cooldown_until"].endswith("Z")
    assert broken["reason"].startswith("deployment c/dep-c is in cooldown until ")
    assert [d["id"] for d in theirs["data"]] == ["a/dep-a", "b/dep-b"]  # only what the key may use


@pytest.mark.parametrize(("model", "problem"), [
    ({"id": "m", "upstream": "a", "name": "x", "deployments": [{"upstream": "a", "name": "y"}]},
     "models.0: give either upstream and name, or deployments, not both"),
    ({"id": "m", "upstream": "a"}, "models.0: needs upstream and name, or deployments"),
    ({"id": "m", "deployments": [{"upstream": "nope", "name": "y"}]},
     "models.0.deployments.0.upstream: no upstream named 'nope'"),
    ({"id": "m", "deployments": [{"upstream": "a", "name": "y"}, {"upstream": "a", "name": "y"}]},
     "models.0.deployments.1: a/y is already a deployment of 'm'"),
])
def test_a_bad_deployment_fails_at_startup_naming_it(model: dict[str, Any], problem: str) -> None:
    with pytest.raises(config_mod.ConfigError) as bad:
        config_mod.parse({"upstreams": {"a": {"kind": "echo"}}, "models": [model]}, "specway.yaml")
    assert f"specway.yaml: {problem}" in str(bad.value)
