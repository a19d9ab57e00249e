"""Leases: the store's side (sized from what remains, charged, shrunk, rotated) and the ledger's (requests draw in
memory, the writer charges what they spent). Every test runs on SQLite and on PostgreSQL (tests/store_support.py)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from decimal import Decimal as D
from functools import partial
from types import SimpleNamespace
from typing import Any

import pytest

from generated.config import LedgerSettings
from handlers.metering import ledger as ledger_module
from handlers.metering import money
from handlers.metering.ledger import Ledger
from handlers.store.base import LeaseGrant, LeaseReport, Limits
from handlers.store.sqlbase import LEASE_ROTATE, SQLStore
from tests.store_support import (
    NOW,
    Backend,
    fixture_backend,  # noqa: F401  (a fixture)
    fixture_store,  # noqa: F401  (a fixture)
    in_two_processes,
)
from tests.test_store_metering import funded_key, reserve_or_none

UNIT = D("0.10")  # one request's worst case in these tests


async def sync(store: SQLStore, key_id: str, lease_id: str | None = None, spent: D = D(0), in_flight: D = D(0),
               grow_only: bool = True, now: datetime = NOW) -> LeaseGrant:
    """A lease of at most 64 worst cases, useful from 4, a quarter of what remains."""
    report = LeaseReport(lease_id=lease_id, key_id=key_id, spent=spent, in_flight=in_flight)
    size = money.LeaseSize(unit=UNIT, requests=64, minimum=4, share=D("0.25"), grow_only=grow_only)
    return await store.sync_lease(report, now, partial(money.sync_lease, size))


async def held(store: SQLStore, key_id: str) -> tuple[D, D]:
    """(what the store holds for the key, what reads show as held by requests in flight)."""
    async with store._read() as conn:
        raw = D((await conn.fetchrow("SELECT reserved FROM keys WHERE id = $1", key_id))["reserved"])
    key = await store.get_key(key_id)
    assert key is not None
    return raw, key.reserved


async def test_a_lease_is_a_share_of_what_remains_and_charges_what_was_spent(store: SQLStore) -> None:
    ws_id, key_id = await funded_key(store, D(100), Limits(D("20.00")))
    grant = await sync(store, key_id)
    assert grant.lease_id and grant.useful and grant.amount == D("5.00")  # a quarter of the budget's 20
    assert await held(store, key_id) == (D("5.00"), D(0))  # the float is not "held by requests in flight"
    grant = await sync(store, key_id, grant.lease_id, spent=D("1.25"), in_flight=D("0.5"))
    # 1.25 spent leaves the lease; what remains to hold is 20 - 1.25, a quarter of it is 4.6875 (money's precision)
    assert grant.amount == D("4.6875")
    key, ws = await store.get_key(key_id), await store.get_workspace(ws_id)
    assert key is not None and ws is not None
    assert (key.spend_total, key.spend_period, ws.credit, ws.spend_total) == (D("1.25"), D("1.25"), D("98.75"), D("1.25"))
    assert key.reserved == ws.reserved == D("0.5")  # what its requests hold, as last written
    assert await reserve_or_none(store, key_id, D("14.06")) is not None  # the rest is free for others
    assert await reserve_or_none(store, key_id, D("0.01")) is None  # and nothing more: the lease holds its part


async def test_grow_only_never_shrinks_and_a_closed_lease_gives_back_all_but_in_flight(store: SQLStore) -> None:
    ws_id, key_id = await funded_key(store, D("4.00"))
    lease = await sync(store, key_id)
    assert lease.amount == D("1.00")
    assert await reserve_or_none(store, key_id, D("2.60")) is not None  # others took most of the rest
    grant = await sync(store, key_id, lease.lease_id, in_flight=D("0.3"))
    # A quarter of what remains (0.40 + 1.00) is 0.35, under 4 worst cases: not worth drawing on, but not shrunk
    # while requests may still be drawing on it.
    assert (grant.amount, grant.useful) == (D("1.00"), False)
    grant = await sync(store, key_id, lease.lease_id, in_flight=D("0.3"), grow_only=False)
    assert (grant.lease_id, grant.amount, grant.useful) == (lease.lease_id, D("0.3"), False)
    grant = await sync(store, key_id, lease.lease_id, spent=D("0.25"), grow_only=False)
    assert (grant.lease_id, grant.amount) == (None, D(0))  # closed: settled, nothing held
    ws = await store.get_workspace(ws_id)
    assert ws is not None and (ws.credit, ws.reserved) == (D("3.75"), D("2.60"))


async def test_too_little_left_means_no_lease(store: SQLStore) -> None:
    _, key_id = await funded_key(store, D(100), Limits(D("1.00")))  # ten worst cases: a quarter is under four
    grant = await sync(store, key_id)
    assert (grant.lease_id, grant.amount, grant.useful) == (None, D(0), False)
    assert await held(store, key_id) == (D(0), D(0))


async def test_a_lease_rotates_into_a_settled_row(store: SQLStore, backend: Backend) -> None:
    _, key_id = await funded_key(store, D(100))
    first = await sync(store, key_id)
    later = NOW + LEASE_ROTATE + timedelta(seconds=1)
    second = await sync(store, key_id, first.lease_id, spent=D("0.5"), now=later)
    assert second.lease_id not in (None, first.lease_id) and second.amount == D("6.40") - D("0.5") + D("0.5")
    rows = await backend.query(f"SELECT id, state, cost FROM reservations WHERE key_id = '{key_id}' ORDER BY created_at")
    assert [(r[0], r[1], D(str(r[2]))) for r in rows] == [(first.lease_id, "settled", D("0.5")),
                                                          (second.lease_id, "held", D(0))]
    key = await store.get_key(key_id)
    assert key is not None and key.spend_total == D("0.5") and await held(store, key_id) == (second.amount, D(0))


async def test_a_lease_released_as_a_dead_process_s_still_charges_what_it_spent(store: SQLStore) -> None:
    ws_id, key_id = await funded_key(store, D(10))
    lease = await sync(store, key_id)
    assert await store.release_stale(NOW + timedelta(days=1), money.finish) == 1  # the process looked dead
    grant = await sync(store, key_id, lease.lease_id, spent=D("0.7"))
    assert grant.lease_id not in (None, lease.lease_id)  # a new lease
    ws = await store.get_workspace(ws_id)
    assert ws is not None and ws.credit == D("9.3") and ws.spend_total == D("0.7")


async def test_releasing_a_dead_process_s_lease_keeps_what_it_had_charged(store: SQLStore, backend: Backend) -> None:
    """What the lease's syncs charged stays in its row: sums over reservations (a budget period) still equal spend."""
    _, key_id = await funded_key(store, D(10))
    lease = await sync(store, key_id)
    charged = await sync(store, key_id, lease.lease_id, spent=D("0.7"))
    assert charged.lease_id == lease.lease_id
    assert await store.release_stale(NOW + timedelta(days=1), money.finish) == 1  # the process looked dead
    rows = await backend.query(f"SELECT state, cost FROM reservations WHERE key_id = '{key_id}'")
    assert [(r[0], D(str(r[1]))) for r in rows] == [("released", D("0.7"))]
    key = await store.get_key(key_id)
    assert key is not None and key.spend_total == D("0.7") and key.reserved == D(0)
    daily = await store.update_key(key_id, limits=Limits(D(5), "daily"))  # a new period sums the reservations
    assert daily is not None and daily.spend_period == D("0.7")


async def test_a_burst_draws_on_the_lease_not_on_the_store(store: SQLStore) -> None:
    """A thousand requests at once: the lease grows with what waits for it, so (almost) none holds in the store."""
    _, key_id = await funded_key(store, D(1000))
    key = await store.get_key(key_id)
    assert key is not None
    ledger = Ledger(store, LedgerSettings(flush_seconds=60))
    drawn = await asyncio.gather(*(ledger.draw(key, UNIT) for _ in range(1000)))  # none settles meanwhile
    direct = sum(lease is None for lease in drawn)
    assert direct < 50, direct  # under 5 % (with 64 worst cases per lease, 936 would go to the store)
    assert (await held(store, key_id))[0] >= UNIT * (1000 - direct)


async def test_what_requests_spent_before_the_writer_charges_it_does_not_dry_the_lease(store: SQLStore) -> None:
    """Requests one after another, each settled at its worst case before the next: their spending stays in the
    lease until the writer charges it, so a lease sized without it runs dry after 64 and every later request held in
    the store (a transaction to resize, two to hold and settle), until the next flush."""
    _, key_id = await funded_key(store, D(1000))
    key = await store.get_key(key_id)
    assert key is not None
    ledger = Ledger(store, LedgerSettings(flush_seconds=60))
    direct = 0
    for _ in range(1000):
        lease = await ledger.draw(key, UNIT)
        if lease is None:
            direct += 1
        else:
            ledger.settle(lease, UNIT, UNIT)
    assert direct == 0
    assert (await held(store, key_id))[0] >= UNIT * 1000  # what was spent is still held, to be charged


async def test_a_steady_load_is_sized_for_by_the_writer_so_no_request_waits_for_the_store(store: SQLStore) -> None:
    """Rounds of 300 requests, each settled at its worst case, then the writer's flush (it charges what they
    spent). A lease charged back down to 64 worst cases ran dry again every round, and the requests then waited for
    a store round trip (behind the writer's, under load). Sized by what was drawn in the last interval, only the
    first round grows it."""
    _, key_id = await funded_key(store, D(1000))
    key = await store.get_key(key_id)
    assert key is not None
    ledger = Ledger(store, LedgerSettings(flush_seconds=60))
    calls = 0
    sync_lease = store.sync_lease

    async def counted(*args: Any, **kwargs: Any) -> LeaseGrant:
        nonlocal calls
        calls += 1
        return await sync_lease(*args, **kwargs)

    store.sync_lease = counted  # type: ignore[method-assign]
    waited = []
    for _ in range(5):
        calls = 0
        for _ in range(300):
            lease = await ledger.draw(key, UNIT)
            assert lease is not None
            ledger.settle(lease, UNIT, UNIT)
        waited.append(calls)
        await ledger.flush()
    assert waited[0] >= 1 and waited[1:] == [0, 0, 0, 0], waited
    ws = await store.get_workspace(key.workspace_id)
    assert ws is not None and ws.spend_total == UNIT * 1500  # every round charged


async def test_what_is_drawn_while_the_writer_charges_counts_from_when_it_began(store: SQLStore,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A sync takes a while under load; what its lease's requests draw meanwhile belongs to the next interval from
    the moment the sync read what was drawn. Counted from the sync's end instead, 0.3 s of draws looked like 0.1 s of
    them (tenfold, the most it scales), and the next charge sized the lease for six times the load (7,000 worst cases where 2,000 did)."""
    clock = [0.0]
    monkeypatch.setattr(ledger_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    _, key_id = await funded_key(store, D(100_000))  # the share rule stays far off
    key = await store.get_key(key_id)
    assert key is not None
    ledger = Ledger(store, LedgerSettings(flush_seconds=1))

    async def requests(n: int, start: float, end: float) -> None:
        for i in range(n):
            clock[0] = start + (end - start) * i / n
            lease = await ledger.draw(key, UNIT)
            assert lease is not None
            ledger.settle(lease, UNIT, UNIT)

    assert await ledger.draw(key, UNIT) is not None
    ledger._leases[key_id].charged_at = 0.0  # made on the real clock
    await requests(999, 0.0, 1.0)  # 1,000 worst cases a second
    gate, sync_lease = asyncio.Event(), store.sync_lease

    async def slow(*args: Any, **kwargs: Any) -> LeaseGrant:
        await gate.wait()
        return await sync_lease(*args, **kwargs)

    store.sync_lease = slow  # type: ignore[method-assign]
    clock[0] = 1.0
    writer = asyncio.create_task(ledger.flush())  # reads what was drawn at 1.0, then waits for the store
    await asyncio.sleep(0)
    await requests(200, 1.2, 1.5)  # within what the lease still holds
    gate.set()
    await writer
    clock[0] = 1.6
    await ledger.flush()  # 200 drawn in the 0.6 s since that sync began
    (lease,) = ledger._leases.values()
    assert lease.amount <= 2000 * UNIT, lease.amount / UNIT


async def test_requests_waiting_for_a_sync_are_all_served_when_it_ends(store: SQLStore) -> None:
    """Requests that find a lease dry while the writer syncs it wait for that sync, then draw together. Queued on
    its lock, they went through one per turn of the event loop: under load each turn is milliseconds, and the last
    of 32 waited a quarter of a second after the lease was full again."""
    _, key_id = await funded_key(store, D(1000))
    key = await store.get_key(key_id)
    assert key is not None
    ledger = Ledger(store, LedgerSettings(flush_seconds=60))
    for _ in range(64):  # the first lease: 64 worst cases, all held
        assert await ledger.draw(key, UNIT) is not None
    gate = asyncio.Event()
    sync_lease = store.sync_lease

    async def slow(*args: Any, **kwargs: Any) -> LeaseGrant:
        await gate.wait()
        return await sync_lease(*args, **kwargs)

    store.sync_lease = slow  # type: ignore[method-assign]
    writer = asyncio.create_task(ledger.flush())
    await asyncio.sleep(0)
    waiting = [asyncio.create_task(ledger.draw(key, UNIT)) for _ in range(32)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert not any(task.done() for task in waiting)
    gate.set()
    await writer
    turns = 0
    while not all(task.done() for task in waiting):
        await asyncio.sleep(0)
        turns += 1
    assert turns <= 3, turns
    assert all(task.result() is not None for task in waiting)


async def test_requests_draw_in_memory_and_the_writer_charges_them(store: SQLStore) -> None:
    ws_id, key_id = await funded_key(store, D(100))
    key = await store.get_key(key_id)
    assert key is not None
    ledger = Ledger(store, LedgerSettings(flush_seconds=60))
    leases = [await ledger.draw(key, UNIT) for _ in range(40)]
    assert all(lease is leases[0] for lease in leases)
    assert await held(store, key_id) == (UNIT * 64, D(0))  # one store round trip took the lease
    for lease in leases:
        assert lease is not None
        ledger.settle(lease, UNIT, D("0.07"))
    assert (await store.get_workspace(ws_id)).credit == D(100)  # type: ignore[union-attr]  # not written yet
    await ledger.flush()
    ws = await store.get_workspace(ws_id)
    assert ws is not None and (ws.credit, ws.spend_total, ws.reserved) == (D("97.20"), D("2.80"), D(0))
    await ledger.flush(final=True)  # shutdown: every lease given back
    assert await held(store, key_id) == (D(0), D(0)) and not ledger.leased()


async def test_two_flushes_at_once_give_a_lease_back_once(store: SQLStore) -> None:
    """The writer and a read that writes first (GET /v1/usage) may flush together; the second must not find the
    lease the first gave back (it raised KeyError, a 500 to the read)."""
    ws_id, key_id = await funded_key(store, D(100))
    key = await store.get_key(key_id)
    assert key is not None
    ledger = Ledger(store, LedgerSettings(flush_seconds=60))
    lease = await ledger.draw(key, UNIT)
    assert lease is not None
    ledger.settle(lease, UNIT, D("0.07"))
    await asyncio.gather(ledger.flush(final=True), ledger.flush(final=True), ledger.flush(final=True))
    ws = await store.get_workspace(ws_id)
    assert ws is not None and (ws.credit, ws.reserved) == (D("99.93"), D(0))
    assert await held(store, key_id) == (D(0), D(0)) and not ledger.leased()


def _spend_in_process(kind: str, url: str, key_id: str, n: int, start: Any, results: Any) -> None:
    """n requests of UNIT, one at a time in each of 8 tasks, through a ledger of this process; each settles for
    what it held. Returns how many were paid for."""

    async def run() -> int:
        from handlers.errors import StoreUnavailable
        from handlers.store.base import Refused

        store = Backend(kind, url).new_store()
        await store.open()
        ledger = Ledger(store, LedgerSettings(flush_seconds=0.05))
        key = await store.get_key(key_id)
        assert key is not None
        paid = 0

        async def writer() -> None:
            while True:
                await asyncio.sleep(ledger.flush_seconds)
                await ledger.flush()

        async def one() -> None:
            nonlocal paid
            for _ in range(n // 8):
                lease = await ledger.draw(key, UNIT)
                if lease is not None:
                    await asyncio.sleep(0.001)
                    ledger.settle(lease, UNIT, UNIT)
                    paid += 1
                    continue
                for _ in range(8):  # refused while leases give back what nothing draws on (the Meter's rule)
                    try:
                        rsv = await store.reserve(key.id, UNIT, NOW, money.hold)
                    except Refused as refused:
                        if not refused.leased:
                            return
                        await asyncio.sleep(ledger.flush_seconds / 2)
                        continue
                    except StoreUnavailable:
                        continue
                    await store.finish(rsv, UNIT, money.finish)
                    paid += 1
                    break

        background = asyncio.create_task(writer())
        try:
            await asyncio.to_thread(start.wait)
            await asyncio.gather(*(one() for _ in range(8)))
        finally:
            background.cancel()
            await ledger.flush(final=True)
            await store.close()
        return paid

    results.put(asyncio.run(run()))


async def test_two_processes_on_leases_spend_exactly_the_budget(store: SQLStore, backend: Backend) -> None:
    ws_id, key_id = await funded_key(store, D(1000), Limits(D("30.00")))  # 300 requests' worth
    counts = await in_two_processes(_spend_in_process, backend.kind, backend.url, key_id, 400)
    key, ws = await store.get_key(key_id), await store.get_workspace(ws_id)
    assert key is not None and ws is not None
    assert sum(counts) == 300 and all(counts), counts  # never more, and the last cents went to whoever asked
    assert (key.spend_total, key.reserved, ws.reserved, ws.credit) == (D("30.00"), 0, 0, D("970.00"))
