"""Relay one canonical request through its plan's candidates, whole or streamed; what happens goes in its Trace.

Before any upstream call: routing (with cooldowns and context windows), rate limits and the worst-case reservation.
Fallback happens only before the first byte reaches the caller; after that a failure is reported in-stream.
Streamed and whole answers are metered by the same code.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import anyio
from starlette.responses import Response

from handlers import gateway
from handlers.administration.auth import Principal
from handlers.edge.responses import json_response, sse_response
from handlers.errors import ApiError
from handlers.inference import routing, tokens
from handlers.inference.canonical import Answer, Event, Request, TextDelta, Usage, UsageReport
from handlers.inference.catalog import Model
from handlers.inference.formats.base import CallerFormat, Traits
from handlers.inference.routing import Plan
from handlers.inference.trace import Trace
from handlers.inference.upstreams.base import Upstream, UpstreamError
from handlers.metering.meter import Hold
from handlers.observability import decisions, metrics, requestlog

log = logging.getLogger("specway.relay")
T = TypeVar("T")
_SETTLE_TIMEOUT = 10.0  # seconds a cancelled stream may take to close its upstream and settle


def upstream_failure(err: UpstreamError, upstream: str) -> ApiError:
    """An upstream failure, as the caller sees it. Never carries our upstream credentials."""
    if err.caller_fault:
        return ApiError(400, "upstream_rejected_request", f"The upstream rejected the request: {err.message}")
    retry = {"retry-after": str(max(1, min(60, round(err.retry_after))))} if err.retry_after else None
    if err.kind == "timeout":
        return ApiError(504, "upstream_timeout", f"The upstream {upstream} did not answer in time.")
    if err.kind == "connect":
        return ApiError(503, "upstream_unavailable", f"The upstream {upstream} could not be reached.")
    if err.kind == "busy":
        return ApiError(503, "upstream_busy", f"The upstream {upstream} is busy: every connection the gateway may "
                        "open to it is in use. Retry shortly.", headers=retry)
    if err.status in (401, 403):
        return ApiError(502, "upstream_auth_failed", f"The upstream {upstream} rejected the gateway's credentials.")
    if err.status == 429:
        return ApiError(503, "upstream_overloaded", f"The upstream {upstream} is rate limiting the gateway.",
                        headers=retry)
    return ApiError(502, "upstream_error", f"The upstream {upstream} failed: {err.message}")


def nothing_left(gw: gateway.Gateway, plan: Plan) -> ApiError:
    waits = [gw.cooldowns.remaining(c.model.upstream) for c in plan.candidates]
    wait = min((w for w in waits if w > 0), default=0)
    reasons = "; ".join(f"{c.model.id}: {c.reason}" for c in plan.candidates)
    headers = {"retry-after": str(max(1, min(60, math.ceil(wait))))} if wait else None
    return ApiError(503, "no_upstream_available", f"No candidate can take the request ({reasons}).", headers=headers)


def decision_headers(plan: Plan, trace: Trace, hold: Hold | None = None) -> dict[str, str]:
    h = {**(hold.headers if hold else {}), "x-specway-decision-id": plan.id}
    if trace.answered is not None:
        h["x-specway-model"] = trace.answered.id
    return h


async def relay(principal: Principal, req: Request, wire: CallerFormat) -> Response:
    gw = gateway.current()
    trace = Trace()
    plan = routing.decide(gw.catalog, gw.config.policies, gw.config.default_policy, principal.key, req)
    await gw.cooldowns.refresh(c.model.upstream for c in plan.candidates)
    estimate = tokens.input_tokens(req)  # once: the context check and the reservation both need it
    plan = routing.screen(plan, gw.cooldowns.remaining, estimate + (req.max_tokens or 0))
    req.effort = plan.effort  # the tier word every format's renderer maps into its own vocabulary
    traits = traits_for(gw, plan)
    hold: Hold | None = None
    try:
        if plan.refusal is not None:
            raise plan.refusal
        if not plan.runnable():
            raise nothing_left(gw, plan)
        hold = await gw.meter.admit(principal.key, [c.model for c in plan.runnable()], req, estimate)
        if req.stream:
            return await _stream(gw, plan, trace, req, wire, hold, traits, estimate)
        result, model = await attempt(gw, plan, trace, lambda up, m: up.complete(req, m.name, traits(m)))
    except ApiError as err:
        await fail(gw, plan, trace, hold, err)
        raise
    except BaseException:
        await fail(gw, plan, trace, hold, ApiError(500, "internal_error", "failed"))
        raise
    await _settle(gw, plan, trace, hold, model, result.usage, len(result.text()))
    _log_content(gw, req, result.text())
    answer = Answer(plan.id, model.id, int(time.time()), estimate)
    return json_response(wire.render(result, answer, req), headers=decision_headers(plan, trace, hold))


def traits_for(gw: gateway.Gateway, plan: Plan) -> Callable[[Model], Traits]:
    """What each candidate's body is rendered for: the catalog's word on the model, the policy's thinking budgets."""
    budget = gw.config.policies[plan.policy].thinking_budget
    budgets = (budget.low, budget.medium, budget.high)
    return lambda model: Traits(reasoning=model.reasoning, thinking_budgets=budgets)


def done(gw: gateway.Gateway, plan: Plan, trace: Trace) -> None:
    """A request is over: its decision record (usage counts it as inference), its metrics, its request-log fields."""
    gw.recorder.add(decisions.record(plan, trace))
    metrics.observe(plan, trace, time.perf_counter() - trace.started)
    u = trace.usage
    requestlog.add(decision_id=plan.id, key_id=plan.key.id, format=plan.format,
                   model=trace.answered.id if trace.answered else None, outcome=trace.outcome,
                   input_tokens=u.input_tokens if u else None, output_tokens=u.output_tokens if u else None,
                   cost=trace.cost, upstream_ms=trace.upstream_ms())


async def fail(gw: gateway.Gateway, plan: Plan, trace: Trace, hold: Hold | None, err: ApiError) -> None:
    trace.outcome = err.code
    if hold is not None:
        await gw.meter.release(hold)
    done(gw, plan, trace)
    err.headers = {**err.headers, **decision_headers(plan, trace, hold)}


_LOGGED_CHARS = 2000


def _log_content(gw: gateway.Gateway, req: Request, answer: str) -> None:
    """Only with server.log_content: the last user message and the answer, cut short."""
    if gw.config.server.log_content:
        prompt = next((m.text() for m in reversed(req.messages) if m.role == "user"), "")
        requestlog.add(prompt=prompt[:_LOGGED_CHARS], answer=answer[:_LOGGED_CHARS])


async def _settle(gw: gateway.Gateway, plan: Plan, trace: Trace, hold: Hold, model: Model, usage: Usage | None,
                  chars: int) -> None:
    charge = await gw.meter.settle(hold, model, usage, chars)
    trace.usage, trace.cost, trace.usage_estimated = charge.usage, str(charge.cost), charge.estimated
    if trace.outcome == "pending":
        trace.outcome = "ok"
    done(gw, plan, trace)


async def attempt(gw: gateway.Gateway, plan: Plan, trace: Trace,
                   call: Callable[[Upstream, Model], Awaitable[T]]) -> tuple[T, Model]:
    """Try each runnable candidate in order until one answers. Any failure but the caller's own falls through to the
    next (UpstreamError.falls_back); only an upstream's transient failures count toward its cooldown (trips_cooldown).
    An upstream whose pool was full is not waited on twice for one request. Returns the answer and the model that
    gave it; when every candidate failed, the last failure is the caller's answer."""
    if gw.tracing is not None:  # telemetry on: each call in a client span (handlers/observability/upstream_spans.py)
        call = gw.tracing.upstreams.traced(call, plan)
    failed: tuple[UpstreamError, str] | None = None
    busy: set[str] | None = None  # made only once a pool was found full
    for cand in plan.runnable():
        upstream = gw.upstreams[cand.model.upstream]
        started = time.perf_counter()
        try:
            if busy and upstream.name in busy:
                raise UpstreamError("busy", f"upstream {upstream.name} had no free connection a moment ago; not "
                                    "waited on again for this request", retry_after=1.0)
            answer = await call(upstream, cand.model)
        except UpstreamError as err:
            trace.attempted(cand.model, started, err.status, err.kind, err.message)
            if err.trips_cooldown and await gw.cooldowns.failed(upstream.name):
                metrics.COOLDOWNS.labels(upstream.name).inc()
            if not err.falls_back:
                raise upstream_failure(err, upstream.name) from None
            if err.kind == "busy":
                busy = (busy or set()) | {upstream.name}
            failed = err, upstream.name
            continue
        await gw.cooldowns.succeeded(upstream.name)
        trace.attempted(cand.model, started, 200)
        trace.answered = cand.model
        return answer, cand.model
    if failed is not None:
        raise upstream_failure(*failed) from None
    raise ApiError(503, "no_upstream_available", "No upstream could take the request.")


async def _first_event(events: AsyncIterator[Event]) -> tuple[Event | None, AsyncIterator[Event]]:
    """Wait for the stream's first event, so a refusal can still fall back (nothing has reached the caller)."""
    try:
        return await anext(events), events
    except StopAsyncIteration:
        return None, events
    except BaseException:
        await _close(events)
        raise


async def _close(events: AsyncIterator[Event]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        try:
            await aclose()
        except Exception:  # closing a failed stream must not hide the failure being reported
            log.debug("error while closing an upstream stream", exc_info=True)


async def _stream(gw: gateway.Gateway, plan: Plan, trace: Trace, req: Request, wire: CallerFormat,
                  hold: Hold, traits: Callable[[Model], Traits], estimate: int) -> Response:
    (first, events), model = await attempt(gw, plan, trace,
                                            lambda up, m: _first_event(up.stream(req, m.name, traits(m))))
    answer = Answer(plan.id, model.id, int(time.time()), estimate)
    renderer = wire.StreamRenderer(answer, req)

    async def body() -> AsyncIterator[bytes]:
        trace.outcome = "cancelled"  # until the stream ends one way or another
        chars = 0
        texts: list[str] = []
        try:
            metrics.FIRST_BYTE.labels(plan.format, answer.model).observe(time.perf_counter() - trace.started)
            yield renderer.start()
            async for ev in _chain(first, events):
                if isinstance(ev, UsageReport):
                    trace.usage = ev.usage
                elif isinstance(ev, TextDelta):
                    chars += len(ev.text)
                    if chars <= _LOGGED_CHARS:
                        texts.append(ev.text)
                chunk = renderer.event(ev)
                if chunk:
                    yield chunk
            trace.outcome = "ok"
            yield renderer.finish()
        except UpstreamError as err:
            api = upstream_failure(err, model.upstream)
            trace.outcome = api.code
            yield renderer.error(api)
        except Exception:  # a fault of ours mid-stream still ends the stream with an error event, never a cut
            log.exception("stream failed")
            trace.outcome = "internal_error"
            yield renderer.error(ApiError(500, "internal_error", "The gateway failed while streaming; it has been logged."))
        finally:
            # A client that went away cancels this generator; closing the upstream and settling must still run.
            with anyio.move_on_after(_SETTLE_TIMEOUT, shield=True):
                await _close(events)
                await _settle(gw, plan, trace, hold, model, trace.usage, chars)
                _log_content(gw, req, "".join(texts))

    return sse_response(body(), headers=decision_headers(plan, trace, hold))


async def _chain(first: Event | None, rest: AsyncIterator[Event]) -> AsyncIterator[Event]:
    if first is not None:
        yield first
    async for ev in rest:
        yield ev
