"""Money under load and faults, through real gateways (issue 15): every answered priced request is charged and
recorded, whatever the store does meanwhile; a SIGKILL loses at most one flush interval of settlements, and what the
killed process held is freed by a live one within a few heartbeats.

Time bounds here are hang checks or the documented loss bound, never measurements of speed.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import httpx
import pytest
import yaml

from tests.conftest import free_port, fresh_postgres, spawn, stop
from tests.fake_upstream import FakeUpstream
from tests.test_metering import BODY, gateway_config, held, key_info, make_key, two_gateways
from tests.test_operations import scrape
from tests.test_upstream_pool import open_files

STREAM = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
ARRIVALS = 4000


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


async def _stream(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> tuple[int, str, bool]:
    """(status, decision id, whether the stream ended with [DONE])."""
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
        text = (await r.aread()).decode()
        return r.status_code, r.headers.get("x-specway-decision-id", ""), text.rstrip().endswith("data: [DONE]")


async def _streams(urls: list[str], key: str, n: int, fake: FakeUpstream) -> list[tuple[int, str, bool]]:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=300, limits=limits) as c:
        return await held(fake, [_stream(c, urls[i % 2], STREAM) for i in range(n)])


async def _stored(url: str, ids: list[str]) -> tuple[int, Decimal]:
    """How many of the decisions are in the store, and the sum of their costs."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT record FROM decisions WHERE id = ANY($1::text[])", ids)
    finally:
        await conn.close()
    return len(rows), sum((Decimal(json.loads(r["record"])["cost"]) for r in rows), Decimal(0))


def test_a_thousand_concurrent_priced_streams_are_all_charged_and_recorded(fake: FakeUpstream, tmp_path: Path) -> None:
    fake.reset()
    with fresh_postgres() as url:
        with two_gateways(gateway_config(fake, url), tmp_path) as (urls, admin):
            key = make_key(urls[0], admin, "1000")
            results = asyncio.run(_streams(urls, key, 1000, fake))  # every stream is in flight at once
            assert [(status, done) for status, _, done in results] == [(200, True)] * 1000
            ids = [decision for _, decision, _ in results]
            on_store = sum(scrape(u, "specway_holds_total", on="store") for u in urls)
            assert sum(scrape(u, "specway_holds_total", on="lease") for u in urls) + on_store == 1000
            assert on_store < 50  # the burst drew on leases: under 5 % held in the store one by one
        # Both gateways stopped (SIGTERM): every settlement and record is written, every lease given back.
        with two_gateways(gateway_config(fake, url), tmp_path) as (urls, _):
            info = key_info(urls[0], key)
        recorded, cost = asyncio.run(_stored(url, ids))
        assert recorded == 1000 and cost > 0
        assert Decimal(info["spend"]["total"]) == cost
        assert Decimal(info["spend"]["reserved"]) == 0 == Decimal(info["workspace"]["reserved"])
        assert Decimal(info["workspace"]["credit"]) == Decimal(1000) - cost


@contextmanager
def _gateway_process(tmp_path: Path, name: str) -> Iterator[tuple[Any, str, str]]:
    config = {
        "store": {"url": f"sqlite:///{tmp_path / 'specway.db'}"},
        "upstreams": {"echo": {"kind": "echo"}},
        "models": [{"id": "acme/paid", "upstream": "echo", "name": "paid", "price": {"input": "1", "output": "1"}}],
        "ledger": {"flush_seconds": 1, "heartbeat_seconds": 1},
    }
    path = tmp_path / "specway.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    proc, admin = spawn(path, port, tmp_path / f"{name}.log")
    try:
        yield proc, f"http://127.0.0.1:{port}", admin
    finally:
        if proc.poll() is None:
            stop(proc)


def _held(db: Path) -> tuple[int, Decimal]:
    """(reservations still held, what the workspaces hold), read from the SQLite file directly."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT count(*) FROM reservations WHERE state = 'held'").fetchone()[0]
        reserved = sum((Decimal(r) for (r,) in conn.execute("SELECT reserved FROM workspaces")), Decimal(0))
    return rows, reserved


def _books(db: Path, key_id: str) -> tuple[Decimal, set[str], Decimal, Decimal]:
    """(the key's spend, its decision records' ids, their costs' sum, its usage rollups' cost), from the file; the
    reservations' costs (holds and leases, settled or released) add up to the spend."""
    with sqlite3.connect(db) as conn:
        spend = Decimal(conn.execute("SELECT spend_total FROM keys WHERE id = ?", (key_id,)).fetchone()[0])
        costs = conn.execute("SELECT cost FROM reservations WHERE key_id = ? AND cost IS NOT NULL", (key_id,))
        assert sum((Decimal(c) for (c,) in costs), Decimal(0)) == spend
        records = [json.loads(r) for (r,) in conn.execute("SELECT record FROM decisions WHERE key_id = ?", (key_id,))]
        usage = sum((Decimal(c) for (c,) in conn.execute("SELECT cost FROM usage_hourly WHERE key_id = ?", (key_id,))),
                    Decimal(0))
    return spend, {r["id"] for r in records}, sum((Decimal(r["cost"]) for r in records), Decimal(0)), usage


@pytest.mark.parametrize("run", range(3))
def test_kill_9_loses_the_same_requests_from_spend_records_and_usage(tmp_path: Path, run: int) -> None:
    """Whole requests and streams under load, the worker killed: spend = the records' costs = usage, every request
    answered more than one flush interval before the kill is in all three, and what the dead worker held is freed."""
    flush = 1.0
    with _gateway_process(tmp_path, "first") as (proc, url, admin):
        key = make_key(url, admin, "1000")
        headers = {"Authorization": f"Bearer {key}"}
        key_id = httpx.get(f"{url}/v1/key", headers=headers).json()["id"]
        body = {"messages": [{"role": "user", "content": "the same words every time"}], "max_tokens": 16,
                "model": "acme/paid"}
        answered: list[tuple[float, str]] = []  # (when, decision id)
        stop_load = threading.Event()

        def load(stream: bool) -> None:
            sent = {**body, "stream": True} if stream else body
            with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
                while not stop_load.is_set():
                    try:
                        r = c.post("/v1/chat/completions", json=sent)
                        if r.status_code == 200 and (not stream or r.text.rstrip().endswith("data: [DONE]")):
                            answered.append((time.monotonic(), r.headers["x-specway-decision-id"]))
                    except httpx.HTTPError:
                        return  # the process is gone

        threads = [threading.Thread(target=load, args=(i % 2 == 1,)) for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(random.uniform(1.5, 4))  # a kill at any moment: mid-request, mid-flush, between flushes
        killed_at = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        stop_load.set()
        for t in threads:
            t.join(30)
    db = tmp_path / "specway.db"
    assert _held(db) != (0, Decimal(0))  # the dead process's lease
    spend, recorded, costs, usage = _books(db, key_id)
    assert spend == costs == usage > 0  # the books agree: what was lost is lost from all three alike
    assert recorded <= {i for _, i in answered}
    # Every answer older than one flush interval (and the writer's own transaction) was written before the kill.
    assert {i for at, i in answered if at < killed_at - flush - 0.5} <= recorded
    assert len(answered) > 20
    with _gateway_process(tmp_path, "second") as (_, url, _admin):
        # The live process frees what the dead one held once it has missed three heartbeats (a hang bound: 30 s).
        deadline = time.monotonic() + 30
        while _held(db) != (0, Decimal(0)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _held(db) == (0, Decimal(0))
        assert Decimal(httpx.get(f"{url}/v1/key", headers=headers).json()["spend"]["total"]) == spend  # kept
    assert _books(db, key_id) == (spend, recorded, costs, usage)


async def _arrivals(url: str, key: str, n: int) -> list[tuple[int, str | None, str]]:
    """`n` priced streams sent at once, each on its own connection: (status, Retry-After, error code or "")."""
    body = {**STREAM, "model": "acme/paid"}
    timeout = aiohttp.ClientTimeout(total=300)

    async def one(session: aiohttp.ClientSession) -> tuple[int, str | None, str]:
        async with session.post(f"{url}/v1/chat/completions", json=body,
                                headers={"Authorization": f"Bearer {key}"}) as r:
            text = await r.text()
            code = json.loads(text)["error"]["code"] if r.status != 200 else ""
            return r.status, r.headers.get("Retry-After"), code

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True),
                                     timeout=timeout) as session:
        return list(await asyncio.gather(*(one(session) for _ in range(n))))


def test_four_thousand_arrivals_on_two_workers_are_served_or_refused_at_once(fake: FakeUpstream,
                                                                             tmp_path: Path) -> None:
    """Priced streams on PostgreSQL, all arriving at once: no key lookup or hold fails for the store while it is up,
    anything refused is a 503 with Retry-After, and no worker is killed."""
    fake.reset()
    open_files(3 * ARRIVALS + 512)
    with fresh_postgres() as url:
        path = tmp_path / "specway.yaml"
        path.write_text(yaml.safe_dump(gateway_config(fake, url)))
        port = free_port()
        proc, admin = spawn(path, port, tmp_path / "serve.log", "--workers", "2")
        try:
            gateway = f"http://127.0.0.1:{port}"
            key = make_key(gateway, admin, "1000")
            answers = asyncio.run(_arrivals(gateway, key, ARRIVALS))
        finally:
            stop(proc)
    refused = [(status, retry, code) for status, retry, code in answers if status != 200]
    assert [a for a in refused if a[2] == "store_unavailable"] == []
    assert [a for a in refused if a[0] != 503 or not a[1]] == []
    assert len(answers) - len(refused) > ARRIVALS // 2, refused[:5]  # most are served
    log = (tmp_path / "serve.log").read_text()
    assert "died" not in log and "was not ready" not in log
