"""Relay one canonical request through its decision's candidates, whole or streamed.

Before any upstream call: routing (with cooldowns and context windows), rate limits and the worst-case reservation.
Fallback happens only before the first byte reaches the caller; after that a failure is reported in-stream.
Streamed and whole answers are metered by the same code.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from types import ModuleType
from typing import TypeVar

import anyio
from starlette.responses import Response

from handlers import gateway
from handlers.administration.auth import Principal
from handlers.edge.responses import json_response, sse_response
from handlers.errors import ApiError
from handlers.inference import routing, tokens
from handlers.inference.canonical import Answer, Event, Request, TextDelta, UsageReport
from handlers.inference.catalog import Model
from handlers.inference.upstreams.base import Upstream, UpstreamError
from handlers.metering.meter import Hold
from handlers.observability import metrics, requestlog

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
    if err.status in (401, 403):
        return ApiError(502, "upstream_auth_failed", f"The upstream {upstream} rejected the gateway's credentials.")
    if err.status == 429:
        return ApiError(503, "upstream_overloaded", f"The upstream {upstream} is rate limiting the gateway.",
                        headers=retry)
    return ApiError(502, "upstream_error", f"The upstream {upstream} failed: {err.message}")


def _nothing_left(gw: gateway.Gateway, decision: routing.Decision) -> ApiError:
    waits = [gw.cooldowns.remaining(c.model.upstream) for c in decision.candidates]
    wait = min((w for w in waits if w > 0), default=0)
    reasons = "; ".join(f"{c.model.id}: {c.reason}" for c in decision.candidates)
    headers = {"retry-after": str(max(1, min(60, math.ceil(wait))))} if wait else None
    return ApiError(503, "no_upstream_available", f"No candidate can take the request ({reasons}).", headers=headers)


def _headers(decision: routing.Decision, hold: Hold | None = None) -> dict[str, str]:
    h = {**(hold.headers if hold else {}), "x-specway-decision-id": decision.id}
    if decision.answered is not None:
        h["x-specway-model"] = decision.answered.id
    return h


async def relay(principal: Principal, req: Request, wire: ModuleType) -> Response:
    gw = gateway.current()
    decision = routing.decide(gw.catalog, gw.config.policies or {}, gw.config.default_policy or "default", principal,
                              req)
    await gw.cooldowns.refresh(c.model.upstream for c in decision.candidates)
    estimate = tokens.input_tokens(req)  # once: the context check and the reservation both need it
    routing.screen(decision, gw.cooldowns.remaining, estimate + (req.max_tokens or 0))
    hold: Hold | None = None
    try:
        if decision.refusal is not None:
            raise decision.refusal
        if not decision.runnable():
            raise _nothing_left(gw, decision)
        hold = await gw.meter.admit(principal.key, [c.model for c in decision.runnable()], req, estimate)
        if req.stream:
            return await _stream(gw, decision, req, wire, hold)
        result = await _attempt(gw, decision, lambda up, m: up.complete(req, m.name))
    except ApiError as err:
        await _fail(gw, decision, hold, err)
        raise
    except BaseException:
        await _fail(gw, decision, hold, ApiError(500, "internal_error", "failed"))
        raise
    await _settle(gw, decision, hold, result.usage, len(result.text()))
    _log_content(gw, req, result.text())
    answer = Answer(decision.id, decision.answered.id, int(time.time()))  # type: ignore[union-attr]
    return json_response(wire.render(result, answer, req), headers=_headers(decision, hold))


def _done(gw: gateway.Gateway, decision: routing.Decision) -> None:
    """A decision is over: its record, its metrics and its request-log fields."""
    gw.recorder.add(decision.record())
    metrics.observe(decision, time.perf_counter() - decision.started)
    u = decision.usage
    requestlog.add(decision_id=decision.id, key_id=decision.principal.key.id, format=decision.format,
                   model=decision.answered.id if decision.answered else None, outcome=decision.outcome,
                   input_tokens=u.input_tokens if u else None, output_tokens=u.output_tokens if u else None,
                   cost=decision.cost, upstream_ms=round(sum(a["latency_ms"] for a in decision.attempts), 3))


async def _fail(gw: gateway.Gateway, decision: routing.Decision, hold: Hold | None, err: ApiError) -> None:
    decision.outcome = err.code
    if hold is not None:
        await gw.meter.release(hold)
    _done(gw, decision)
    err.headers = {**err.headers, **_headers(decision, hold)}


_LOGGED_CHARS = 2000


def _log_content(gw: gateway.Gateway, req: Request, answer: str) -> None:
    """Only with server.log_content: the last user message and the answer, cut short."""
    if gw.config.server.log_content:  # type: ignore[union-attr]
        prompt = next((m.text() for m in reversed(req.messages) if m.role == "user"), "")
        requestlog.add(prompt=prompt[:_LOGGED_CHARS], answer=answer[:_LOGGED_CHARS])


async def _settle(gw: gateway.Gateway, decision: routing.Decision, hold: Hold, usage: object, chars: int) -> None:
    assert decision.answered is not None
    charge = await gw.meter.settle(hold, decision.answered, usage, chars)  # type: ignore[arg-type]
    decision.usage, decision.cost, decision.usage_estimated = charge.usage, str(charge.cost), charge.estimated
    if decision.outcome == "pending":
        decision.outcome = "ok"
    _done(gw, decision)


async def _attempt(gw: gateway.Gateway, decision: routing.Decision,
                   call: Callable[[Upstream, Model], Awaitable[T]]) -> T:
    """Try each runnable candidate in order until one answers; retryable failures fall through to the next."""
    candidates = decision.runnable()
    for i, cand in enumerate(candidates):
        upstream = gw.upstreams[cand.model.upstream]
        started = time.perf_counter()
        try:
            answer = await call(upstream, cand.model)
        except UpstreamError as err:
            decision.attempt(cand, started, err.status, f"{err.kind}: {err.message}")
            if err.retryable:
                if await gw.cooldowns.failed(upstream.name):
                    metrics.COOLDOWNS.labels(upstream.name).inc()
                if i + 1 < len(candidates):
                    continue
            raise upstream_failure(err, upstream.name) from None
        await gw.cooldowns.succeeded(upstream.name)
        decision.attempt(cand, started, 200, None)
        decision.answered = cand.model
        return answer
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


async def _stream(gw: gateway.Gateway, decision: routing.Decision, req: Request, wire: ModuleType,
                  hold: Hold) -> Response:
    first, events = await _attempt(gw, decision, lambda up, m: _first_event(up.stream(req, m.name)))
    answer = Answer(decision.id, decision.answered.id, int(time.time()))  # type: ignore[union-attr]
    renderer = wire.StreamRenderer(answer, req)
    upstream_name = decision.answered.upstream  # type: ignore[union-attr]

    async def body() -> AsyncIterator[bytes]:
        decision.outcome = "cancelled"  # until the stream ends one way or another
        chars = 0
        texts: list[str] = []
        try:
            metrics.FIRST_BYTE.labels(decision.format, answer.model).observe(time.perf_counter() - decision.started)
            yield renderer.start()
            async for ev in _chain(first, events):
                if isinstance(ev, UsageReport):
                    decision.usage = ev.usage
                elif isinstance(ev, TextDelta):
                    chars += len(ev.text)
                    if chars <= _LOGGED_CHARS:
                        texts.append(ev.text)
                chunk = renderer.event(ev)
                if chunk:
                    yield chunk
            decision.outcome = "ok"
            yield renderer.finish()
        except UpstreamError as err:
            api = upstream_failure(err, upstream_name)
            decision.outcome = api.code
            yield renderer.error(api)
        except Exception:  # a fault of ours mid-stream still ends the stream with an error event, never a cut
            log.exception("stream failed")
            decision.outcome = "internal_error"
            yield renderer.error(ApiError(500, "internal_error", "The gateway failed while streaming; it has been logged."))
        finally:
            # A client that went away cancels this generator; closing the upstream and settling must still run.
            with anyio.move_on_after(_SETTLE_TIMEOUT, shield=True):
                await _close(events)
                await _settle(gw, decision, hold, decision.usage, chars)
                _log_content(gw, req, "".join(texts))

    return sse_response(body(), headers=_headers(decision, hold))


async def _chain(first: Event | None, rest: AsyncIterator[Event]) -> AsyncIterator[Event]:
    if first is not None:
        yield first
    async for ev in rest:
        yield ev
