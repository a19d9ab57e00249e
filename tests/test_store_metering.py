"""The store's metering: reserve, settle and release against budgets and credit, budget periods, and concurrency that
never overspends, whoever asks at the same time (fixtures in tests/store_support.py)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal as D
from pathlib import Path
from typing import Any

import pytest

from handlers.metering import money
from handlers.store import SQLiteStore, Store
from handlers.store.base import Limits, Refused
from handlers.store.sqlbase import SQLStore
from tests.store_support import (
    NEXT_YEAR,
    NOW,
    Backend,
    fixture_backend,  # noqa: F401  (a fixture)
    fixture_store,  # noqa: F401  (a fixture)
)


async def reserve_or_none(store: Store, key_id: str, amount: D, now: datetime = NOW) -> str | None:
    try:
        return await store.reserve(key_id, amount, now, money.hold)
    except Refused:
        return None


async def funded_key(store: Store, credit: D = D(100), limits: Limits | None = None) -> tuple[str, str]:
    ws = await store.create_workspace("team", credit)
    key, _ = await store.create_key(ws.id, "k", ("inference",), limits=limits)
    return ws.id, key.id


# metering


async def test_reserve_settle_release_exact(store: Store) -> None:
    ws_id, key_id = await funded_key(store, D("10.00"), Limits(D("5.00")))
    first = await store.reserve(key_id, D("0.10"), NOW, money.hold)
    second = await store.reserve(key_id, D("0.20"), NOW, money.hold)
    assert re.fullmatch(r"rsv_[0-9a-f]+", first) and first != second
    key, ws = await store.get_key(key_id), await store.get_workspace(ws_id)
    assert key is not None and ws is not None and key.reserved == D("0.30") == ws.reserved
    await store.finish(first, D("0.07"), money.finish)
    await store.finish(first, D("5.00"), money.finish)  # idempotent: the first settle stands
    await store.finish(first, None, money.finish)
    await store.finish(second, None, money.finish)
    await store.finish(second, None, money.finish)
    key, ws = await store.get_key(key_id), await store.get_workspace(ws_id)
    assert key is not None and ws is not None
    assert (key.reserved, key.spend_total, key.spend_period) == (D(0), D("0.07"), D("0.07"))
    assert (ws.reserved, ws.spend_total, ws.credit) == (D(0), D("0.07"), D("9.93"))
    await store.finish(second, D(1), money.finish)  # released, then spent after all (test_release_stale): charged
    await store.finish(second, D(1), money.finish)  # once
    key, ws = await store.get_key(key_id), await store.get_workspace(ws_id)
    assert key is not None and ws is not None
    assert (key.reserved, key.spend_total, key.spend_period) == (D(0), D("1.07"), D("1.07"))
    assert (ws.reserved, ws.spend_total, ws.credit) == (D(0), D("1.07"), D("8.93"))
    with pytest.raises(LookupError):
        await store.finish("rsv_missing", D(1), money.finish)
    with pytest.raises(LookupError):
        await store.reserve("key_missing", D(1), NOW, money.hold)
    with pytest.raises(ValueError):
        await store.reserve(key_id, D(-1), NOW, money.hold)


async def test_refused_budget(store: Store) -> None:
    _, key_id = await funded_key(store, limits=Limits(D("1.50")))
    await store.finish(await store.reserve(key_id, D("1.20"), NOW, money.hold), D("1.20"), money.finish)
    await store.reserve(key_id, D("0.30"), NOW, money.hold)
    with pytest.raises(Refused) as refused:
        await store.reserve(key_id, D("0.05"), NOW, money.hold)
    assert refused.value.reason == "budget"
    expected = "over the key's total budget: spent 1.20 + held 0.30 + this request up to 0.05 exceeds 1.50"
    assert refused.value.message == expected == str(refused.value)
    assert await store.reserve(key_id, D(0), NOW, money.hold)  # nothing to pay: always allowed


async def test_refused_credit(store: Store) -> None:
    _, key_id = await funded_key(store, D("0.40"))
    await store.reserve(key_id, D("0.35"), NOW, money.hold)
    with pytest.raises(Refused) as refused:
        await store.reserve(key_id, D("0.10"), NOW, money.hold)
    assert refused.value.reason == "credit"
    assert refused.value.message == "out of credit: balance 0.40, held 0.35, this request needs up to 0.10"
    assert await store.reserve(key_id, D(0), NOW, money.hold)
    assert await reserve_or_none(store, key_id, D("0.05")) is not None  # exactly to zero is fine
    _, broke = await funded_key(store, D(0))
    with pytest.raises(Refused, match="out of credit: balance 0.00, held 0.00, this request needs up to 0.000125"):
        await store.reserve(broke, D("0.000125"), NOW, money.hold)


async def test_settle_may_cost_more_than_held(store: Store) -> None:
    ws_id, key_id = await funded_key(store, D("1.00"))
    await store.finish(await store.reserve(key_id, D("0.10"), NOW, money.hold), D("1.25"), money.finish)
    ws = await store.get_workspace(ws_id)
    assert ws is not None and (ws.credit, ws.reserved) == (D("-0.25"), D(0))
    with pytest.raises(Refused, match="balance -0.25"):
        await store.reserve(key_id, D("0.01"), NOW, money.hold)


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
    await store.finish(await store.reserve(key_id, D("0.80"), before, money.hold), D("0.80"), money.finish)
    assert await reserve_or_none(store, key_id, D("0.30"), before) is None
    held = await store.reserve(key_id, D("0.30"), after, money.hold)
    key = await store.get_key(key_id)
    assert key is not None
    assert (key.spend_period, key.spend_total, key.reserved) == (D(0), D("0.80"), D("0.30"))
    assert key.period_start == after.replace(hour=0, minute=0, second=0) and key.period_start.tzinfo == UTC
    await store.finish(held, D("0.30"), money.finish)
    assert await reserve_or_none(store, key_id, D("0.71"), after + timedelta(minutes=1)) is None
    assert await reserve_or_none(store, key_id, D("0.70"), before) is not None  # the past does not roll back


async def test_total_budget_never_rolls(store: Store) -> None:
    _, key_id = await funded_key(store, limits=Limits(D("1.00"), "total"))
    await store.finish(await store.reserve(key_id, D("1.00"), NOW, money.hold), D("1.00"), money.finish)
    assert await reserve_or_none(store, key_id, D("0.01"), NOW + timedelta(days=400)) is None


async def test_changing_the_period_counts_settled_spend(store: Store) -> None:
    _, key_id = await funded_key(store, limits=Limits(D(5)))
    await store.finish(await store.reserve(key_id, D("0.40"), NOW, money.hold), D("0.40"), money.finish)
    daily = await store.update_key(key_id, limits=Limits(D(1), "daily"))
    assert daily is not None and daily.spend_period == D("0.40")  # settled today
    total = await store.update_key(key_id, limits=Limits(D(1), "total"))
    assert total is not None and (total.spend_period, total.period_start) == (D("0.40"), None)


async def test_release_stale(store: SQLStore) -> None:
    ws_id, key_id = await funded_key(store, D(1))
    old = await store.reserve(key_id, D("0.50"), NOW - timedelta(hours=2), money.hold)
    fresh = await store.reserve(key_id, D("0.25"), NOW, money.hold)
    assert await store.release_stale(NOW - timedelta(hours=1), money.finish) == 1
    assert await store.release_stale(NOW - timedelta(hours=1), money.finish) == 0
    await store.finish(old, None, money.finish)  # already released: no effect
    await store.finish(fresh, D("0.25"), money.finish)
    ws = await store.get_workspace(ws_id)
    assert ws is not None and (ws.credit, ws.reserved) == (D("0.75"), D(0))
    await store.finish(old, D("0.50"), money.finish)  # its process was alive after all: what it spent is charged
    await store.finish(old, D("0.50"), money.finish)  # once
    ws = await store.get_workspace(ws_id)
    assert ws is not None and (ws.credit, ws.reserved, ws.spend_total) == (D("0.25"), D(0), D("0.75"))


async def test_holds_of_a_process_that_stopped_beating_are_released_by_a_live_one(backend: Backend) -> None:
    dead, live = backend.new_store(), backend.new_store()
    await dead.open()
    await live.open()
    try:
        assert dead.owner != live.owner
        ws_id, key_id = await funded_key(dead, D(10))
        await dead.heartbeat(NOW - timedelta(seconds=30))
        await live.heartbeat(NOW)
        orphan = await dead.reserve(key_id, D(2), NOW - timedelta(seconds=40), money.hold)
        await live.reserve(key_id, D(1), NOW - timedelta(seconds=40), money.hold)  # alive: kept
        assert await dead.release_orphans(NOW - timedelta(seconds=15), money.finish) == 0  # never its own
        assert await live.release_orphans(NOW - timedelta(minutes=1), money.finish) == 0  # it beat since
        assert await live.release_orphans(NOW - timedelta(seconds=15), money.finish) == 1
        ws = await live.get_workspace(ws_id)
        assert ws is not None and (ws.credit, ws.reserved) == (D(10), D(1))
        rows = await backend.query(f"SELECT state FROM reservations WHERE id = '{orphan}'")
        assert rows == [("released",)]
        assert [r[0] for r in await backend.query("SELECT id FROM owners")] == [live.owner]  # the dead one forgotten
        await live.retire()
        assert await backend.query("SELECT id FROM owners") == []
    finally:
        await dead.close()
        await live.close()


# concurrency: never overspend, whoever asks at the same time


async def _race(stores: list[SQLStore], key_id: str, amount: D, n: int = 50) -> int:
    async def one(i: int) -> bool:
        held = await reserve_or_none(stores[i % len(stores)], key_id, amount)
        if held is not None and i % 2:
            await stores[i % len(stores)].finish(held, amount, money.finish)
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


async def test_a_caller_cancelled_while_its_transaction_begins_leaves_the_writer_usable(tmp_path: Path) -> None:
    """SQLite runs a statement on its own thread whatever the caller does: a caller cancelled at any point of its
    transaction must not leave the connection inside it (every later write failed)."""
    store = SQLiteStore(str(tmp_path / "cancel.db"))
    await store.open()
    try:
        ws_id, key_id = await funded_key(store, D(100))
        for delay in [0, 0.0001, 0.0005, 0.001, 0.002, 0.005] * 5:
            task = asyncio.ensure_future(store.reserve(key_id, D("0.01"), NOW, money.hold))
            await asyncio.sleep(delay)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await store.finish(await store.reserve(key_id, D("0.01"), NOW, money.hold), D("0.01"), money.finish)
        ws = await store.get_workspace(ws_id)
        assert ws is not None and ws.spend_total == D("0.30")
    finally:
        await store.close()


async def test_many_rows_of_one_statement_are_one_transaction(store: SQLStore, backend: Backend) -> None:
    """Rows given at once go in as the backend takes them (PostgreSQL: in pieces of 20 while the loop is quiet; SQLite:
    in statements of many rows), all of them or none."""
    await store._transaction(lambda tx: tx.execute("CREATE TABLE pieces (id TEXT PRIMARY KEY CHECK (id <> 'r44'))"))
    rows = [(f"r{i}",) for i in range(45)]  # the last one refused, in the third piece
    with pytest.raises(Exception, match="(?i)check"):
        await store._transaction(lambda tx: tx.executemany("INSERT INTO pieces (id) VALUES ($1)", rows))
    assert await backend.query("SELECT count(*) FROM pieces") == [(0,)]
    await store._transaction(lambda tx: tx.executemany("INSERT INTO pieces (id) VALUES ($1)", rows[:44]))
    assert await backend.query("SELECT count(*) FROM pieces") == [(44,)]
