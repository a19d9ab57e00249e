"""Per-deployment quotas: the provider's requests and tokens per minute for one deployment (DeploymentSettings.rpm,
tpm), which the gateway keeps under with the keys' limiter (ratelimit.py: in Redis when limits.redis_url is set, so
every worker and replica shares one count, exactly).

Screening peeks (a deployment at its quota is skipped, and a route preview says so without taking anything); the
attempt takes, atomically, right before the call (a deployment that filled up meanwhile is passed over as if
skipped). A request counts its input estimate and its output limit against tpm; the part it did not use is given
back when it ends.
"""

from __future__ import annotations

from handlers.inference.catalog import Model
from handlers.metering.ratelimit import Limiter, Verdict


def _buckets(model: Model, tokens: int) -> list[tuple[str, int, int, str]]:
    """(bucket, limit per minute, cost, unit) of each quota `model` (a deployment) has."""
    out = []
    if model.rpm:
        out.append((f"deployment:{model.deployment}:requests", model.rpm, 1, "requests"))
    if model.tpm:
        out.append((f"deployment:{model.deployment}:tokens", model.tpm, min(tokens, model.tpm + 1), "tokens"))
    return out


def _over(model: Model, limit: int, unit: str, verdict: Verdict, tokens: int) -> tuple[str, float]:
    wait = verdict.retry_after or 1.0
    if unit == "tokens" and tokens > limit:
        return f"deployment {model.deployment} needs about {tokens} tokens, more than its quota of {limit} per minute", 60.0
    return f"deployment {model.deployment} is at its quota of {limit} {unit} per minute", wait


async def over(limiter: Limiter, model: Model, tokens: int) -> tuple[str, float] | None:
    """Why `model` cannot take a request of `tokens` now, and how long until it can; None when it can. Takes
    nothing."""
    for bucket, limit, cost, unit in _buckets(model, tokens):
        verdict = await limiter.peek(bucket, limit, cost)
        if not verdict.allowed:
            return _over(model, limit, unit, verdict, tokens)
    return None


async def take(limiter: Limiter, model: Model, tokens: int) -> tuple[str, float] | None:
    """Take one request and `tokens` from `model`'s quotas; when one refuses, nothing stays taken, and why and the
    wait are returned."""
    taken: list[tuple[str, int, int]] = []
    for bucket, limit, cost, unit in _buckets(model, tokens):
        verdict = await limiter.hit(bucket, limit, cost)
        if not verdict.allowed:
            for done, done_limit, done_cost in taken:
                await limiter.refund(done, done_limit, done_cost)
            return _over(model, limit, unit, verdict, tokens)
        taken.append((bucket, limit, cost))
    return None


async def give_back(limiter: Limiter, model: Model, unused: int) -> None:
    """Tokens a request took from `model`'s tpm and did not use."""
    if model.tpm and unused > 0:
        await limiter.refund(f"deployment:{model.deployment}:tokens", model.tpm, min(unused, model.tpm))
