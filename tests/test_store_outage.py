"""The store going away is not a 500, and loses no charge (issue 15, item 3).

A real gateway on PostgreSQL reached through a TCP proxy this module controls (it can refuse new connections and
cut open ones, or freeze: accept and forward nothing), and on SQLite locked by another connection. While the store
is away: a key seen before keeps working from the cache on a free model, and on a priced one while its lease lasts;
an unknown key, and a priced model for a key with no lease, get 503 `store_unavailable` with Retry-After; nothing
hangs past the store's timeout; when it is back, everything works again and the decision records written meanwhile
reach the store.

Time bounds here are hang checks only (HANG), never measurements.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from tests.conftest import Live, fresh_postgres, serve

HANG = 15.0  # seconds: far above store.timeout_seconds (1 here) plus a margin; only a request that hangs fails it
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
FREE = {**CHAT, "model": "acme/free"}
PAID = {**CHAT, "model": "acme/paid"}


def config(store_url: str) -> dict[str, Any]:
    return {
        "store": {"url": store_url, "timeout_seconds": 1},
        "server": {"key_cache_seconds": 0.2},  # so that every cached entry is stale while the store is away
        "upstreams": {"echo": {"kind": "echo"}},
        "models": [
            {"id": "acme/free", "upstream": "echo", "name": "free"},
            {"id": "acme/paid", "upstream": "echo", "name": "paid", "price": {"input": "1", "output": "1"}},
        ],
    }


class Proxy:
    """127.0.0.1:<port> -> target, on its own event loop in a thread. `down()` refuses new connections and cuts
    open ones; `freeze()` accepts and holds every connection but forwards nothing; `up()` restores forwarding."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.mode = "up"
        self._loop = asyncio.new_event_loop()
        self._flowing: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.AbstractServer | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        self._call(self._start())
        return self

    def __exit__(self, *exc: object) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        assert self._server is not None and self._flowing is not None
        self._server.close()
        self._flowing.set()
        await self._cut()

    async def _cut(self) -> None:
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        if self.mode == "down":
            writer.transport.abort()  # the caller sees its connection reset at once
            return
        self._writers.add(writer)
        await self._flowing.wait()  # frozen: held, unanswered
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.add(up_writer)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        try:
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    async def _set(self, mode: str) -> None:
        assert self._flowing is not None
        self.mode = mode
        if mode == "up":
            self._flowing.set()
            return
        self._flowing.clear()
        if mode == "down":
            await self._cut()

    def down(self) -> None:
        self._call(self._set("down"))

    def freeze(self) -> None:
        self._call(self._set("frozen"))

    def up(self) -> None:
        self._call(self._set("up"))


def through(url: str, port: int) -> str:
    """The same database URL, reached through 127.0.0.1:<port>."""
    parts = urlsplit(url)
    user = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{user}@127.0.0.1:{port}" if user else f"127.0.0.1:{port}"))


def timed(call: Any) -> httpx.Response:
    started = time.monotonic()
    response = call()
    assert time.monotonic() - started < HANG, "a request hung while the store was away"
    return response


def post(client: httpx.Client, key: str, body: dict[str, Any]) -> httpx.Response:
    return timed(lambda: client.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}))


def assert_store_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "store_unavailable"
    assert int(response.headers["retry-after"]) >= 1


def wait_until(check: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)


def stored(gw: Live, decision_id: str) -> bool:
    return gw.run(gw.gateway.store.get_decision(decision_id)) is not None


@contextlib.contextmanager
def gateway_on(store_url: str, tmp_path: Path) -> Iterator[tuple[Live, httpx.Client]]:
    with serve(config(store_url), tmp_path) as gw, httpx.Client(base_url=gw.url, timeout=HANG * 2) as client:
        gw.run(gw.gateway.store.add_credit(gw.workspace_id, 100))
        yield gw, client


@pytest.fixture
def postgres_behind_proxy() -> Iterator[tuple[str, Proxy]]:
    with fresh_postgres() as url:
        parts = urlsplit(url)
        with Proxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
            yield through(url, proxy.port), proxy


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info and r.name.startswith("specway")]


@pytest.mark.parametrize("how", ["down", "frozen"])
def test_postgresql_away(postgres_behind_proxy: tuple[str, Proxy], tmp_path: Path, how: str,
                         caplog: pytest.LogCaptureFixture) -> None:
    store_url, proxy = postgres_behind_proxy
    caplog.set_level(logging.INFO)
    with gateway_on(store_url, tmp_path) as (gw, client):
        unknown = gw.create_key()  # exists in the store, never seen by the gateway
        revoked = gw.create_key()
        unleased = gw.create_key()  # seen, but never on a priced model: it holds no lease
        assert post(client, gw.key, FREE).status_code == 200  # the key is now in the cache
        assert post(client, gw.key, PAID).status_code == 200  # and holds a lease
        assert post(client, unleased, FREE).status_code == 200
        assert post(client, revoked, FREE).status_code == 200
        key_id = client.get("/v1/key", headers={"Authorization": f"Bearer {revoked}"}).json()["id"]
        assert client.delete(f"/v1/keys/{key_id}", headers=gw.headers).status_code == 200

        proxy.down() if how == "down" else proxy.freeze()
        time.sleep(0.3)  # past key_cache_seconds: the cached entry is stale
        away_ids = []
        for _ in range(3):
            answer = post(client, gw.key, FREE)
            assert answer.status_code == 200, answer.text
            away_ids.append(answer.headers["x-specway-decision-id"])
        assert_store_unavailable(post(client, unknown, FREE))
        assert_store_unavailable(post(client, revoked, FREE))  # revoked through this process: never served stale
        assert post(client, gw.key, PAID).status_code == 200  # its lease pays
        assert_store_unavailable(post(client, unleased, PAID))
        ready = timed(lambda: client.get("/readyz"))
        assert ready.status_code == 503 and ready.json()["error"]["code"] == "not_ready"
        assert timed(lambda: client.get(f"/v1/route/explain/{away_ids[0]}", headers=gw.headers)).status_code == 200
        assert not tracebacks(caplog), [r.getMessage() for r in tracebacks(caplog)]

        proxy.up()
        wait_until(lambda: client.get("/readyz").status_code == 200, "ready again")
        assert post(client, unknown, FREE).status_code == 200
        assert post(client, revoked, FREE).status_code == 401
        assert post(client, gw.key, PAID).status_code == 200
        for decision_id in away_ids:
            wait_until(lambda d=decision_id: stored(gw, d), f"decision {decision_id} in the store")
            found = client.get(f"/v1/route/explain/{decision_id}", headers=gw.headers)
            assert found.status_code == 200 and found.json()["model"] == "acme/free"
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("specway")]


def test_sqlite_locked_by_another_process(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "specway.db"
    caplog.set_level(logging.INFO)
    with gateway_on(f"sqlite:///{path}", tmp_path) as (gw, client):
        other = gw.create_key()
        assert post(client, gw.key, FREE).status_code == 200
        assert post(client, gw.key, PAID).status_code == 200

        holder = sqlite3.connect(path, isolation_level=None, timeout=0)
        try:
            holder.execute("BEGIN EXCLUSIVE")  # another process's writer, holding the file's lock
            time.sleep(0.3)
            away_ids = []
            for _ in range(3):
                answer = post(client, gw.key, FREE)
                assert answer.status_code == 200, answer.text
                away_ids.append(answer.headers["x-specway-decision-id"])
            # WAL readers still read: a key the gateway has not seen is looked up, found, and served.
            assert post(client, other, FREE).status_code == 200
            assert post(client, gw.key, PAID).status_code == 200  # its lease pays
            assert_store_unavailable(post(client, other, PAID))  # no lease, and none can be taken
            ready = timed(lambda: client.get("/readyz"))
            assert ready.status_code == 503 and ready.json()["error"]["code"] == "not_ready"
            time.sleep(0.5)  # the decision writer has tried (and failed) at least once
            assert not any(stored(gw, d) for d in away_ids)
            assert not tracebacks(caplog), [r.getMessage() for r in tracebacks(caplog)]
        finally:
            holder.execute("ROLLBACK")
            holder.close()

        wait_until(lambda: client.get("/readyz").status_code == 200, "ready again")
        assert post(client, gw.key, PAID).status_code == 200
        for decision_id in away_ids:
            wait_until(lambda d=decision_id: stored(gw, d), f"decision {decision_id} in the store")
            assert client.get(f"/v1/route/explain/{decision_id}", headers=gw.headers).status_code == 200


def _paid_stream(client: httpx.Client, key: str) -> httpx.Response:
    with client.stream("POST", "/v1/chat/completions", json={**PAID, "stream": True},
                       headers={"Authorization": f"Bearer {key}"}) as r:
        r.read()
        return r


def test_a_store_stall_during_priced_streams_loses_no_charge(postgres_behind_proxy: tuple[str, Proxy],
                                                             tmp_path: Path) -> None:
    store_url, proxy = postgres_behind_proxy
    with gateway_on(store_url, tmp_path) as (gw, client):
        answered = [_paid_stream(client, gw.key)]  # the key's lease is taken here
        assert answered[0].status_code == 200
        proxy.freeze()
        refused, stalled_until = 0, time.monotonic() + 20
        while time.monotonic() < stalled_until:
            r = _paid_stream(client, gw.key)
            if r.status_code == 200:
                assert r.text.rstrip().endswith("data: [DONE]")
                answered.append(r)
            else:  # the lease ran dry and the store cannot give another
                assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable", r.text
                refused += 1
            assert client.post("/v1/chat/completions", json=FREE, headers=gw.headers).status_code == 200
        assert len(answered) > 10  # the lease paid for requests while the store was away
        proxy.up()
        ids = [r.headers["x-specway-decision-id"] for r in answered]
        wait_until(lambda: all(gw.run(gw.gateway.store.get_decision(d)) for d in ids), "every record in the store")
        costs = [Decimal(gw.run(gw.gateway.store.get_decision(d))["cost"]) for d in ids]
        info = client.get("/v1/key", headers=gw.headers).json()
        assert Decimal(info["spend"]["total"]) == sum(costs, Decimal(0)) > 0
        assert Decimal(info["spend"]["reserved"]) == 0
