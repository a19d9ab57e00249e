"""GET /v1/usage (issue 12): hourly rollups the decision writer keeps, read back by bucket and group, each key seeing
what its scopes allow; a record written twice is counted once (both stores)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from handlers.store.sqlbase import SQLStore
from tests.conftest import Live, serve
from tests.store_support import (
    fixture_backend,  # noqa: F401  (a fixture)
    fixture_store,  # noqa: F401  (a fixture)
)

CONFIG = {
    "upstreams": {"echo": {"kind": "echo"}},
    "models": [
        {"id": "acme/free", "upstream": "echo", "name": "free"},
        {"id": "acme/paid", "upstream": "echo", "name": "paid", "price": {"input": "1000", "output": "2000"}},
    ],
}


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Live]:
    with serve(CONFIG, tmp_path) as live:
        live.run(live.gateway.store.add_credit(live.workspace_id, Decimal(100)))
        yield live


def chat(gw: Live, key: str, model: str, text: str = "hello there") -> httpx.Response:
    return httpx.post(f"{gw.url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                      json={"model": model, "max_tokens": 20, "messages": [{"role": "user", "content": text}]})


def usage(gw: Live, key: str, **params: Any) -> httpx.Response:
    return httpx.get(f"{gw.url}/v1/usage", params=params, headers={"Authorization": f"Bearer {key}"})


def test_usage_counts_requests_tokens_and_cost_by_model_and_key(gw: Live) -> None:
    alice = gw.create_key(scopes=("inference", "key:read", "explain:read"))
    bob = gw.create_key(scopes=("inference", "key:read"))
    answers = [chat(gw, alice, "acme/paid"), chat(gw, alice, "acme/paid", "a longer question"),
               chat(gw, alice, "acme/free"), chat(gw, bob, "acme/paid")]
    assert [a.status_code for a in answers] == [200] * 4
    counted = httpx.post(f"{gw.url}/v1/messages/count_tokens", headers={"Authorization": f"Bearer {alice}"},
                         json={"model": "acme/paid", "messages": [{"role": "user", "content": "hi"}]})
    assert counted.status_code == 200  # a count is no inference: not in usage

    mine = usage(gw, alice, group_by="model")
    assert mine.status_code == 200, mine.text
    body = mine.json()
    assert body["object"] == "usage" and body["bucket"] == "day" and body["group_by"] == ["model"]
    by_model = {row["model"]: row for row in body["data"]}
    assert set(by_model) == {"acme/free", "acme/paid"}  # bob's request is not alice's
    paid = by_model["acme/paid"]
    usages = [a.json()["usage"] for a in answers[:2]]
    assert paid["requests"] == 2 and paid["errors"] == 0
    assert paid["input_tokens"] == sum(u["prompt_tokens"] for u in usages)
    assert paid["output_tokens"] == sum(u["completion_tokens"] for u in usages)
    records = [httpx.get(f"{gw.url}/v1/route/explain/{a.headers['x-specway-decision-id']}",
                         headers={"Authorization": f"Bearer {alice}"}).json() for a in answers[:3]]
    assert Decimal(body["totals"]["cost"]) == sum(Decimal(r["cost"]) for r in records) > 0
    assert body["totals"]["requests"] == 3 and by_model["acme/free"]["cost"] == "0"
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    assert {row["start"] for row in body["data"]} == {day.isoformat()}

    everyone = usage(gw, gw.key, group_by="key,model", bucket="hour")  # the admin key sees every key
    rows = {(r["key_id"], r["model"]): r["requests"] for r in everyone.json()["data"]}
    ids = {k: gw.run(gw.gateway.store.key_by_secret(k)).id for k in (alice, bob)}
    assert rows == {(ids[alice], "acme/paid"): 2, (ids[alice], "acme/free"): 1, (ids[bob], "acme/paid"): 1}


def test_a_refused_request_counts_under_the_model_it_was_routed_to(tmp_path: Path) -> None:
    """402 before any upstream call: the row names the model the policy chose (no model was asked for), never ""."""
    config = {**CONFIG, "policies": {"default": {"default_model": "acme/paid"}}}
    with serve(config, tmp_path) as poor:  # no credit
        refused = httpx.post(f"{poor.url}/v1/chat/completions", headers=poor.headers,
                             json={"messages": [{"role": "user", "content": "hi"}]})
        assert refused.status_code == 402, refused.text
        rows = usage(poor, poor.key, group_by="model,upstream").json()["data"]
    assert [(r["model"], r["upstream"], r["requests"], r["errors"]) for r in rows] == [("acme/paid", None, 1, 1)]


def test_a_key_reads_only_what_its_scopes_allow(gw: Live) -> None:
    alice = gw.create_key(scopes=("inference", "key:read"))
    bob = gw.create_key(scopes=("inference", "key:read"))
    bob_id = gw.run(gw.gateway.store.key_by_secret(bob)).id
    assert chat(gw, bob, "acme/paid").status_code == 200
    refused = usage(gw, alice, key_id=bob_id)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "insufficient_scope"
    assert usage(gw, alice, workspace_id=gw.new_workspace()).status_code == 403
    assert usage(gw, alice).json()["totals"]["requests"] == 0  # its own: nothing yet
    no_scope = gw.create_key(scopes=("inference",))
    assert usage(gw, no_scope).status_code == 403


@pytest.mark.parametrize(("params", "param"), [({"start": "yesterday"}, "start"), ({"end": "2026-13-01T00:00:00Z"}, "end")])
def test_a_time_that_is_not_one_is_a_400_naming_it(gw: Live, params: dict[str, str], param: str) -> None:
    r = usage(gw, gw.key, **params)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_ranges_are_whole_hours_cut_to_366_days_and_never_inverted(gw: Live) -> None:
    got = usage(gw, gw.key, start="2020-01-01T00:30:00+02:00", end="2026-01-01T10:15:00Z").json()
    assert (got["start"], got["end"]) == ("2024-12-31T11:00:00+00:00", "2026-01-01T11:00:00+00:00")
    got = usage(gw, gw.key, start="2026-01-02T00:00:00Z", end="2026-01-01T00:00:00Z", group_by="model,model").json()
    assert got["start"] == got["end"] == "2026-01-01T00:00:00+00:00" and got["data"] == []
    assert got["group_by"] == ["model"]
    leap = usage(gw, gw.key, end="2016-12-31T23:59:60Z")
    assert leap.status_code == 200 and leap.json()["end"] == "2017-01-01T00:00:00+00:00"
    assert usage(gw, gw.key, end="0001-01-01T00:00:00Z").status_code == 200


def test_unknown_group_or_bucket_is_refused_by_the_spec(gw: Live) -> None:
    for params in ({"group_by": "colour"}, {"bucket": "week"}):
        r = usage(gw, gw.key, **params)
        assert r.status_code == 400 and r.json()["type"] == "error", r.text


async def test_a_record_written_twice_is_counted_once(store: SQLStore) -> None:
    ws = await store.create_workspace("w")
    key, _ = await store.create_key(ws.id, "k", ("inference",))
    at = datetime(2026, 3, 1, 10, 30, tzinfo=UTC)

    def record(i: int, outcome: str = "ok") -> dict[str, Any]:
        return {"id": f"d{i}", "created_at": (at + timedelta(minutes=i)).isoformat(), "key_id": key.id,
                "workspace_id": ws.id, "model": "m", "attempts": [{"upstream": "u"}], "outcome": outcome,
                "usage": {"input_tokens": 10, "output_tokens": 5, "cached_input_tokens": 2, "cache_write_tokens": 0},
                "cost": "0.000125"}

    await store.save_decisions([record(1), record(2, "upstream_error")])
    await store.save_decisions([record(1), record(3)], uncounted=frozenset({"d3"}))  # a retry, and a token count
    await store.save_decisions([record(40)])  # the next hour
    rows = await store.usage(at - timedelta(hours=1), at + timedelta(hours=2), key_id=key.id)
    by_hour = {group[0].hour: counts for group, counts in rows}
    assert set(by_hour) == {10, 11}
    ten = by_hour[10]
    assert (ten.requests, ten.errors, ten.input_tokens, ten.output_tokens, ten.cached_input_tokens) == (2, 1, 20, 10, 4)
    assert ten.cost == Decimal("0.000250")
    assert await store.usage(at + timedelta(hours=2), at + timedelta(hours=3)) == []


async def test_a_later_batch_adds_to_the_rollup_an_earlier_one_made(store: SQLStore) -> None:
    ws = await store.create_workspace("w")
    key, _ = await store.create_key(ws.id, "k", ("inference",))
    at = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)

    def record(i: int) -> dict[str, Any]:
        return {"id": f"d{i}", "created_at": (at + timedelta(minutes=i)).isoformat(), "key_id": key.id,
                "workspace_id": ws.id, "model": "m", "attempts": [{"upstream": "u"}], "outcome": "ok",
                "usage": {"input_tokens": 10 * i, "output_tokens": i}, "cost": f"0.00{i}"}

    await store.save_decisions([record(1), record(2)])
    await store.save_decisions([record(3)])
    await store.save_decisions([record(2), record(4)])  # one written before: only the other adds
    [(_, counts)] = await store.usage(at, at + timedelta(hours=1), key_id=key.id)
    assert (counts.requests, counts.input_tokens, counts.output_tokens, counts.cost) == (4, 100, 10, Decimal("0.010"))


def _cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "handlers.cli", "--config", str(config), *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_cli_reads_the_same_rollups_and_every_list_and_show_has_json(tmp_path: Path) -> None:
    config = tmp_path / "specway.yaml"
    config.write_text(yaml.safe_dump({**CONFIG, "store": {"url": f"sqlite:///{tmp_path / 'cli.db'}"}}))
    with serve(yaml.safe_load(config.read_text()), tmp_path) as live:
        live.run(live.gateway.store.add_credit(live.workspace_id, Decimal(100)))
        key = live.create_key(scopes=("inference",))
        assert chat(live, key, "acme/paid").status_code == 200 and chat(live, key, "acme/free").status_code == 200
        api = usage(live, live.key, group_by="model").json()
    table = _cli(config, "usage", "--group-by", "model")
    assert table.returncode == 0, table.stderr
    lines = [line.split("\t") for line in table.stdout.splitlines()]
    assert lines[0][:3] == ["start", "model", "requests"]
    assert sorted(row[1] for row in lines[1:-1]) == ["acme/free", "acme/paid"] and lines[-1][0] == "total"
    as_json = _cli(config, "usage", "--group-by", "model", "--json")
    assert json.loads(as_json.stdout)["totals"] == api["totals"]
    refused = _cli(config, "usage", "--group-by", "colour")
    assert refused.returncode == 2 and "group_by" in refused.stderr and "Traceback" not in refused.stderr

    keys = json.loads(_cli(config, "keys", "list", "--json").stdout)
    assert {k["object"] for k in keys} == {"key"} and all("secret" not in k for k in keys)
    shown = json.loads(_cli(config, "keys", "show", keys[0]["id"]).stdout)
    assert shown["id"] == keys[0]["id"] and shown["spend"]["total"]
    assert _cli(config, "keys", "show", "key_nope").returncode == 2
    assert json.loads(_cli(config, "workspaces", "list", "--json").stdout)[0]["object"] == "workspace"
