"""Money-aware routing: a request's cost ceiling (its `x-specway-max-cost` header, its policy's `max_cost`), and the
policy's budget-aware step-down to a cheaper tier once the key's budget or its workspace's credit runs low.

Both are read before any upstream call and change only which candidates are tried; what is held and charged stays
the meter's (handlers/metering). The step-down reads spend as the store last saw it: the key as its cache holds it
(server.key_cache_seconds), the workspace's credit cached for as long.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation

from generated.config import PolicySettings
from handlers.errors import StoreUnavailable, bad_request
from handlers.inference.routing import Ceiling
from handlers.metering import money
from handlers.store.base import Key, Store
from handlers.store.values import fmt_money

HEADER = "x-specway-max-cost"
_PERIODS = {"total": "total", "daily": "daily", "monthly": "monthly"}


def asked(value: str | None) -> Decimal | None:
    """The `x-specway-max-cost` header as an amount; a 400 naming the header when it is not a decimal."""
    if value is None:
        return None
    try:
        amount = Decimal(value.strip())
    except InvalidOperation:
        amount = Decimal(-1)
    if not amount.is_finite() or amount < 0:
        raise bad_request(f"The {HEADER} header must be a decimal amount such as 0.05, not {value[:40]!r}.",
                          param=HEADER)
    return amount


def ceiling(policy: PolicySettings, header: Decimal | None) -> Ceiling | None:
    """The lower of the header's ceiling and the policy's `max_cost`, and which it is; None when neither is set."""
    configured = None if policy.max_cost is None else Decimal(str(policy.max_cost))
    if header is not None and (configured is None or header <= configured):
        return Ceiling(header, f"the {HEADER} header")
    return None if configured is None else Ceiling(configured, "the policy's max_cost")


class Credits:
    """Workspaces' credit, each read from the store at most once per `ttl` seconds (in this process)."""

    def __init__(self, store: Store, ttl: float) -> None:
        self._store = store
        self._ttl = ttl
        self._seen: dict[str, tuple[Decimal, float]] = {}

    async def left(self, workspace_id: str) -> Decimal | None:
        """The workspace's credit; None when the store cannot say now (no step-down is ever a refusal)."""
        now = time.monotonic()
        seen = self._seen.get(workspace_id)
        if seen is not None and now - seen[1] < self._ttl:
            return seen[0]
        try:
            ws = await self._store.get_workspace(workspace_id)
        except StoreUnavailable:
            return seen[0] if seen is not None else None
        if ws is None:
            return None
        self._seen[workspace_id] = ws.credit, now
        return ws.credit


async def stepped_down(policy: PolicySettings, key: Key, credits: Credits) -> str | None:
    """Why the policy steps down to its cheaper tier for this key now, in words; None when it does not."""
    rule = policy.step_down
    if rule is None:
        return None
    tier = f"stepped down to the {rule.tier!r} tier"
    budget = key.limits.budget
    if rule.budget_below_percent is not None and budget is not None and budget > 0:
        spent = money.rolled(key, datetime.now(UTC)).spend_period
        left = max(Decimal(0), budget - spent) / budget * 100
        if left < Decimal(str(rule.budget_below_percent)):
            share = f"{math.floor(left)}%" if left >= 1 else "less than 1%"
            return f"{tier}: {share} of the {_PERIODS[key.limits.budget_period]} budget left"
    if rule.credit_below is not None:
        credit = await credits.left(key.workspace_id)
        if credit is not None and credit < Decimal(str(rule.credit_below)):
            return f"{tier}: {fmt_money(max(credit, Decimal(0)))} of the workspace's credit left"
    return None
