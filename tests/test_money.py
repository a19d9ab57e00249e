"""The money rules (handlers/metering/money.py) without a store: what a budget and a balance allow, holds and their
refusals, settlements, lease sizes and syncs, budget periods. The store's tests run the same rules on real rows."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal as D

import hypothesis
import pytest
from hypothesis import strategies as st

from handlers.metering import money
from handlers.store.base import Books, BudgetPeriod, Key, LeaseReport, Limits, Refused, Workspace

NOW = datetime(2031, 3, 10, 12, 0, tzinfo=UTC)


def key(budget: str | None = None, period: BudgetPeriod = "total", spent: str = "0", reserved: str = "0",
        period_start: datetime | None = None) -> Key:
    return Key(id="key_1", workspace_id="ws_1", name="k", hint="sk-sw-…", scopes=("inference",), models=None,
               policy=None, expires_at=None, created_at=NOW, last_used_at=None, revoked_at=None,
               limits=Limits(None if budget is None else D(budget), period), spend_total=D(spent),
               spend_period=D(spent), period_start=period_start, reserved=D(reserved))  # fmt: skip


def ws(credit: str = "100", reserved: str = "0") -> Workspace:
    return Workspace(id="ws_1", name="w", credit=D(credit), reserved=D(reserved), spend_total=D(0), created_at=NOW)


def books(k: Key | None = None, w: Workspace | None = None, held: str = "0") -> Books:
    return Books(k or key(), w or ws(), D(held))


def numbers(b: Books) -> tuple[D, ...]:
    """(key reserved, key spend in period, key spend total, workspace reserved, credit, workspace spend, held)"""
    k, w = b.key, b.workspace
    return k.reserved, k.spend_period, k.spend_total, w.reserved, w.credit, w.spend_total, b.held


# what is left


def test_what_a_budget_and_a_balance_still_allow() -> None:
    assert money.budget_left(key()) is None  # no budget: only the balance counts
    assert money.budget_left(key("1.00", spent="0.25", reserved="0.50")) == D("0.25")
    assert money.budget_left(key("1.00", spent="1.25")) == D("-0.25")  # a cost exceeded its hold
    assert money.credit_left(ws("10", reserved="2.5")) == D("7.5")
    assert money.free(books(key(), ws("10", "2.5"))) == D("7.5")
    assert money.free(books(key("1.00", spent="0.40"), ws("10"))) == D("0.60")  # the smaller of the two
    assert money.free(books(key("5.00"), ws("0.30"))) == D("0.30")
    assert money.free(books(key("1.00", spent="1.25"), ws("10"))) == 0  # never below zero
    assert money.free(books(key(), ws("-0.25"))) == 0


@pytest.mark.parametrize(
    ("period", "start", "now", "rolls_to"),
    [
        ("daily", datetime(2031, 3, 10, tzinfo=UTC), datetime(2031, 3, 10, 23, 59, 59, tzinfo=UTC), None),
        ("daily", datetime(2031, 3, 10, tzinfo=UTC), datetime(2031, 3, 11, 0, 0, 1, tzinfo=UTC),
         datetime(2031, 3, 11, tzinfo=UTC)),
        ("monthly", datetime(2031, 12, 1, tzinfo=UTC), datetime(2032, 1, 1, 1, tzinfo=UTC),
         datetime(2032, 1, 1, tzinfo=UTC)),
        ("monthly", datetime(2031, 3, 1, tzinfo=UTC), datetime(2031, 2, 28, tzinfo=UTC), None),  # the past: no
        ("daily", None, datetime(2031, 3, 10, 5, tzinfo=UTC), datetime(2031, 3, 10, tzinfo=UTC)),  # first period
        ("total", None, datetime(2040, 1, 1, tzinfo=UTC), None),  # a total budget never rolls
    ],
)  # fmt: skip
def test_a_budget_period_rolls_over(period: BudgetPeriod, start: datetime | None, now: datetime,
                                    rolls_to: datetime | None) -> None:
    before = key("1.00", period, spent="0.80", reserved="0.10", period_start=start)
    after = money.rolled(before, now)
    if rolls_to is None:
        assert after is before
    else:
        assert (after.spend_period, after.period_start) == (0, rolls_to)
        assert (after.spend_total, after.reserved) == (D("0.80"), D("0.10"))  # only the period's spend restarts
        assert before.spend_period == D("0.80")  # the rule changes nothing it was given


# holds


def test_a_hold_adds_to_what_the_key_and_its_workspace_hold() -> None:
    before = books(key("5.00", reserved="0.20"), ws("10", reserved="1.00"))
    after = money.hold(before, D("0.30"), NOW)
    assert numbers(after) == (D("0.50"), 0, 0, D("1.30"), D(10), 0, D("0.30"))
    assert numbers(before) == (D("0.20"), 0, 0, D("1.00"), D(10), 0, 0)


def test_exactly_what_is_left_fits_and_a_cent_more_is_refused() -> None:
    at_budget = books(key("1.50", spent="1.20", reserved="0.25"))
    assert money.refusal(at_budget, D("0.05")) is None
    refused = money.refusal(at_budget, D("0.06"))
    assert refused is not None and refused.reason == "budget"
    assert refused.message == str(refused) == (
        "over the key's total budget: spent 1.20 + held 0.25 + this request up to 0.06 exceeds 1.50")
    at_credit = books(key(), ws("0.40", reserved="0.35"))
    assert money.refusal(at_credit, D("0.05")) is None
    refused = money.refusal(at_credit, D("0.10"))
    assert refused is not None and refused.reason == "credit"
    assert refused.message == "out of credit: balance 0.40, held 0.35, this request needs up to 0.10"


def test_the_budget_is_named_before_the_credit_and_money_keeps_its_digits() -> None:
    both = books(key("1.00", "daily", spent="1.00", period_start=NOW.replace(hour=0)), ws("0"))
    refused = money.refusal(both, D("0.000125"))
    assert refused is not None and refused.reason == "budget"
    assert refused.message == ("over the key's daily budget: spent 1.00 + held 0.00 + this request up to 0.000125 "
                               "exceeds 1.00")
    refused = money.refusal(books(key(), ws("0")), D("0.000125"))
    assert refused is not None and refused.message == (
        "out of credit: balance 0.00, held 0.00, this request needs up to 0.000125")


def test_nothing_to_pay_always_fits() -> None:
    broke = books(key("1.00", spent="1.25"), ws("-0.25"))
    assert money.refusal(broke, D(0)) is None
    assert numbers(money.hold(broke, D(0), NOW)) == numbers(broke)


def test_a_refused_hold_raises_and_changes_nothing() -> None:
    before = books(key(), ws("0.10"))
    with pytest.raises(Refused) as refused:
        money.hold(before, D("0.11"), NOW)
    assert refused.value.reason == "credit" and not refused.value.leased  # the store says whether leases hold it
    assert numbers(before) == (0, 0, 0, 0, D("0.10"), 0, 0)


def test_a_hold_counts_the_budget_of_the_period_it_is_made_in() -> None:
    yesterday = NOW.replace(hour=0) - timedelta(days=1)
    spent = books(key("1.00", "daily", spent="1.00", period_start=yesterday))
    with pytest.raises(Refused):
        money.hold(spent, D("0.01"), yesterday + timedelta(hours=23))
    after = money.hold(spent, D("1.00"), NOW)  # a new day: the whole budget again
    assert (after.key.spend_period, after.key.period_start, after.key.reserved) == (0, NOW.replace(hour=0), D(1))


# settlements


@pytest.mark.parametrize(
    ("cost", "expected"),
    [
        (None, (0, 0, 0, 0, D(10), 0, 0)),  # released: nothing spent
        (D(0), (0, 0, 0, 0, D(10), 0, 0)),
        (D("0.07"), (0, D("0.07"), D("0.07"), 0, D("9.93"), D("0.07"), 0)),
        (D("0.10"), (0, D("0.10"), D("0.10"), 0, D("9.90"), D("0.10"), 0)),  # exactly what was held
        (D("1.25"), (0, D("1.25"), D("1.25"), 0, D("8.75"), D("1.25"), 0)),  # more than held: charged all the same
    ],
)
def test_finishing_a_hold_drops_it_and_charges_its_cost(cost: D | None, expected: tuple[D, ...]) -> None:
    held = money.hold(books(key(), ws("10")), D("0.10"), NOW)
    assert numbers(money.finish(held, cost)) == expected


def test_a_cost_over_the_balance_leaves_it_negative_and_refuses_what_follows() -> None:
    after = money.finish(money.hold(books(key(), ws("1.00")), D("0.10"), NOW), D("1.25"))
    assert (after.workspace.credit, money.credit_left(after.workspace), money.free(after)) == (D("-0.25"), D("-0.25"), 0)
    assert money.refusal(after, D("0.01")) is not None


# leases


def size(unit: str = "0.10", requests: int = 64, minimum: int = 4, share: str = "0.25",
         grow_only: bool = True) -> money.LeaseSize:
    return money.LeaseSize(unit=D(unit), requests=requests, minimum=minimum, share=D(share), grow_only=grow_only)


@pytest.mark.parametrize(
    ("lease", "held", "available", "in_flight", "expected"),
    [
        (size(), "0", "20", "0", (D(5), True)),  # a quarter of what could be held
        (size(), "0", "1000", "0", (D("6.4"), True)),  # at most 64 worst cases
        (size(), "0", "1.60", "0", (D("0.40"), True)),  # exactly 4 worst cases: useful
        (size(), "0", "1.599999996", "0", (D(0), False)),  # a step under: none taken
        (size(), "1.00", "0.40", "0.3", (D("1.00"), False)),  # grow-only: too small now, but not shrunk
        (size(grow_only=False), "1.00", "0.40", "0.3", (D("0.3"), False)),  # shrunk to what its requests hold
        (size(grow_only=False), "1.00", "0.40", "0", (D(0), False)),
        (size(grow_only=False), "0.20", "0.40", "0.5", (D("0.20"), False)),  # never more than it held
        (size(requests=0, grow_only=False), "5.00", "100", "0.2", (D("0.2"), False)),  # given back
        (size(share="1"), "0", "1", "0", (D(1), True)),  # all of what is left, never more
        (size(), "0", "0.000000007", "0", (D(0), False)),
        (size(unit="0.001", minimum=1, share="0.3"), "0", "0.01", "0", (D("0.003"), True)),
        (size(unit="0.0000001", minimum=1, share="0.3"), "0", "0.0000011", "0", (D("0.00000033"), True)),
        (size(unit="0.000000001", minimum=1, share="0.1"), "0", "0.000000011", "0", (D("1E-9"), True)),  # rounded down
        (size(unit="0.000000001", minimum=1, share="0.1"), "0", "0.000000019", "0", (D("1E-9"), True)),  # even .9
    ],
)  # fmt: skip
def test_how_big_a_lease_may_be(lease: money.LeaseSize, held: str, available: str, in_flight: str,
                                expected: tuple[D, bool]) -> None:
    assert money.lease_amount(lease, D(held), D(available), D(in_flight)) == expected


def report(spent: str = "0", in_flight: str = "0") -> LeaseReport:
    return LeaseReport(lease_id="rsv_1", key_id="key_1", spent=D(spent), in_flight=D(in_flight))


def test_a_first_sync_takes_a_lease_from_what_is_free() -> None:
    after, useful = money.sync_lease(size(), books(key("20.00"), ws("100")), report(), NOW)
    assert useful and numbers(after) == (D(5), 0, 0, D(5), D(100), 0, D(5))


def test_a_sync_charges_what_was_spent_then_resizes() -> None:
    lease = books(key("20.00", reserved="5"), ws("100", reserved="5"), held="5")
    after, useful = money.sync_lease(size(), lease, report(spent="1.25", in_flight="0.5"), NOW)
    # 1.25 leaves the lease; a quarter of what remains to hold (20 - 1.25) is 4.6875
    assert useful and numbers(after) == (D("4.6875"), D("1.25"), D("1.25"), D("4.6875"), D("98.75"), D("1.25"),
                                         D("4.6875"))  # fmt: skip


def test_a_sync_that_gives_a_lease_back_keeps_what_its_requests_hold() -> None:
    lease = books(key(reserved="1.00"), ws("1.40", reserved="1.00"), held="1.00")
    after, useful = money.sync_lease(size(grow_only=False), lease, report(spent="0.10", in_flight="0.3"), NOW)
    assert not useful and numbers(after) == (D("0.3"), D("0.10"), D("0.10"), D("0.3"), D("1.30"), D("0.10"), D("0.3"))


def test_spending_more_than_the_lease_held_is_charged_all_the_same() -> None:
    lease = books(key(reserved="0.40"), ws("1.00", reserved="0.40"), held="0.40")
    after, useful = money.sync_lease(size(grow_only=False), lease, report(spent="0.70"), NOW)
    assert not useful  # nothing is free any more: 1.00 - 0.70 is 0.30, under 4 worst cases even whole
    assert numbers(after) == (0, D("0.70"), D("0.70"), 0, D("0.30"), D("0.70"), 0)
    after, _ = money.sync_lease(size(grow_only=False), lease, report(spent="1.30"), NOW)
    assert (after.workspace.credit, after.workspace.reserved, after.held) == (D("-0.30"), 0, 0)


def test_a_lease_with_no_row_left_still_charges_what_its_requests_spent() -> None:
    after, useful = money.sync_lease(size(requests=0), books(key(), ws("10")), report(spent="0.7"), NOW)
    assert not useful and numbers(after) == (0, D("0.7"), D("0.7"), 0, D("9.3"), D("0.7"), 0)


def test_a_sync_counts_spending_in_the_period_it_is_made_in() -> None:
    yesterday = NOW.replace(hour=0) - timedelta(days=1)
    lease = books(key("4.00", "daily", spent="3.00", reserved="1.00", period_start=yesterday), ws("100", "1"), "1")
    after, useful = money.sync_lease(size(), lease, report(spent="0.50"), NOW)
    assert after.key.period_start == NOW.replace(hour=0) and after.key.spend_period == D("0.50")
    assert useful and after.held == D("0.875")  # a quarter of 4.00 - 0.50


# what every rule keeps: the key and its workspace move together, money is neither made nor lost, and nothing is
# held past what a budget and a balance allow


@st.composite
def _steps(draw: st.DrawFn) -> list[tuple[str, D, D]]:
    money_ = st.decimals(min_value=0, max_value=3, places=2)
    ops = st.tuples(st.sampled_from(["hold", "settle", "release", "sync", "sync-shrink"]), money_, money_)
    return draw(st.lists(ops, max_size=30))


@hypothesis.given(budget=st.none() | st.decimals(min_value=0, max_value=10, places=2),
                  credit=st.decimals(min_value=0, max_value=10, places=2), steps=_steps())
@hypothesis.settings(max_examples=200, deadline=None, database=None)
def test_every_rule_keeps_the_books_balanced(budget: D | None, credit: D, steps: list[tuple[str, D, D]]) -> None:
    state = books(key(None if budget is None else str(budget)), ws(str(credit)))
    holds: list[D] = []  # direct holds still held
    lease = D(0)  # what the one lease holds
    for op, amount, spent in steps:
        was = state
        if op == "hold":
            try:
                state = money.hold(replace(state, held=D(0)), amount, NOW)
            except Refused:
                assert amount > money.free(state)
                continue
            assert money.free(was) >= amount or amount == 0
            holds.append(state.held)
        elif op in ("settle", "release") and holds:
            state = money.finish(replace(state, held=holds.pop()), spent if op == "settle" else None)
        elif op.startswith("sync"):
            state, _ = money.sync_lease(size(grow_only=op == "sync"), replace(state, held=lease), report(str(spent)),
                                        NOW)
            assert state.held - lease + min(lease, spent) <= max(D(0), money.free(was))  # grows by what is free
            lease = state.held
        held, k, w = sum(holds, lease), state.key, state.workspace
        assert k.reserved == w.reserved == held >= 0
        assert k.spend_total == k.spend_period == w.spend_total and w.credit + w.spend_total == credit
