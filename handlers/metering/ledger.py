"""The ledger: each process's money in memory, so that a priced request never waits on the store.

A **lease** is a durable hold on part of a key's budget and its workspace's credit, taken from the store in one
transaction like any reservation. Requests draw their worst case from their key's lease in memory and settle into
it; the writer (one Periodic for settlements and decision records, see gateway.py) syncs every lease each flush:
one transaction charges what its requests spent and resizes it. So the store never holds less than what this
process's requests may spend, and every worker and replica together never spend past a budget or a balance.

A lease is sized to a share of what the key could still hold (at most `requests` worst cases), so the last of a
balance goes to whoever asks: when that share is less than `minimum` worst cases, no lease is taken, requests hold
directly in the store one by one (exact, the old path), and a lease already held is given back once nothing draws
on it. A lease no request drew on for a while is given back too.

What a crash loses: the spending of one flush interval (kill -9), and the records of the same requests: a lease's
sync writes the records of what it charges in the same transaction. The lease itself is released by a live process
once the dead one has missed its heartbeats (gateway.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from functools import partial
from typing import Any, Protocol

from generated.config import LedgerSettings
from handlers.errors import StoreUnavailable
from handlers.metering import money
from handlers.store.base import Key, LeaseReport, Outage, Store

log = logging.getLogger("specway.ledger")
_IDLE_FLUSHES = 5  # a lease nothing drew on for this many flush intervals is given back


@dataclass(eq=False, slots=True)
class Lease:
    key_id: str
    id: str | None = None  # its reservation in the store; None while none is held
    amount: Decimal = Decimal(0)  # held in the store
    spent: Decimal = Decimal(0)  # settled by its requests, not yet written to the store
    in_flight: Decimal = Decimal(0)  # held by its requests now
    drawn: Decimal = Decimal(0)  # drawn by its requests since the writer last charged it
    charged_at: float = field(default_factory=time.monotonic)  # when the writer last charged it
    open: bool = False  # requests may draw on it
    unit: Decimal = Decimal(0)  # the largest worst case drawn: what the lease is sized in
    drawn_at: float = field(default_factory=time.monotonic)  # when a request last drew on it
    retry_at: float = 0.0  # monotonic: no use asking the store for a lease before then
    waiting: int = 0  # requests waiting for it to be synced: a burst, which the sync sizes it for
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # held by a sync of it (syncing())
    synced: asyncio.Event = field(default_factory=asyncio.Event)  # clear while a sync runs

    def __post_init__(self) -> None:
        self.synced.set()

    def free(self) -> Decimal:
        return self.amount - self.spent - self.in_flight

    def draw(self, worst: Decimal) -> bool:
        if not self.open or self.free() < worst:
            return False
        self.in_flight += worst
        self.drawn += worst
        self.drawn_at = time.monotonic()
        return True


@contextlib.asynccontextmanager
async def syncing(lease: Lease) -> AsyncIterator[None]:
    """Under the lease's lock, for a sync of it: `synced` is clear meanwhile."""
    async with lease.lock:
        lease.synced.clear()
        try:
            yield
        finally:
            lease.synced.set()


class PaidRecords(Protocol):
    def paid(self, lease: object) -> list[dict[str, Any]]: ...

    def written(self, lease: object, ids: list[str]) -> None: ...


class Ledger:
    def __init__(self, store: Store, settings: LedgerSettings | None = None) -> None:
        settings = settings or LedgerSettings()
        self.store = store
        self.flush_seconds = float(settings.flush_seconds)
        self._share = Decimal(str(settings.lease_share))
        self._requests = settings.lease_requests
        self._minimum = settings.lease_minimum_requests
        self._leases: dict[str, Lease] = {}
        self._settlements: dict[str, Decimal | None] = {}  # direct holds whose settlement waits for the store
        self._outage = Outage("settlements", "what was spent stays in memory and is written when it is back", log)
        # The writer and a read that writes first (GET /v1/usage, GET /v1/route/decisions) may flush at once: one
        # at a time, or both would forget the same idle lease.
        self._flushing = asyncio.Lock()
        self.wake = lambda: None  # the writer's, set by the gateway: a lease runs low
        self.records: PaidRecords | None = None  # the recorder, set by the gateway: each sync writes its records

    # the request's path
    async def draw(self, key: Key, worst: Decimal) -> Lease | None:
        """Hold `worst` on the key's lease; None when no lease can pay (then the caller holds in the store)."""
        lease = self._leases.get(key.id)
        if lease is None:
            lease = self._leases[key.id] = Lease(key.id)
        elif lease.draw(worst):
            if lease.free() * 2 < lease.amount:
                self.wake()  # renewed in the background, before it runs dry
            return lease
        lease.waiting += 1
        try:
            while True:
                if time.monotonic() < lease.retry_at:
                    return None
                if not lease.synced.is_set():  # a sync runs: its end wakes every request waiting for it at once
                    await lease.synced.wait()  # (its lock would let them through one per turn of a busy loop)
                    if lease.draw(worst):
                        return lease
                    continue
                async with syncing(lease):
                    if lease.draw(worst):
                        return lease
                    lease.unit, lease.drawn_at = max(lease.unit, worst), time.monotonic()
                    try:
                        await self._sync(lease, reopen=True, charge=False)  # the writer charges: none waits on it
                    except StoreUnavailable:
                        lease.retry_at = time.monotonic() + self.flush_seconds
                        return None
                    return lease if lease.draw(worst) else None
        finally:
            lease.waiting -= 1

    def settle(self, lease: Lease, held: Decimal, cost: Decimal | None) -> None:
        """A request that drew `held` finished: it spent `cost` (None: nothing)."""
        lease.in_flight -= held
        if cost:
            lease.spent += cost

    def later(self, reservation: str, cost: Decimal | None) -> None:
        """A direct hold the store could not settle (or release, None) now: the writer retries until it takes it."""
        self._settlements[reservation] = cost
        self.wake()

    # the writer's
    async def flush(self, final: bool = False) -> None:
        """Write every lease's spending and resize it; with `final`, give every lease back (shutdown)."""
        async with self._flushing:
            await self._flush(final)

    async def _flush(self, final: bool) -> None:
        for reservation, cost in list(self._settlements.items()):
            try:
                await self.store.finish(reservation, cost, money.finish)
            except StoreUnavailable as away:
                self._outage.down(away.reason)
                return
            del self._settlements[reservation]
        idle_since = time.monotonic() - _IDLE_FLUSHES * self.flush_seconds
        for key_id, lease in list(self._leases.items()):
            async with syncing(lease):
                if final or lease.drawn_at < idle_since:
                    lease.open = False
                if lease.id is not None or lease.spent:
                    try:
                        await self._sync(lease)
                    except StoreUnavailable as away:
                        self._outage.down(away.reason)
                        return
                if lease.id is None and not lease.in_flight and not lease.spent and not lease.open:
                    del self._leases[key_id]
        self._outage.up()

    async def write_now(self) -> None:
        """Write what this process's requests spent before a read of spend or credit, so that it shows them.
        Nothing else changes (no lease closes for it); a store that is away makes the read itself fail."""
        for lease in list(self._leases.values()):
            if lease.spent:
                async with syncing(lease):
                    with contextlib.suppress(StoreUnavailable):
                        await self._sync(lease)

    def leased(self) -> bool:
        """Whether a lease of this process still holds money in the store."""
        return any(lease.id is not None for lease in self._leases.values())

    def unwritten(self) -> tuple[Decimal, int]:
        """What a stop now would lose: the spending not yet in the store, and settlements waiting for it."""
        return sum((lease.spent for lease in self._leases.values()), Decimal(0)), len(self._settlements)

    def _requests_for(self, lease: Lease, uncharged: Decimal) -> int:
        """How many worst cases a lease should hold: `lease_requests`, or, when its requests need more, twice what
        they draw in one flush interval (what they drew since the writer last charged it, scaled up to a whole
        interval when that was shorter, at most tenfold) or what they hold and spent, not yet charged (`uncharged`
        stays in it until the writer charges it), whichever is more, and what waits for it; the share rule still
        bounds it. Sized only from what was held, a lease the writer charged fell back to `lease_requests` and,
        under a steady load of more than that per interval, ran dry again and again, and each time the requests
        arriving waited for a store round trip behind the writer's (bench/README.md, "Leases sized by one
        interval")."""
        if not lease.unit:
            return self._requests
        since = time.monotonic() - lease.charged_at
        interval = lease.drawn * Decimal(min(10.0, max(1.0, self.flush_seconds / max(since, 1e-3))))
        demand = max(lease.in_flight + uncharged, interval)
        return max(self._requests, 2 * (math.ceil(demand / lease.unit) + lease.waiting))

    async def _sync(self, lease: Lease, reopen: bool = False, charge: bool = True) -> None:
        """Under the lease's lock; `reopen` for a request that wants to draw; without `charge` it is only resized
        (what was spent stays held in it, to be charged with its records). A failure leaves the lease as it was:
        what was spent stays to be written."""
        # What its requests spent and their records, taken together (a settle and its record come with no await
        # between them): one transaction charges the one and writes the other.
        spent, records, drawn, now = Decimal(0), [], Decimal(0), time.monotonic()
        if charge:
            spent, records, drawn = lease.spent, self.records.paid(lease) if self.records is not None else [], lease.drawn
        wanted = lease.open or reopen  # else it is being given back: it keeps only what its requests hold
        requests = self._requests_for(lease, lease.spent - spent) if wanted else 0
        size = money.LeaseSize(unit=lease.unit, requests=requests,
                               minimum=self._minimum, share=self._share, grow_only=lease.open)
        report = LeaseReport(lease_id=lease.id, key_id=lease.key_id, spent=spent,
                             in_flight=lease.in_flight + lease.spent - spent)
        grant = await self.store.sync_lease(report, datetime.now(UTC), partial(money.sync_lease, size), records)
        lease.spent -= spent
        if charge:  # what was drawn meanwhile counts from when `drawn` was read
            lease.drawn -= drawn
            lease.charged_at = now
        if records and self.records is not None:
            self.records.written(lease, [r["id"] for r in records])
        lease.id, lease.amount = grant.lease_id, grant.amount
        lease.open = grant.useful and (lease.open or reopen)
        if not grant.useful:
            lease.retry_at = time.monotonic() + self.flush_seconds
