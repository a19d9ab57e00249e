"""One routed request's life, the same for every inference operation (chat, messages, responses, embeddings and
token counts): plan, screen, hold, attempts, settle, record, metrics.

The operation builds its Plan (routing), then a Lifecycle screens it (cooldowns, context windows) and carries it
through: `failing()` wraps the work so that any failure releases the hold and records the decision; `attempt` tries
the runnable candidates in order (fallback before the first byte only; only an upstream's transient failures count
toward its cooldown); `settle` charges what was used and records the decision. A stream settles when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from generated import errors as codes
from handlers import gateway
from handlers.errors import ApiError
from handlers.inference import balance, routing
from handlers.inference.canonical import Request, Usage
from handlers.inference.catalog import Model
from handlers.inference.cooldown import Cooling, deployment_key, upstream_key
from handlers.inference.formats.base import Traits
from handlers.inference.routing import Ceiling, Plan
from handlers.inference.trace import Trace
from handlers.inference.upstreams.base import PLAIN, Upstream, UpstreamError
from handlers.metering import quotas, ratelimit
from handlers.metering.meter import Charge, Hold
from handlers.observability import metrics, requestlog
from handlers.serving.retries import Retries
from handlers.store.values import fmt_money

T = TypeVar("T")
NO_RETRY = {"x-should-retry": "false"}  # the SDKs' override of their own retry choice: a retry cannot help


class Lifecycle:
    """One request from its plan to its decision record. `inference` false (token counts): no inference metrics and
    no usage rollup; `note` ends the record's explanation."""

    def __init__(self, gw: gateway.Gateway, plan: Plan, *, inference: bool = True, note: str = "",
                 request: Request | None = None, traits: Callable[[Model], Traits] | None = None,
                 quota_tokens: int = 0) -> None:
        self.gw = gw
        self._request = request  # the canonical request, for an operation that has one
        self._traits = traits  # what each model's body is rendered for, when the operation renders one
        self.plan = plan
        self.trace = Trace()
        self.hold: Hold | None = None  # what metering held (its rate-limit headers with it)
        self.limit_headers: dict[str, str] = {}  # the rate-limit headers of a request that holds nothing
        self._inference = inference
        self._note = note
        self._busy: set[str] = set()  # upstreams whose pool was found full: not waited on again
        self._quota_tokens = quota_tokens  # what an attempt takes from its deployment's tokens per minute
        self._flying: Model | None = None  # the deployment answering, counted in flight until the request is over

    @classmethod
    async def screened(cls, gw: gateway.Gateway, plan: Plan, needed_tokens: int, *, worst: tuple[int, int] = (0, 0),
                       ceiling: Ceiling | None = None, **options: object) -> Lifecycle:
        """The plan's models as their deployments in the policy's order (balance.py), those skipped whose
        deployment or upstream is cooling down, that is at its quota for a request of `worst` (input, output)
        tokens, whose window is under `needed_tokens`, or whose worst case is over the cost `ceiling`."""
        inp, out = worst
        order = balance.Request(gw.config.policies[plan.policy].balance, plan.session, plan.seed, inp, out)
        plan = balance.expand(plan, gw.catalog, gw.deployments, order)
        cd = gw.cooldowns
        await cd.refresh(key for c in plan.candidates
                         for key in (upstream_key(c.model.upstream), deployment_key(c.model.deployment)))
        full: dict[str, tuple[str, Cooling]] = {}
        for c in plan.candidates:
            if c.verdict != "skipped" and (c.model.rpm or c.model.tpm) and c.model.deployment not in full:
                over = await quotas.over(gw.limiter, c.model, inp + out)
                if over is not None:
                    full[c.model.deployment] = over[0], cd.waiting(over[1], over[0])

        def blocking(m: Model) -> tuple[str, Cooling] | None:
            return cd.blocking(m.upstream, m.deployment) or full.get(m.deployment)

        return cls(gw, routing.screen(plan, blocking, needed_tokens, ceiling, worst), quota_tokens=inp + out,
                   **options)  # type: ignore[arg-type]

    @property
    def traits(self) -> Callable[[Model], Traits]:
        """What each model's body is rendered for (the catalog's word on it, without an operation's own)."""
        return self._traits or (lambda _model: PLAIN)

    def runnable(self, verb: str = "take") -> list[Model]:
        """The models that may be tried, in order; routing's own refusal, or none left, is the caller's answer."""
        if self.plan.refusal is not None:
            raise self.plan.refusal
        models = [c.model for c in self.plan.runnable()]
        if not models:
            raise nothing_left(self.gw, self.plan, verb)
        return models

    @contextlib.asynccontextmanager
    async def failing(self) -> AsyncIterator[None]:
        """Any failure inside ends the request: the hold released, the decision recorded, the headers added."""
        try:
            yield
        except ApiError as err:
            await self.fail(err)
            raise
        except BaseException:
            await self.fail(ApiError(codes.INTERNAL_ERROR, "failed"))
            raise

    async def attempt(self, call: Callable[[Upstream, Model], Awaitable[T]]) -> tuple[T, Model]:
        """Try each runnable candidate in order until one answers, then retry those whose failure a retry can fix
        (serving/retries.py). Any failure but the caller's own falls through to the next (UpstreamError.falls_back)
        and counts toward the breaker it belongs to, its deployment's or its whole upstream's
        (UpstreamError.breaker); a candidate cooled down meanwhile is not retried. An upstream whose pool was full is
        not waited on twice for one request. Returns the answer and the model that gave it; when every candidate
        failed, the last failure is the caller's answer."""
        gw = self.gw
        if gw.tracing is not None:  # telemetry on: each call in a client span (observability/upstream_spans.py)
            call = gw.tracing.upstreams.traced(call, self.plan)
        retries = Retries(gw.config.retries, self.trace.started)
        models = [c.model for c in self.plan.runnable()]
        failed: tuple[UpstreamError, str] | None = None
        while True:
            worth: list[tuple[Model, float]] = []  # failed in a way a retry can fix, with the wait it named
            for model in models:
                if retries.round and gw.cooldowns.blocking(model.upstream, model.deployment):
                    continue
                try:
                    return await self._try(call, model, retries.round)
                except UpstreamError as err:
                    failed = err, model.upstream
                    wait = self._retry_wait(retries, model, err)
                    if wait is not None:
                        worth.append((model, wait))
            pause = retries.pause([wait for _, wait in worth])
            if pause is None:
                break
            await asyncio.sleep(pause)
            models = [m for m, _ in worth]
        if failed is None:
            raise nothing_left(gw, self.plan)
        answer = upstream_failure(*failed)
        if retries.round:  # the gateway already did what an SDK's retry would do
            answer.headers = {**answer.headers, **NO_RETRY}
        raise answer from None

    def _retry_wait(self, retries: Retries, model: Model, err: UpstreamError) -> float | None:
        """How long before `model` may be retried after `err`, or None when a retry cannot fix it: a failure no retry
        fixes, or a cooldown (its breaker tripped) longer than the gateway waits out."""
        if not retries.worth(err):
            return None
        blocked = self.gw.cooldowns.blocking(model.upstream, model.deployment)
        wait = max(err.wait or 0.0, self.gw.cooldowns.left(blocked[1]) if blocked else 0.0)
        return wait if wait <= float(retries.settings.max_wait_seconds) else None

    async def _try(self, call: Callable[[Upstream, Model], Awaitable[T]], model: Model, retry: int
                   ) -> tuple[T, Model]:
        """One attempt, in the trace; an UpstreamError the caller may fall back from is raised as it is, any other
        failure as the caller's answer."""
        gw, trace = self.gw, self.trace
        upstream = gw.upstreams[model.upstream]
        started = time.perf_counter()
        flying = False
        try:
            if upstream.name in self._busy:
                raise UpstreamError("busy", f"upstream {upstream.name} had no free connection a moment ago; not "
                                    "waited on again for this request", retry_after=1.0)
            over = await quotas.take(gw.limiter, model, self._quota_tokens) if model.rpm or model.tpm else None
            if over is not None:  # it filled up since screening: passed over, never called
                raise UpstreamError("quota", over[0], retry_after=over[1])
            gw.deployments.started(model.deployment)
            flying = True
            answer = await call(upstream, model)
        except BaseException as err:
            if flying:
                gw.deployments.ended(model.deployment)
            if not isinstance(err, UpstreamError):
                raise
            trace.attempted(model, started, err.status, err.kind, err.message, retry=retry)
            await self._count(model, err)
            if not err.falls_back:
                raise upstream_failure(err, upstream.name) from None
            if err.kind == "busy":
                self._busy.add(upstream.name)
            raise
        await gw.cooldowns.succeeded(deployment_key(model.deployment))
        await gw.cooldowns.succeeded(upstream_key(upstream.name))
        trace.attempted(model, started, 200, retry=retry)
        trace.answered = model
        self._flying = model
        gw.deployments.measured(model.deployment, time.perf_counter() - started)
        if self.plan.session is not None:  # the conversation's next request comes back here while it is healthy
            gw.deployments.remember(self.plan.session.digest, model.id, model.deployment)
        if self._request is not None:  # what its upstream was not sent of it, said out loud
            trace.omitted_tools = upstream.omitted_tools(self._request, model.name)
            traits = self._traits(model) if self._traits is not None else PLAIN
            trace.left_out = upstream.left_out(self._request, model.name, traits)
        return answer, model

    async def _count(self, model: Model, err: UpstreamError) -> None:
        """A failure toward the breaker it belongs to: the upstream's, or the deployment's; a wait the upstream named
        cools the deployment for that wait at once."""
        cd = self.gw.cooldowns
        if err.breaker == "upstream":
            cooling = await cd.failed(upstream_key(model.upstream), err.message)
        elif err.breaker == "deployment" and err.wait is not None:
            why = f"HTTP {err.status}: its upstream asked to wait {round(err.wait, 3):g} s"
            cooling = await cd.cool(deployment_key(model.deployment), err.wait, why)
        elif err.breaker == "deployment":
            cooling = await cd.failed(deployment_key(model.deployment), err.message)
        else:
            return
        if cooling is not None:
            metrics.COOLDOWNS.labels(model.upstream).inc()

    async def settle(self, model: Model, usage: Usage | None, output_chars: int) -> Charge | None:
        """The request is answered: charge what it used (nothing was held for a free or counted request), record."""
        trace = self.trace
        charge = None
        if self.hold is not None:
            # No await from the charge on the lease to the record (done): the writer takes both or neither
            charge = await self.gw.meter.settle(self.hold, model, usage, output_chars)
            trace.usage, trace.cost, trace.usage_estimated = charge.usage, str(charge.cost), charge.estimated
            if self.hold.lease is not None and charge.cost:
                trace.paid_by = self.hold.lease
        if trace.outcome == "pending":  # a stream has said how it ended
            trace.outcome = "ok"
        used = (charge.usage.total_tokens if charge is not None else None) or 0
        if model.tpm and self._quota_tokens > used:
            await quotas.give_back(self.gw.limiter, model, self._quota_tokens - used)
        self.done()
        return charge

    async def fail(self, err: ApiError) -> None:
        self.trace.outcome = err.code
        if self.hold is not None:
            await self.gw.meter.release(self.hold)
        self.done()
        err.headers = {**err.headers, **self.headers()}

    def done(self) -> None:
        """The request is over: its decision record (usage counts inference only), its metrics, its log fields."""
        plan, trace = self.plan, self.trace
        if self._flying is not None:
            self.gw.deployments.ended(self._flying.deployment)
            self._flying = None
        self.gw.recorder.add(plan, trace, note=self._note, counted=self._inference, revision=self.gw.revision)
        if self._inference:
            metrics.observe(plan, trace, time.perf_counter() - trace.started)
        u = trace.usage
        requestlog.add(decision_id=plan.id, key_id=plan.key.id, format=plan.format,
                       model=trace.answered.id if trace.answered else None, outcome=trace.outcome,
                       input_tokens=u.input_tokens if u else None, output_tokens=u.output_tokens if u else None,
                       cost=trace.cost, upstream_ms=trace.upstream_ms())

    def headers(self) -> dict[str, str]:
        """The decision's headers (and the hold's rate-limit headers) every answer carries."""
        h = {**(self.hold.headers if self.hold else self.limit_headers), "x-specway-decision-id": self.plan.id}
        if self.trace.answered is not None:
            h["x-specway-model"] = self.trace.answered.id
        if self.trace.omitted_tools:
            h["x-specway-omitted-tools"] = ", ".join(self.trace.omitted_tools)
        return h


def upstream_failure(err: UpstreamError, upstream: str) -> ApiError:
    """An upstream failure, as the caller sees it. Never carries our upstream credentials. A wait the upstream named
    reaches the caller (Retry-After and retry-after-ms); where no retry can help, `x-should-retry: false`."""
    if err.caller_fault:
        return ApiError(codes.UPSTREAM_REJECTED_REQUEST, f"The upstream rejected the request: {err.message}")
    retry = ratelimit.retry_headers(err.retry_after) if err.retry_after else None
    if err.kind == "timeout":
        return ApiError(codes.UPSTREAM_TIMEOUT, f"The upstream {upstream} did not answer in time.")
    if err.kind == "connect":
        return ApiError(codes.UPSTREAM_UNAVAILABLE, f"The upstream {upstream} could not be reached.")
    if err.kind == "quota":
        return ApiError(codes.UPSTREAM_RATE_LIMITED, f"No candidate could take the request: {err.message}.",
                        headers=retry)
    if err.kind == "busy":
        return ApiError(codes.UPSTREAM_BUSY, f"The upstream {upstream} is busy: every connection the gateway may "
                        "open to it is in use. Retry shortly.", headers=retry)
    if err.status in (401, 403):
        return ApiError(codes.UPSTREAM_AUTH_FAILED, f"The upstream {upstream} rejected the gateway's credentials.",
                        headers=dict(NO_RETRY))
    if err.status == 429:
        return ApiError(codes.UPSTREAM_RATE_LIMITED, f"The upstream {upstream} is rate limiting the gateway: "
                        f"{err.message}", headers=retry)
    if err.status == 529:
        return ApiError(codes.UPSTREAM_OVERLOADED, f"The upstream {upstream} is overloaded: {err.message}",
                        headers=retry)
    return ApiError(codes.UPSTREAM_ERROR, f"The upstream {upstream} failed: {err.message}", headers=retry)


def nothing_left(gw: gateway.Gateway, plan: Plan, verb: str = "take") -> ApiError:
    """No candidate was left to try. Skipped for the cost ceiling, with no wait in sight: a 402 naming the ceiling
    and the cheapest worst case. Skipped only for the waits their upstreams asked for (rate limits, quotas): a 429
    with the soonest wait. Skipped by cooldowns: a 503 with the soonest end. Skipped for reasons no wait changes
    (context windows, the allowlist): a 503 that says not to retry."""
    coolings = [c.cooling for c in plan.candidates if c.cooling is not None]
    wait = min((gw.cooldowns.left(c) for c in coolings), default=0.0)
    reasons = "; ".join(f"{c.model.id}: {c.reason}" for c in plan.candidates)
    priced = [c for c in plan.candidates if c.worst is not None]
    if priced and not coolings and plan.max_cost is not None:
        cheapest = min(priced, key=lambda c: c.worst or 0)
        return ApiError(codes.COST_CEILING_EXCEEDED, f"No candidate fits the cost ceiling of "
                        f"{fmt_money(plan.max_cost.amount)} ({plan.max_cost.source}): the cheapest worst case is "
                        f"{fmt_money(cheapest.worst or 0)} ({cheapest.model.id} on {cheapest.model.deployment}). "
                        "Lower the output limit, shorten the prompt, or raise the ceiling.", headers=dict(NO_RETRY))
    if coolings and wait > 0 and all(c.state == "cooling" for c in coolings):
        return ApiError(codes.UPSTREAM_RATE_LIMITED, f"Every candidate is rate limited by its upstream; wait for the "
                        f"first to be free ({reasons}).", headers=ratelimit.retry_headers(wait))
    headers = ratelimit.retry_headers(wait) if wait > 0 else dict(NO_RETRY)
    return ApiError(codes.NO_UPSTREAM_AVAILABLE, f"No candidate can {verb} the request ({reasons}).", headers=headers)
