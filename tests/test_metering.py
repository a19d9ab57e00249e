"""Metering under concurrency, across processes: budgets, credit (402), rate limits (429), settlement."""

from __future__ import annotations

import asyncio
import math
import subprocess
import time
import uuid
from collections.abc import Awaitable, Iterator
from contextlib import ExitStack, contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import httpx
import openai
import pytest
import yaml

from tests.conftest import Live, free_port, fresh_postgres, serve, spawn, stop
from tests.fake_upstream import FakeUpstream

USER = [{"role": "user", "content": "hi"}]
BODY = {"messages": USER, "max_tokens": 100, "model": "acme/paid"}
# "hi" is about 5 input tokens; with 100 output tokens at 1000 a million each, the worst case is 0.105.
WORST = Decimal("0.105")
T = TypeVar("T")


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


def gateway_config(fake: FakeUpstream, store_url: str, **extra: Any) -> dict[str, Any]:
    return {
        "store": {"url": store_url},
        "upstreams": {"up": {"kind": "openai", "base_url": fake.url}},
        "models": [{"id": "acme/paid", "upstream": "up", "name": "paid-up", "price": {"input": "1000", "output": "1000"}}],
        **extra,
    }


@contextmanager
def two_gateways(config: dict[str, Any], tmp_path: Path) -> Iterator[tuple[list[str], str]]:
    """Two `specway serve` processes sharing one store (and Redis, when configured); their URLs and an admin key."""
    path = tmp_path / "specway.yaml"
    path.write_text(yaml.safe_dump(config))
    with ExitStack() as stack:
        urls, admin = [], ""
        for i in range(2):
            port = free_port()
            proc, key = spawn(path, port, tmp_path / f"serve{i}.log")
            stack.callback(stop, proc)
            admin = admin or key
            urls.append(f"http://127.0.0.1:{port}")
        yield urls, admin


def make_key(url: str, admin: str, credit: str, **key: Any) -> str:
    h = {"Authorization": f"Bearer {admin}"}
    ws = httpx.post(f"{url}/v1/workspaces", json={"name": f"ws-{uuid.uuid4().hex[:6]}", "credit": credit}, headers=h)
    r = httpx.post(f"{url}/v1/keys", json={"name": "metered", "workspace_id": ws.json()["id"], **key}, headers=h)
    assert r.status_code == 201, r.text
    return str(r.json()["secret"])


async def held(fake: FakeUpstream, calls: list[Awaitable[T]]) -> list[T]:
    """Run the calls at once while the fake upstream holds every request it receives, and open it only when each call
    has either reached the upstream or been answered without it: every reservation is taken before any request
    settles, however slow the machine (no delay to outlast)."""
    before = len(fake.requests)
    gate = fake.hold()
    try:
        tasks = [asyncio.ensure_future(call) for call in calls]
        deadline = time.monotonic() + 120
        while sum(t.done() for t in tasks) + len(fake.requests) - before < len(tasks):
            assert time.monotonic() < deadline, "the calls neither reached the upstream nor were answered"
            await asyncio.sleep(0.02)
        gate.set()
        return list(await asyncio.gather(*tasks))
    finally:
        fake.release()


async def burst(urls: list[str], key: str, n: int, body: dict[str, Any], fake: FakeUpstream | None = None
                ) -> list[httpx.Response]:
    """n concurrent requests; with `fake`, held there until all n are in (see held())."""
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(headers=headers, timeout=180) as c:
        calls = [c.post(f"{urls[i % len(urls)]}/v1/chat/completions", json=body) for i in range(n)]
        return await held(fake, calls) if fake else list(await asyncio.gather(*calls))


def key_info(url: str, key: str) -> dict[str, Any]:
    return dict(httpx.get(f"{url}/v1/key", headers={"Authorization": f"Bearer {key}"}).json())


@contextmanager
def store_url(kind: str, tmp_path: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
    else:
        with fresh_postgres() as url:
            yield url


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
@pytest.mark.parametrize("limit", ["budget", "credit"])
def test_fifty_concurrent_requests_never_overspend(fake: FakeUpstream, tmp_path: Path, kind: str,
                                                   limit: str) -> None:
    fake.reset()
    with store_url(kind, tmp_path) as url, two_gateways(gateway_config(fake, url), tmp_path) as (urls, admin):
        paid_for = str(WORST * 10)
        key = (make_key(urls[0], admin, "1000", limits={"budget": paid_for}) if limit == "budget"
               else make_key(urls[0], admin, paid_for))
        responses = asyncio.run(burst(urls, key, 50, BODY, fake))  # no request settles before all have reserved
        codes = sorted(r.status_code for r in responses)
        assert codes.count(200) == 10 and codes.count(402) == 40, codes
        assert len(fake.requests) == 10  # a refused request never reaches the upstream
        refusal = next(r for r in responses if r.status_code == 402).json()["error"]
        assert refusal["code"] == ("budget_exceeded" if limit == "budget" else "insufficient_credit")
        info = key_info(urls[1], key)
        spent = Decimal(info["spend"]["total"])
        assert Decimal(0) < spent <= Decimal(paid_for)
        assert Decimal(info["spend"]["reserved"]) == 0 and Decimal(info["workspace"]["reserved"]) == 0
        if limit == "credit":
            assert Decimal(info["workspace"]["credit"]) == Decimal(paid_for) - spent >= 0


def redis_available() -> bool:
    try:
        return subprocess.run(["redis-cli", "-h", "127.0.0.1", "ping"], capture_output=True, text=True,
                              timeout=5, check=False).stdout.strip() == "PONG"
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_one_rate_limit_shared_by_two_processes_through_redis(fake: FakeUpstream, tmp_path: Path) -> None:
    assert redis_available(), "Redis must run at 127.0.0.1:6379 (.ci/run starts it)"
    fake.reset()
    config = gateway_config(fake, f"sqlite:///{tmp_path / 's.db'}", limits={"redis_url": "redis://127.0.0.1:6379/0"})
    with two_gateways(config, tmp_path) as (urls, admin):
        key = make_key(urls[0], admin, "1000", limits={"rpm": 60})
        responses = asyncio.run(burst(urls, key, 100, BODY))
        ok = [r for r in responses if r.status_code == 200]
        limited = [r for r in responses if r.status_code == 429]
        assert (len(ok), len(limited)) == (60, 40)
        for r in limited:
            assert 1 <= int(r.headers["retry-after"]) <= 60 and int(r.headers["retry-after-ms"]) >= 0
            assert r.headers["x-ratelimit-limit-requests"] == "60" and r.json()["error"]["code"] == "rate_limit_exceeded"
        assert ok[0].headers["x-ratelimit-limit-requests"] == "60"
        time.sleep(int(limited[-1].headers["retry-after"]))
        again = httpx.post(f"{urls[1]}/v1/chat/completions", json=BODY, headers={"Authorization": f"Bearer {key}"})
        assert again.status_code == 200, again.text


@pytest.fixture
def metered(fake: FakeUpstream, tmp_path: Path) -> Iterator[Live]:
    fake.reset()
    with serve(gateway_config(fake, f"sqlite:///{tmp_path / 'm.db'}"), tmp_path) as g:
        yield g


def test_the_openai_sdk_honours_retry_after_with_its_default_retries(metered: Live) -> None:
    ws = metered.run(metered.gateway.store.create_workspace("sdk", Decimal(1000)))
    from handlers.store.base import Limits

    key = metered.create_key(workspace_id=ws.id, limits=Limits(rpm=20))  # one request frees every 3 s
    asyncio.run(burst([metered.url], key, 20, BODY))  # the minute's whole allowance
    probe = httpx.post(f"{metered.url}/v1/chat/completions", json=BODY, headers={"Authorization": f"Bearer {key}"})
    assert probe.status_code == 429, probe.text
    refused = probe.json()["error"]
    assert refused["code"] == "rate_limit_exceeded" and "limit of 20 requests per minute" in refused["message"]
    # The wait is until the next request frees: at most 3 s, and it is the same wait in both headers.
    wait_ms = int(probe.headers["retry-after-ms"])
    assert 0 < wait_ms <= 3000 and int(probe.headers["retry-after"]) == math.ceil(wait_ms / 1000)

    seen: list[tuple[float, int, str]] = []

    def record(response: httpx.Response) -> None:
        seen.append((time.monotonic(), response.status_code, response.headers.get("retry-after-ms", "")))

    http = openai.DefaultHttpxClient(event_hooks={"response": [record]})
    client = openai.OpenAI(base_url=f"{metered.url}/v1", api_key=key, http_client=http)  # default max_retries
    reply = client.chat.completions.create(model="acme/paid", messages=USER, max_tokens=100)  # type: ignore[arg-type]
    assert reply.choices[0].message.content
    statuses = [status for _, status, _ in seen]
    assert statuses[0] == 429 and statuses[-1] == 200, statuses
    refused_at, _, told = seen[0]
    waited = seen[1][0] - refused_at  # from the 429's arrival to the retry's answer
    assert int(told) / 1000 - 0.05 <= waited <= int(told) / 1000 + 5, (told, waited)


def test_a_tokens_per_minute_refusal_names_tokens(metered: Live, fake: FakeUpstream) -> None:
    # BODY's worst case (about 105 tokens) is over a 50 tokens-per-minute limit: refused before the upstream
    from handlers.store.base import Limits

    ws = metered.run(metered.gateway.store.create_workspace("tpm", Decimal(1000)))
    key = metered.create_key(workspace_id=ws.id, limits=Limits(tpm=50))
    before = len(fake.requests)
    probe = httpx.post(f"{metered.url}/v1/chat/completions", json=BODY, headers={"Authorization": f"Bearer {key}"})
    assert probe.status_code == 429, probe.text
    refused = probe.json()["error"]
    assert refused["code"] == "rate_limit_exceeded"
    assert refused["message"] == "Over this key's limit of 50 tokens per minute; retry in 1 s."  # caught by `make mutate`
    assert probe.headers["x-ratelimit-limit-tokens"] == "50" and len(fake.requests) == before


def test_failures_and_cancelled_streams_release_their_hold(metered: Live, fake: FakeUpstream) -> None:
    ws = metered.run(metered.gateway.store.create_workspace("settle", Decimal(10)))
    key = metered.create_key(workspace_id=ws.id)
    headers = {"Authorization": f"Bearer {key}"}
    fake.script(status=500)
    assert httpx.post(f"{metered.url}/v1/chat/completions", json=BODY, headers=headers).status_code == 502
    info = key_info(metered.url, key)
    assert (Decimal(info["spend"]["total"]), Decimal(info["spend"]["reserved"])) == (0, 0)

    fake.script(text=" ".join(["word"] * 50), chunk_delay=0.05)
    with httpx.stream("POST", f"{metered.url}/v1/chat/completions", json={**BODY, "stream": True},
                      headers=headers) as r:
        decision = r.headers["x-specway-decision-id"]
        next(r.iter_raw())  # the first bytes, then the client goes away
    deadline = time.monotonic() + 10
    record: dict[str, Any] = {}
    while time.monotonic() < deadline and not record.get("cost"):
        time.sleep(0.2)
        record = httpx.get(f"{metered.url}/v1/route/explain/{decision}", headers=headers).json()
    assert record["outcome"] == "cancelled" and record["cost"] is not None
    info = key_info(metered.url, key)
    assert Decimal(info["spend"]["reserved"]) == 0
    assert Decimal(info["spend"]["total"]) == Decimal(record["cost"])
    assert Decimal(info["workspace"]["credit"]) == Decimal(10) - Decimal(record["cost"])
    assert fake.disconnects >= 1


async def test_an_answer_without_usage_is_estimated_and_marked(tmp_path: Path) -> None:
    from handlers.inference.canonical import Message, Request, Text
    from handlers.inference.catalog import Model
    from handlers.metering.meter import Meter
    from handlers.metering.ratelimit import MemoryLimiter
    from handlers.store import open_store

    store = open_store(f"sqlite:///{tmp_path / 'e.db'}")
    await store.open()
    try:
        ws = await store.create_workspace("w", Decimal(1))
        key, _ = await store.create_key(ws.id, "k", ("inference",))
        model = Model("m", "u", "m", (), Decimal(1000), Decimal(1000), None, "o", "m")
        meter = Meter(store, MemoryLimiter())
        req = Request("chat", [Message("user", [Text("x" * 40)])], max_tokens=50)
        hold = await meter.admit(key, [model], req)
        charge = await meter.settle(hold, model, None, output_chars=20)
        assert charge.estimated and (charge.usage.input_tokens, charge.usage.output_tokens) == (14, 5)
        assert charge.cost == Decimal("0.019")
        after = await store.get_key(key.id)
        assert after is not None and after.spend_total == Decimal("0.019") and after.reserved == 0
    finally:
        await store.close()


def test_holds_left_by_a_dead_process_are_released(metered: Live) -> None:
    from datetime import UTC, datetime, timedelta

    from handlers.metering import money

    ws = metered.run(metered.gateway.store.create_workspace("reap", Decimal(1)))
    key = metered.run(metered.gateway.store.key_by_secret(metered.create_key(workspace_id=ws.id)))
    long_ago = datetime.now(UTC) - timedelta(hours=3)  # older than any request can live with these timeouts
    metered.run(metered.gateway.store.reserve(key.id, Decimal("0.5"), long_ago, money.hold))
    metered.run(metered.gateway.store.reserve(key.id, Decimal("0.25"), datetime.now(UTC), money.hold))  # in flight: kept
    metered.run(metered.gateway._release_stale())
    after = metered.run(metered.gateway.store.get_key(key.id))
    assert after.reserved == Decimal("0.25")
