"""The money rules: what a key's budget and its workspace's credit still allow, whether a hold fits, how a
settlement and a lease's sync change the numbers, and how big a lease may be.

Pure functions of plain values (Decimals, the store's Key and Workspace): no store, no clock, no I/O. The store runs
them inside its transactions, on rows it has locked, and writes what they return (Store.reserve, finish,
sync_lease); the meter and the ledger say which rule each transaction runs.

Two numbers move together on a key and its workspace: `reserved` (held by requests and leases in flight) and the
spend (added to the spend totals and the key's period, taken from the workspace's credit).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from decimal import ROUND_DOWN, Decimal

from handlers.store.base import Books, Key, LeaseReport, Refused, Workspace
from handlers.store.values import fmt_money, period_floor

LEASE_STEP = Decimal("1e-9")  # lease sizes are rounded down to this, so that their sums never lose precision
_ZERO = Decimal(0)


def rolled(key: Key, now: datetime) -> Key:
    """The key in the budget period that contains `now`: a new period starts with nothing spent. The past never
    rolls back (a `now` before the period's start changes nothing)."""
    start = period_floor(key.limits.budget_period, now)
    if start is None or (key.period_start is not None and start <= key.period_start):
        return key
    return replace(key, spend_period=_ZERO, period_start=start)


def budget_left(key: Key) -> Decimal | None:
    """What the key's budget still allows in its period (negative when overspent); None: it has no budget."""
    budget = key.limits.budget
    return None if budget is None else budget - key.spend_period - key.reserved


def credit_left(ws: Workspace) -> Decimal:
    """What the workspace's balance still allows (negative when a cost exceeded its hold)."""
    return ws.credit - ws.reserved


def free(books: Books) -> Decimal:
    """What the key may still hold: the smaller of its budget's and its workspace's credit's remainders, at least 0."""
    left = credit_left(books.workspace)
    budget = budget_left(books.key)
    if budget is not None:
        left = min(left, budget)
    return max(_ZERO, left)


def refusal(books: Books, amount: Decimal) -> Refused | None:
    """Why a hold of `amount` does not fit (the key's budget first, then the workspace's credit); None when it does.
    Nothing to pay always fits; exactly what is left fits."""
    if amount <= 0:
        return None
    key, ws = books.key, books.workspace
    budget = key.limits.budget
    if budget is not None and key.spend_period + key.reserved + amount > budget:
        return Refused(
            "budget",
            f"over the key's {key.limits.budget_period} budget: spent {fmt_money(key.spend_period)} + held "
            f"{fmt_money(key.reserved)} + this request up to {fmt_money(amount)} exceeds {fmt_money(budget)}",
        )
    if ws.credit - ws.reserved - amount < 0:
        return Refused(
            "credit",
            f"out of credit: balance {fmt_money(ws.credit)}, held {fmt_money(ws.reserved)}, "
            f"this request needs up to {fmt_money(amount)}",
        )
    return None


def moved(books: Books, held: Decimal, spent: Decimal = _ZERO) -> Books:
    """The key and its workspace once the reservation holds `held` instead of `books.held` and `spent` is charged."""
    key, ws, change = books.key, books.workspace, held - books.held
    return Books(
        replace(key, reserved=key.reserved + change, spend_total=key.spend_total + spent,
                spend_period=key.spend_period + spent),
        replace(ws, reserved=ws.reserved + change, credit=ws.credit - spent, spend_total=ws.spend_total + spent),
        held,
    )  # fmt: skip


# The rules the store runs (HoldRule, FinishRule, LeaseRule in handlers/store/base.py).


def hold(books: Books, amount: Decimal, now: datetime) -> Books:
    """A new reservation of `amount`, in the key's current budget period; raises Refused when it does not fit."""
    books = replace(books, key=rolled(books.key, now))
    if (refused := refusal(books, amount)) is not None:
        raise refused
    return moved(books, books.held + amount)


def finish(books: Books, cost: Decimal | None) -> Books:
    """The reservation's hold dropped and its cost (None: nothing, it is released) charged. A cost may be more than
    was held: the upstream answered more than the worst case assumed, and it is charged all the same."""
    return moved(books, _ZERO, cost or _ZERO)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseSize:
    """How a process wants one of its leases sized at a sync."""

    unit: Decimal  # the largest worst case a request drew on it: what it is sized in
    requests: int  # at most this many units; 0 when it is being given back (it keeps what its requests hold)
    minimum: int  # fewer units than this are not worth drawing on: none are taken
    share: Decimal  # of what the key and its workspace could still hold (the lease included)
    grow_only: bool  # requests may be drawing on it: it never shrinks (it is shrunk once it says it is not useful)


def lease_amount(size: LeaseSize, held: Decimal, available: Decimal, in_flight: Decimal) -> tuple[Decimal, bool]:
    """(the lease's new amount, whether requests may draw on it), for a lease that holds `held` while the key could
    hold `available` more and its requests hold `in_flight` of it.

    A share of what could be held, so that the last of a budget or a balance still goes to whoever asks, at most
    `requests` units; less than `minimum` units is not useful, and then it keeps only what it must: all of it when
    grow-only, else what its requests hold."""
    target = min(size.unit * size.requests, ((held + available) * size.share).quantize(LEASE_STEP, ROUND_DOWN))
    useful = target >= size.unit * size.minimum
    floor = held if size.grow_only else min(held, in_flight)
    return max(target if useful else _ZERO, floor), useful


def sync_lease(size: LeaseSize, books: Books, report: LeaseReport, now: datetime) -> tuple[Books, bool]:
    """A lease's sync: what its requests spent is charged and leaves the lease (never more than it holds: a cost
    may exceed its hold), then it is resized (lease_amount), in the key's current budget period. Returns the books
    and whether the lease is useful. Bind `size` (functools.partial) to make it the store's LeaseRule."""
    books = replace(books, key=rolled(books.key, now))
    drawn = min(books.held, report.spent)
    books = moved(books, books.held - drawn, report.spent)
    amount, useful = lease_amount(size, books.held, free(books), report.in_flight)
    return moved(books, amount), useful
