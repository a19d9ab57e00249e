"""Metering: rate limits, then a hold of the worst-case cost, before any upstream call; settle after.

The hold comes from the key's lease in this process's ledger (memory, no store round trip), or, when no lease can
pay, from a reservation in the store, atomic like the lease itself: every worker and replica sharing the store
together can never spend past a key's budget or a workspace's credit. A failed request releases its hold; an
answered one settles to its cost.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

from generated import errors as codes
from handlers.errors import ApiError, StoreUnavailable
from handlers.inference import tokens
from handlers.inference.canonical import Request, Usage
from handlers.inference.catalog import Model
from handlers.metering import money, ratelimit
from handlers.metering.ledger import Lease, Ledger
from handlers.metering.ratelimit import Limiter, Verdict
from handlers.observability import metrics
from handlers.store.base import Key, Refused, Store


@dataclass(slots=True)
class Hold:
    """What admit() took for one request, for settle() or release() to finish."""

    key: Key
    reservation: str | None  # held directly in the store; None when held on a lease, or free
    input_estimate: int
    token_charge: int = 0  # tokens taken from the tokens-per-minute bucket
    headers: dict[str, str] = field(default_factory=dict)
    done: bool = False
    lease: Lease | None = None  # the lease it drew `held` from
    held: Decimal = Decimal(0)


@dataclass(frozen=True, slots=True)
class Charge:
    cost: Decimal
    usage: Usage
    estimated: bool  # the upstream reported no usage; tokens were estimated


def _rate_limited(kind: str, limit: int, verdict: Verdict, headers: dict[str, str]) -> ApiError:
    wait = verdict.retry_after or 1.0
    unit = "requests" if kind == "requests" else "tokens"
    message = f"Over this key's limit of {limit} {unit} per minute; retry in {max(1, math.ceil(wait))} s."
    return ApiError(codes.RATE_LIMIT_EXCEEDED, message, headers={**headers, **ratelimit.retry_headers(wait)})


class Meter:
    def __init__(self, store: Store, limiter: Limiter, ledger: Ledger | None = None) -> None:
        self.store = store
        self.limiter = limiter
        self.ledger = ledger or Ledger(store)

    async def _limits(self, key: Key, token_cost: int, tokens: bool = True) -> tuple[int, dict[str, str]]:
        headers: dict[str, str] = {}
        rpm, tpm = key.limits.rpm, key.limits.tpm if tokens else None
        if rpm:
            verdict = await self.limiter.hit(f"{key.id}:requests", rpm, 1)
            headers |= ratelimit.headers("requests", verdict)
            if not verdict.allowed:
                raise _rate_limited("requests", rpm, verdict, headers)
        if tpm:
            verdict = await self.limiter.hit(f"{key.id}:tokens", tpm, token_cost)
            headers |= ratelimit.headers("tokens", verdict)
            if not verdict.allowed:
                raise _rate_limited("tokens", tpm, verdict, headers)
            return token_cost, headers
        return 0, headers

    async def count_request(self, key: Key) -> dict[str, str]:
        """A request that costs nothing and generates nothing (a token count): it counts against the key's
        requests per minute like any request, takes nothing from tokens per minute, reserves nothing.
        Returns the rate-limit headers; over the limit, a 429."""
        _, headers = await self._limits(key, 0, tokens=False)
        return headers

    async def admit(self, key: Key, candidates: list[Model], req: Request, input_estimate: int | None = None) -> Hold:
        """Check the key's rate limits, then hold the worst case any candidate could cost."""
        inp = tokens.input_tokens(req) if input_estimate is None else input_estimate
        return await self.admit_tokens(key, candidates, inp, tokens.max_output_tokens(req))

    async def admit_tokens(self, key: Key, candidates: list[Model], inp: int, out: int) -> Hold:
        """admit() for a request known by its token counts alone: `inp` input tokens (estimated) and at most `out`
        output tokens (0 for embeddings, which generate none)."""
        charge, headers = await self._limits(key, inp + out)
        worst = max((m.worst_case(inp, out) for m in candidates), default=Decimal(0))
        if worst == 0:
            return Hold(key, None, inp, charge, headers)
        if lease := await self.ledger.draw(key, worst):
            metrics.HOLDS.labels("lease").inc()
            return Hold(key, None, inp, charge, headers, lease=lease, held=worst)
        metrics.HOLDS.labels("store").inc()
        try:
            reservation = await self._reserve(key, worst)
        except Refused as refused:
            if charge:
                await self.limiter.refund(f"{key.id}:tokens", key.limits.tpm or 0, charge)
            code = codes.INSUFFICIENT_CREDIT if refused.reason == "credit" else codes.BUDGET_EXCEEDED
            raise ApiError(code, refused.message, headers=headers) from None
        except StoreUnavailable as away:
            # Nothing can be held while the store is away and no lease of this process can pay: 503
            # store_unavailable with Retry-After. Free models never get here.
            if charge:
                await self.limiter.refund(f"{key.id}:tokens", key.limits.tpm or 0, charge)
            away.headers = {**headers, **away.headers}
            raise
        return Hold(key, reservation, inp, charge, headers)

    async def _reserve(self, key: Key, worst: Decimal) -> str:
        """A hold in the store. Refused while leases of running processes hold money nothing draws on, it is
        asked again while they give it back (at the end of a budget or a balance only: within three flushes)."""
        wait = self.ledger.flush_seconds / 2
        for _ in range(6):
            try:
                return await self.store.reserve(key.id, worst, datetime.now(UTC), money.hold)
            except Refused as refused:
                if not refused.leased:
                    raise
            self.ledger.wake()
            await asyncio.sleep(wait)
        return await self.store.reserve(key.id, worst, datetime.now(UTC), money.hold)

    async def settle(self, hold: Hold, model: Model, usage: Usage | None, output_chars: int) -> Charge:
        """Replace the hold by the real cost; give back the tokens the estimate took too many of."""
        estimated = usage is None or usage.input_tokens is None or usage.output_tokens is None
        if estimated:
            reported = usage or Usage()
            usage = Usage(
                # Input counts every prompt token: never fewer than the cache reads and writes the upstream reported.
                input_tokens=reported.input_tokens if reported.input_tokens is not None
                else max(hold.input_estimate, (reported.cached_input_tokens or 0) + (reported.cache_write_tokens or 0)),
                output_tokens=reported.output_tokens if reported.output_tokens is not None
                else math.ceil(output_chars / 4),
                cached_input_tokens=reported.cached_input_tokens,
                cache_write_tokens=reported.cache_write_tokens,
                reasoning_tokens=reported.reasoning_tokens,
            )
        assert usage is not None and usage.input_tokens is not None and usage.output_tokens is not None
        cost = model.cost(usage)
        await self._finish(hold, cost, usage.input_tokens + usage.output_tokens)
        return Charge(cost, usage, estimated)

    async def release(self, hold: Hold) -> None:
        """Nothing was answered: drop the hold, and give back the tokens taken."""
        await self._finish(hold, None, 0)

    async def _finish(self, hold: Hold, cost: Decimal | None, used_tokens: int) -> None:
        if hold.done:
            return
        hold.done = True
        unused = hold.token_charge - used_tokens
        try:
            if unused > 0:
                await self.limiter.refund(f"{hold.key.id}:tokens", hold.key.limits.tpm or 0, unused)
        finally:
            await self._pay(hold, cost)

    async def _pay(self, hold: Hold, cost: Decimal | None) -> None:
        if hold.lease is not None:  # last, with no await after it: the request's record follows it at once
            self.ledger.settle(hold.lease, hold.held, cost)
        elif hold.reservation is not None:  # a free model's cost is 0 and nothing was held
            try:
                await self.store.finish(hold.reservation, cost, money.finish)
            except StoreUnavailable:
                self.ledger.later(hold.reservation, cost)  # never lost: written when the store is back
