"""Prices of cached tokens: cache reads and cache writes priced apart from the rest of the input, exactly; the
worst-case reservation at the highest input-side price; GET /v1/models shows every price."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from handlers import config as config_mod
from handlers.inference.canonical import Message, Request, Text, Usage
from handlers.inference.catalog import Catalog, Model
from tests.conftest import Live, serve
from tests.fake_upstream import FakeUpstream

# Per million tokens: input, output, cache reads, cache writes (Claude Sonnet's list prices).
PRICES = {"input": "3", "output": "15", "cached_input": "0.30", "cache_write": "3.75"}


def model(**prices: str) -> Model:
    p = {**PRICES, **prices}
    return Model("acme/m", "up", "m", (), Decimal(p["input"]), Decimal(p["output"]), None, "up", "acme/m",
                 price_cached_in=Decimal(p["cached_input"]) if p["cached_input"] else None,
                 price_cache_write=Decimal(p["cache_write"]) if p["cache_write"] else None)


# --- cost and worst_case -------------------------------------------------------------------------------------------


def test_cost_prices_each_part_of_the_input_at_its_own_price() -> None:
    # 1500 prompt tokens, of which 1000 read from the cache and 400 written to it: 100 plain input tokens.
    usage = Usage(input_tokens=1500, output_tokens=20, cached_input_tokens=1000, cache_write_tokens=400)
    cost = model().cost(usage)
    assert cost == (100 * Decimal(3) + 1000 * Decimal("0.30") + 400 * Decimal("3.75") + 20 * Decimal(15)) / 10**6
    assert cost == Decimal("0.0024") and isinstance(cost, Decimal)


def test_unset_cache_prices_are_the_input_price() -> None:
    m = model(cached_input="", cache_write="")
    assert (m.cached_input_price, m.cache_write_price) == (Decimal(3), Decimal(3))
    usage = Usage(input_tokens=1500, output_tokens=20, cached_input_tokens=1000, cache_write_tokens=400)
    assert m.cost(usage) == (1500 * Decimal(3) + 20 * Decimal(15)) / 10**6 == Decimal("0.0048")


def test_counts_not_reported_cost_nothing() -> None:
    m = model()
    assert m.cost(Usage(input_tokens=7, output_tokens=3)) == Decimal("0.000066")
    assert m.cost(Usage()) == 0
    # Cache counts beyond the input (an upstream that counts oddly) never make plain input negative.
    assert m.cost(Usage(input_tokens=10, output_tokens=0, cached_input_tokens=20)) == Decimal("0.000006")


def test_exact_decimals_with_no_float_drift() -> None:
    m = model(input="0.1", output="0.2", cached_input="0.01", cache_write="0.125")
    usage = Usage(input_tokens=3, output_tokens=3, cached_input_tokens=1, cache_write_tokens=1)
    assert m.cost(usage) == Decimal("0.000000835")  # (1 * 0.1 + 1 * 0.01 + 1 * 0.125 + 3 * 0.2) / 1e6


def test_worst_case_is_every_input_token_at_the_highest_input_side_price() -> None:
    assert model().worst_case(1000, 100) == (1000 * Decimal("3.75") + 100 * Decimal(15)) / 10**6 == Decimal("0.00525")
    # Cache writes cheaper than input (or unset): the input price is the highest.
    assert model(cache_write="1").worst_case(1000, 100) == Decimal("0.0045")
    assert model(cached_input="", cache_write="").worst_case(1000, 100) == Decimal("0.0045")
    # Never below what the same tokens can cost, however they turn out to be split.
    m = model()
    for cached, written in ((0, 0), (1000, 0), (0, 1000), (500, 500)):
        assert m.cost(Usage(1000, 100, cached, written)) <= m.worst_case(1000, 100)


def test_the_catalog_reads_the_cache_prices_from_the_config() -> None:
    cfg = config_mod.parse({
        "upstreams": {"up": {"kind": "echo"}},
        "models": [{"id": "acme/a", "upstream": "up", "name": "a", "price": PRICES},
                   {"id": "acme/b", "upstream": "up", "name": "b", "price": {"input": 2, "output": "4"}}],
    }, "test config")
    a, b = (Catalog.from_config(cfg).resolve(name) for name in ("acme/a", "acme/b"))
    assert a is not None and (a.cached_input_price, a.cache_write_price) == (Decimal("0.30"), Decimal("3.75"))
    assert b is not None and (b.price_cached_in, b.price_cache_write) == (None, None)
    assert (b.cached_input_price, b.cache_write_price) == (Decimal(2), Decimal(2))


async def test_settle_keeps_the_upstreams_cache_counts_when_it_estimates(tmp_path: Path) -> None:
    from handlers.metering.meter import Meter
    from handlers.metering.ratelimit import MemoryLimiter
    from handlers.store import open_store

    store = open_store(f"sqlite:///{tmp_path / 'p.db'}")
    await store.open()
    try:
        ws = await store.create_workspace("w", Decimal(1))
        key, _ = await store.create_key(ws.id, "k", ("inference",))
        m = model()
        meter = Meter(store, MemoryLimiter())
        hold = await meter.admit(key, [m], Request("messages", [Message("user", [Text("x" * 40)])], max_tokens=50))
        assert hold.lease is not None  # held in memory, on the key's lease
        # No output count (a cut stream): output is estimated from the text, the cache counts stay as reported,
        # and input is never fewer than the cache reads and writes.
        charge = await meter.settle(hold, m, Usage(cached_input_tokens=300, cache_write_tokens=200), output_chars=20)
        assert charge.estimated
        assert charge.usage == Usage(input_tokens=500, output_tokens=5, cached_input_tokens=300, cache_write_tokens=200)
        assert charge.cost == (300 * Decimal("0.30") + 200 * Decimal("3.75") + 5 * Decimal(15)) / 10**6
        await meter.ledger.flush()  # the writer's job
        after = await store.get_key(key.id)
        assert after is not None and after.spend_total == charge.cost and after.reserved == 0
    finally:
        await store.close()


# --- through the gateway -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture
def priced(fake: FakeUpstream, tmp_path: Path) -> Iterator[Live]:
    fake.reset()
    config: dict[str, Any] = {
        "upstreams": {"an": {"kind": "anthropic", "base_url": fake.anthropic_url}},
        "models": [{"id": "acme/claude", "upstream": "an", "name": "claude-up", "price": PRICES},
                   {"id": "acme/plain", "upstream": "an", "name": "plain-up", "price": {"input": "1", "output": "2"}}],
    }
    with serve(config, tmp_path) as g:
        yield g


def _key_info(live: Live, key: str) -> dict[str, Any]:
    return dict(httpx.get(f"{live.url}/v1/key", headers={"Authorization": f"Bearer {key}"}).json())


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_the_workspace_pays_each_part_at_its_own_price(priced: Live, fake: FakeUpstream, stream: bool) -> None:
    ws = priced.run(priced.gateway.store.create_workspace("cache", Decimal(10)))
    key = priced.create_key(workspace_id=ws.id)
    # Anthropic's counts: 100 uncached input tokens, 1000 read from the cache, 400 written to it; 20 output tokens.
    fake.script(text="Cached hello", usage=(100, 20, 1000, 400))
    client = anthropic.Anthropic(base_url=priced.url, api_key=key, max_retries=0)
    args: dict[str, Any] = {"model": "acme/claude", "max_tokens": 64,
                            "messages": [{"role": "user", "content": "Hello again."}]}
    if stream:
        with client.messages.stream(**args) as s:
            message = s.get_final_message()
    else:
        message = client.messages.create(**args)
    expected = Decimal("0.0024")  # (100 * 3 + 1000 * 0.30 + 400 * 3.75 + 20 * 15) / 1e6
    # An Anthropic caller sees Anthropic's own split: reads and writes apart from input_tokens.
    u = message.usage
    assert (u.input_tokens, u.output_tokens, u.cache_read_input_tokens, u.cache_creation_input_tokens) == (
        100, 20, 1000, 400)

    info = _key_info(priced, key)
    assert Decimal(info["spend"]["total"]) == expected
    assert Decimal(info["workspace"]["credit"]) == Decimal(10) - expected == Decimal("9.9976")
    assert Decimal(info["spend"]["reserved"]) == 0 and Decimal(info["workspace"]["reserved"]) == 0

    decision = message.id.removeprefix("msg_")
    record = httpx.get(f"{priced.url}/v1/route/explain/{decision}", headers={"Authorization": f"Bearer {key}"}).json()
    assert record["usage"] == {"input_tokens": 1500, "output_tokens": 20, "cached_input_tokens": 1000,
                               "cache_write_tokens": 400, "reasoning_tokens": None}
    assert Decimal(record["cost"]) == expected and record["usage_estimated"] is False


def test_models_show_every_price(priced: Live) -> None:
    r = httpx.get(f"{priced.url}/v1/models", headers=priced.headers)
    assert r.status_code == 200, r.text
    pricing = {m["id"]: m["pricing"] for m in r.json()["data"]}
    assert pricing["acme/claude"] == {"input_per_million": "3", "output_per_million": "15",
                                      "cached_input_per_million": "0.30", "cache_write_per_million": "3.75"}
    # Unset cache prices are the input price, and say so.
    assert pricing["acme/plain"] == {"input_per_million": "1", "output_per_million": "2",
                                     "cached_input_per_million": "1", "cache_write_per_million": "1"}
    one = anthropic.Anthropic(base_url=priced.url, api_key=priced.key).models.retrieve("acme/claude")
    assert one.id == "acme/claude"
