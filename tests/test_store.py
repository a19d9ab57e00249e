"""One suite, two backends: every store test runs on SQLite and on PostgreSQL, each time on a fresh database.

PostgreSQL: SPECWAY_TEST_PG_URL is the admin connection (default postgresql://postgres@127.0.0.1:5432/postgres);
each test creates `specway_test_<random>` there and drops it afterwards. Unreachable: skip, or fail when CI=true.
"""

from __future__ import annotations

import asyncio
import hashlib
import multiprocessing
import os
import re
import secrets
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal as D
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from handlers.store import PostgresStore, SQLiteStore, Store, open_store
from handlers.store.base import SECRET_PREFIX, Limits, Refused
from handlers.store.sqlbase import SQLStore

ADMIN_URL = os.environ.get("SPECWAY_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
NOW = datetime.now(UTC)
# Rollover tests run in the future: a key's first period starts at its creation.
NEXT_YEAR = NOW.year + 1


@dataclass
class Backend:
    kind: str
    url: str  # a file path for SQLite

    def new_store(self) -> SQLStore:
        return SQLiteStore(self.url) if self.kind == "sqlite" else PostgresStore(self.url)

    async def query(self, sql: str) -> list[tuple[Any, ...]]:
        """Run one literal statement on a connection of its own (no store code involved)."""
        if self.kind == "sqlite":
            with sqlite3.connect(self.url) as db:
                return db.execute(sql).fetchall()
        conn = await asyncpg.connect(self.url)
        try:
            return [tuple(r) for r in await conn.fetch(sql)]
        finally:
            await conn.close()

    async def cells(self) -> list[tuple[str, Any]]:
        """(table, value) for every cell of every table."""
        if self.kind == "sqlite":
            tables = [r[0] for r in await self.query("SELECT name FROM sqlite_master WHERE type = 'table'")]
        else:
            sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            tables = [r[0] for r in await self.query(sql)]
        return [(t, v) for t in tables for row in await self.query(f"SELECT * FROM {t}") for v in row]


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


async def _admin() -> asyncpg.Connection:
    try:
        return await asyncpg.connect(ADMIN_URL, timeout=5)
    except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
        where = urlsplit(ADMIN_URL)
        message = f"PostgreSQL at {where.hostname}:{where.port or 5432} unreachable: {type(exc).__name__}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(params=["sqlite", "postgresql"])
async def backend(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[Backend]:
    if request.param == "sqlite":
        yield Backend("sqlite", str(tmp_path / "store.db"))
        return
    admin = await _admin()
    name = f"specway_test_{secrets.token_hex(6)}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield Backend("postgresql", _with_database(ADMIN_URL, name))
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[SQLStore]:
    opened = backend.new_store()
    await opened.open()
    yield opened
    await opened.close()


async def reserve_or_none(store: Store, key_id: str, amount: D, now: datetime = NOW) -> str | None:
    try:
        return await store.reserve(key_id, amount, now)
    except Refused:
        return None


async def funded_key(store: Store, credit: D = D(100), limits: Limits | None = None) -> tuple[str, str]:
    ws = await store.create_workspace("team", credit)
    key, _ = await store.create_key(ws.id, "k", ("inference",), limits=limits)
    return ws.id, key.id


# workspaces and keys


async def test_workspaces(store: Store) -> None:
    a = await store.create_workspace("alpha")
    b = await store.create_workspace("beta", D("12.50"))
    assert re.fullmatch(r"ws_[0-9a-f]{16}", a.id)
    assert (a.credit, a.reserved, a.spend_total, b.credit) == (D(0), D(0), D(0), D("12.50"))
    assert a.created_at.tzinfo is not None and a.created_at.utcoffset() == timedelta(0)
    assert await store.get_workspace(a.id) == a
    assert await store.get_workspace("ws_missing") is None
    assert [w.id for w in await store.list_workspaces()] == [a.id, b.id]
    renamed = await store.rename_workspace(a.id, "alpha 2")
    assert renamed is not None and renamed.name == "alpha 2" and (await store.get_workspace(a.id)) == renamed
    assert await store.rename_workspace("ws_missing", "x") is None
    await store.add_credit(a.id, D("0.1"))
    credited = await store.add_credit(a.id, D("0.2"))
    assert credited is not None and credited.credit == D("0.3") == (await store.get_workspace(a.id)).credit
    assert await store.add_credit("ws_missing", D(1)) is None
    with pytest.raises(TypeError):
        await store.add_credit(a.id, 0.1)  # type: ignore[arg-type]


async def test_create_and_find_keys(store: Store) -> None:
    ws = await store.create_workspace("w")
    other = await store.create_workspace("other")
    key, secret = await store.create_key(ws.id, "ci", ("inference", "models:read"), models=("gpt-x",), policy="cheap")
    other_key, _ = await store.create_key(other.id, "o", ("admin",))
    assert re.fullmatch(r"key_[0-9a-f]{16}", key.id)
    assert secret.startswith(SECRET_PREFIX) and len(secret) > 40
    assert key.hint == secret[:10] + "…"
    assert (key.scopes, key.models, key.policy, key.limits) == (
        ("inference", "models:read"),
        ("gpt-x",),
        "cheap",
        Limits(),
    )
    assert await store.key_by_secret(secret) == key == await store.get_key(key.id)
    assert await store.key_by_secret(secret[:-1] + ("A" if secret[-1] != "A" else "B")) is None
    assert await store.key_by_secret("") is None
    assert await store.get_key("key_missing") is None
    assert [k.id for k in await store.list_keys(ws.id)] == [key.id]
    assert [k.id for k in await store.list_keys()] == [key.id, other_key.id]
    with pytest.raises(LookupError):
        await store.create_key("ws_missing", "x", ("inference",))
    with pytest.raises(ValueError, match="unknown scopes"):
        await store.create_key(ws.id, "x", ("everything",))


async def test_secret_is_not_stored_in_clear(store: Store, backend: Backend) -> None:
    ws = await store.create_workspace("w")
    _, secret = await store.create_key(ws.id, "k", ("inference",))
    cells = [str(value) for _, value in await backend.cells()]
    body = secret[len(SECRET_PREFIX) :]
    assert not [c for c in cells if secret in c or body in c]
    assert hashlib.sha256(secret.encode()).hexdigest() in cells


async def test_update_key_each_field(store: Store) -> None:
    ws = await store.create_workspace("w")
    key, secret = await store.create_key(ws.id, "k", ("inference",))
    paris = timezone(timedelta(hours=1))
    later = datetime(NEXT_YEAR, 6, 1, 13, 0, tzinfo=paris)
    limits = Limits(D("2.50"), "monthly", rpm=60, tpm=10_000)
    for field, value, expected in [
        ("name", "renamed", "renamed"),
        ("scopes", ["inference", "key:read"], ("inference", "key:read")),
        ("models", ["m1", "m2"], ("m1", "m2")),
        ("models", None, None),
        ("policy", "fast", "fast"),
        ("expires_at", later, later),
        ("limits", limits, limits),
    ]:
        updated = await store.update_key(key.id, **{field: value})
        assert updated is not None and getattr(updated, field) == expected, field
        assert await store.get_key(key.id) == updated == await store.key_by_secret(secret)
    stored = await store.get_key(key.id)
    assert stored is not None and stored.expires_at is not None and stored.expires_at.tzinfo == UTC
    assert stored.period_start == NOW.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    with pytest.raises(ValueError, match="cannot update secret_hash"):
        await store.update_key(key.id, secret_hash="x")
    with pytest.raises(ValueError):
        await store.update_key(key.id, limits=Limits(budget_period="weekly"))  # type: ignore[arg-type]
    assert await store.update_key("key_missing", name="x") is None


async def test_revoke_and_expiry(store: Store) -> None:
    ws = await store.create_workspace("w")
    key, _ = await store.create_key(ws.id, "k", ("inference",), expires_at=NOW + timedelta(hours=1))
    assert key.active(NOW) and not key.active(NOW + timedelta(hours=2))
    revoked = await store.revoke_key(key.id)
    assert revoked is not None and revoked.revoked_at is not None and not revoked.active(NOW)
    again = await store.revoke_key(key.id)
    assert again is not None and again.revoked_at == revoked.revoked_at
    assert await store.revoke_key("key_missing") is None


async def test_touch_keys(store: Store) -> None:
    ws = await store.create_workspace("w")
    a, _ = await store.create_key(ws.id, "a", ("inference",))
    b, _ = await store.create_key(ws.id, "b", ("inference",))
    t1, t2 = NOW + timedelta(seconds=1), NOW + timedelta(seconds=2)
    await store.touch_keys({})
    await store.touch_keys({a.id: t2, b.id: t1, "key_missing": t1})
    await store.touch_keys({a.id: t1})  # older: ignored
    assert [(await store.get_key(k.id)).last_used_at for k in (a, b)] == [t2, t1]  # type: ignore[union-attr]


# metering


async def test_reserve_settle_release_exact(store: Store) -> None:
    ws_id, key_id = await funded_key(store, D("10.00"), Limits(D("5.00")))
    first = await store.reserve(key_id, D("0.10"), NOW)
    second = await store.reserve(key_id, D("0.20"), NOW)
    assert re.fullmatch(r"rsv_[0-9a-f]+", first) and first != second
    key, ws = await store.get_key(key_id), await store.get_workspace(ws_id)
    assert key is not None and ws is not None and key.reserved == D("0.30") == ws.reserved
    await store.settle(first, D("0.07"))
    await store.settle(first, D("5.00"))  # idempotent: the first settle stands
    await store.release(first)
    await store.release(second)
    await store.release(second)
    await store.settle(second, D(1))
    key, ws = await store.get_key(key_id), await store.get_workspace(ws_id)
    assert key is not None and ws is not None
    assert (key.reserved, key.spend_total, key.spend_period) == (D(0), D("0.07"), D("0.07"))
    assert (ws.reserved, ws.spend_total, ws.credit) == (D(0), D("0.07"), D("9.93"))
    with pytest.raises(LookupError):
        await store.settle("rsv_missing", D(1))
    with pytest.raises(LookupError):
        await store.reserve("key_missing", D(1), NOW)
    with pytest.raises(ValueError):
        await store.reserve(key_id, D(-1), NOW)


async def test_refused_budget(store: Store) -> None:
    _, key_id = await funded_key(store, limits=Limits(D("1.50")))
    await store.settle(await store.reserve(key_id, D("1.20"), NOW), D("1.20"))
    await store.reserve(key_id, D("0.30"), NOW)
    with pytest.raises(Refused) as refused:
        await store.reserve(key_id, D("0.05"), NOW)
    assert refused.value.reason == "budget"
    expected = "over the key's total budget: spent 1.20 + held 0.30 + this request up to 0.05 exceeds 1.50"
    assert refused.value.message == expected == str(refused.value)
    assert await store.reserve(key_id, D(0), NOW)  # nothing to pay: always allowed


async def test_refused_credit(store: Store) -> None:
    _, key_id = await funded_key(store, D("0.40"))
    await store.reserve(key_id, D("0.35"), NOW)
    with pytest.raises(Refused) as refused:
        await store.reserve(key_id, D("0.10"), NOW)
    assert refused.value.reason == "credit"
    assert refused.value.message == "out of credit: balance 0.40, held 0.35, this request needs up to 0.10"
    assert await store.reserve(key_id, D(0), NOW)
    assert await reserve_or_none(store, key_id, D("0.05")) is not None  # exactly to zero is fine
    _, broke = await funded_key(store, D(0))
    with pytest.raises(Refused, match="out of credit: balance 0.00, held 0.00, this request needs up to 0.000125"):
        await store.reserve(broke, D("0.000125"), NOW)


async def test_settle_may_cost_more_than_held(store: Store) -> None:
    ws_id, key_id = await funded_key(store, D("1.00"))
    await store.settle(await store.reserve(key_id, D("0.10"), NOW), D("1.25"))
    ws = await store.get_workspace(ws_id)
    assert ws is not None and (ws.credit, ws.reserved) == (D("-0.25"), D(0))
    with pytest.raises(Refused, match="balance -0.25"):
        await store.reserve(key_id, D("0.01"), NOW)


@pytest.mark.parametrize(
    ("period", "before", "after"),
    [
        ("daily", datetime(NEXT_YEAR, 3, 10, 23, 59, 59, tzinfo=UTC), datetime(NEXT_YEAR, 3, 11, 0, 0, 1, tzinfo=UTC)),
        ("monthly", datetime(NEXT_YEAR, 1, 31, 23, 0, tzinfo=UTC), datetime(NEXT_YEAR, 2, 1, 0, 0, tzinfo=UTC)),
        ("monthly", datetime(NEXT_YEAR, 12, 31, 23, 0, tzinfo=UTC), datetime(NEXT_YEAR + 1, 1, 1, 1, 0, tzinfo=UTC)),
    ],
)
async def test_budget_period_rolls_over(store: Store, period: str, before: datetime, after: datetime) -> None:
    _, key_id = await funded_key(store, limits=Limits(D("1.00"), period))  # type: ignore[arg-type]
    await store.settle(await store.reserve(key_id, D("0.80"), before), D("0.80"))
    assert await reserve_or_none(store, key_id, D("0.30"), before) is None
    held = await store.reserve(key_id, D("0.30"), after)
    key = await store.get_key(key_id)
    assert key is not None
    assert (key.spend_period, key.spend_total, key.reserved) == (D(0), D("0.80"), D("0.30"))
    assert key.period_start == after.replace(hour=0, minute=0, second=0) and key.period_start.tzinfo == UTC
    await store.settle(held, D("0.30"))
    assert await reserve_or_none(store, key_id, D("0.71"), after + timedelta(minutes=1)) is None
    assert await reserve_or_none(store, key_id, D("0.70"), before) is not None  # the past does not roll back


async def test_total_budget_never_rolls(store: Store) -> None:
    _, key_id = await funded_key(store, limits=Limits(D("1.00"), "total"))
    await store.settle(await store.reserve(key_id, D("1.00"), NOW), D("1.00"))
    assert await reserve_or_none(store, key_id, D("0.01"), NOW + timedelta(days=400)) is None


async def test_changing_the_period_counts_settled_spend(store: Store) -> None:
    _, key_id = await funded_key(store, limits=Limits(D(5)))
    await store.settle(await store.reserve(key_id, D("0.40"), NOW), D("0.40"))
    daily = await store.update_key(key_id, limits=Limits(D(1), "daily"))
    assert daily is not None and daily.spend_period == D("0.40")  # settled today
    total = await store.update_key(key_id, limits=Limits(D(1), "total"))
    assert total is not None and (total.spend_period, total.period_start) == (D("0.40"), None)


async def test_release_stale(store: SQLStore) -> None:
    ws_id, key_id = await funded_key(store, D(1))
    old = await store.reserve(key_id, D("0.50"), NOW - timedelta(hours=2))
    fresh = await store.reserve(key_id, D("0.25"), NOW)
    assert await store.release_stale(NOW - timedelta(hours=1)) == 1
    assert await store.release_stale(NOW - timedelta(hours=1)) == 0
    await store.settle(old, D(1))  # already released: no effect
    await store.settle(fresh, D("0.25"))
    ws = await store.get_workspace(ws_id)
    assert ws is not None and (ws.credit, ws.reserved) == (D("0.75"), D(0))


# concurrency: never overspend, whoever asks at the same time


async def _race(stores: list[SQLStore], key_id: str, amount: D, n: int = 50) -> int:
    async def one(i: int) -> bool:
        held = await reserve_or_none(stores[i % len(stores)], key_id, amount)
        if held is not None and i % 2:
            await stores[i % len(stores)].settle(held, amount)
        return held is not None

    return sum(await asyncio.gather(*(one(i) for i in range(n))))


async def _limited_key(store: Store, limit: str) -> tuple[str, str]:
    """A key whose budget, or whose workspace's credit, pays for exactly ten holds of 0.10."""
    if limit == "budget":
        return await funded_key(store, D(100), Limits(D("1.00")))
    return await funded_key(store, D("1.00"), Limits(D("5.00")))


async def _assert_ten_paid(store: Store, ws_id: str, key_id: str) -> None:
    key, ws = await store.get_key(key_id), await store.get_workspace(ws_id)
    assert key is not None and ws is not None
    assert key.spend_period + key.reserved == D("1.00") == ws.spend_total + ws.reserved
    assert ws.credit - ws.reserved >= 0


@pytest.mark.parametrize("limit", ["budget", "credit"])
async def test_concurrent_reserves_never_overspend(store: SQLStore, backend: Backend, limit: str) -> None:
    ws_id, key_id = await _limited_key(store, limit)
    second = backend.new_store()  # a second pool / connection, as another worker process would have
    await second.open()
    try:
        assert await _race([store, second], key_id, D("0.10")) == 10
    finally:
        await second.close()
    await _assert_ten_paid(store, ws_id, key_id)


def _reserve_in_process(kind: str, url: str, key_id: str, n: int, start: Any, results: Any) -> None:
    async def run() -> int:
        worker = Backend(kind, url).new_store()
        await worker.open()
        try:
            await asyncio.to_thread(start.wait)
            return await _race([worker], key_id, D("0.10"), n)
        finally:
            await worker.close()

    results.put(asyncio.run(run()))


@pytest.mark.parametrize("limit", ["budget", "credit"])
async def test_two_processes_never_overspend(store: SQLStore, backend: Backend, limit: str) -> None:
    ws_id, key_id = await _limited_key(store, limit)
    spawn = multiprocessing.get_context("spawn")
    start, results = spawn.Barrier(2), spawn.Queue()
    workers = [
        spawn.Process(target=_reserve_in_process, args=(backend.kind, backend.url, key_id, 25, start, results))
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    counts = [await asyncio.to_thread(results.get, timeout=60) for _ in workers]
    for worker in workers:
        await asyncio.to_thread(worker.join, 10)
        assert worker.exitcode == 0
    assert sum(counts) == 10
    await _assert_ten_paid(store, ws_id, key_id)


# decision records


async def test_decisions_round_trip_and_prune(store: Store) -> None:
    old = {"id": "dec_old", "created_at": "2020-01-01T00:00:00+00:00", "workspace_id": "ws_1", "key_id": "key_1"}
    new = {
        "id": "dec_new",
        "created_at": NOW.isoformat(),
        "workspace_id": None,
        "key_id": "key_2",
        "candidates": [{"model": "m", "price": "0.0001", "ok": True, "score": 0.5}],
        "text": "naïve ✓",
    }
    await store.save_decisions([old, new])
    await store.save_decisions([])
    assert await store.get_decision("dec_old") == old
    assert await store.get_decision("dec_new") == new
    assert await store.get_decision("dec_missing") is None
    await store.save_decisions([old | {"note": "again"}])
    assert await store.get_decision("dec_old") == old | {"note": "again"}
    assert await store.prune_decisions(datetime(2021, 1, 1, tzinfo=UTC)) == 1
    assert await store.get_decision("dec_old") is None and await store.get_decision("dec_new") == new
    with pytest.raises(ValueError):
        await store.save_decisions([{"id": "no_time"}])


# migrations and connections


async def _open_together(stores: list[SQLStore]) -> None:
    failed = [r for r in await asyncio.gather(*(s.open() for s in stores), return_exceptions=True) if r is not None]
    assert not failed


_OLD_HASH = hashlib.sha256(b"sk-sw-old").hexdigest()
_V1_ROWS = [
    (
        "INSERT INTO workspaces (id, name, credit, reserved, spend_total, created_at) "
        "VALUES ('ws_00000000000000aa', 'kept', '7.25', '0', '0', '2024-01-01T00:00:00.000000+00:00')"
    ),
    (
        "INSERT INTO keys (id, workspace_id, name, secret_hash, hint, scopes, created_at) "
        f"VALUES ('key_00000000000000aa', 'ws_00000000000000aa', 'old', '{_OLD_HASH}', 'sk-sw-old…', "
        """'["inference"]', '2024-01-01T00:00:00.000000+00:00')"""
    ),
]


async def test_migrations_upgrade_and_keep_rows(backend: Backend) -> None:
    first = backend.new_store()
    await first.open(target=1)
    await first.close()
    assert first.migrated == (1,)
    for statement in _V1_ROWS:
        await backend.query(statement)
    stores = [backend.new_store() for _ in range(3)]
    try:
        await _open_together(stores)  # three workers starting at once
        assert sorted(s.migrated for s in stores) == [(), (), (2,)]
        assert [r[0] for r in await backend.query("SELECT version FROM schema_version ORDER BY version")] == [1, 2]
        ws = await stores[0].get_workspace("ws_00000000000000aa")
        assert ws is not None and ws.credit == D("7.25") and ws.created_at == datetime(2024, 1, 1, tzinfo=UTC)
        key = await stores[1].key_by_secret("sk-sw-old")
        assert key is not None and key.scopes == ("inference",) and key.limits == Limits()
        await stores[2].settle(await stores[2].reserve(key.id, D("0.25"), NOW), D("0.25"))
        assert (await stores[0].get_workspace(ws.id)).credit == D("7.00")  # type: ignore[union-attr]
    finally:
        for s in stores:
            await s.close()


async def test_fresh_databases_migrate_once_under_concurrent_opens(backend: Backend) -> None:
    stores = [backend.new_store() for _ in range(3)]
    try:
        await _open_together(stores)
        assert sorted(s.migrated for s in stores) == [(), (), (1, 2)]
        await stores[0].ping()
    finally:
        for s in stores:
            await s.close()
    with pytest.raises(RuntimeError):
        await stores[0].ping()


def test_open_store_urls(tmp_path: Any) -> None:
    cases = {
        "sqlite:///data/specway.db": "data/specway.db",
        "sqlite:////var/lib/specway.db": "/var/lib/specway.db",
        "specway.db": "specway.db",
        str(tmp_path / "x.db"): str(tmp_path / "x.db"),
    }
    for url, path in cases.items():
        opened = open_store(url)
        assert isinstance(opened, SQLiteStore) and opened.path == path, url
    for url in ("postgresql://u:pw@db/specway", "postgres://u@db/specway"):
        opened = open_store(url)
        assert isinstance(opened, PostgresStore) and opened.url == url
    with pytest.raises(ValueError, match="'mysql'") as error:
        open_store("mysql://admin:hunter2@db/specway")
    assert "hunter2" not in str(error.value)
    with pytest.raises(ValueError):
        open_store("sqlite://relative.db")
