"""Relay one canonical request through its decision's candidates, whole or streamed.

Fallback happens only before the first byte reaches the caller; after that a failure is reported in-stream.
Streamed and whole answers are metered by the same code: a stream's usage is folded from its events.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

from starlette.responses import Response

from handlers import gateway, routing
from handlers.auth import Principal
from handlers.canonical import Answer, Event, Request, Result, UsageReport
from handlers.errors import ApiError
from handlers.http import json_response, sse_response
from handlers.upstreams.base import UpstreamError

log = logging.getLogger("specway.relay")


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


def _headers(decision: routing.Decision) -> dict[str, str]:
    h = {"x-specway-decision-id": decision.id}
    if decision.answered is not None:
        h["x-specway-model"] = decision.answered.id
    return h


def _settle(decision: routing.Decision, result_usage: Any) -> None:
    decision.usage = result_usage
    if decision.answered is not None and result_usage is not None:
        cost = decision.answered.cost(result_usage.input_tokens or 0, result_usage.output_tokens or 0)
        decision.cost = str(cost)


async def relay(principal: Principal, req: Request, wire: ModuleType) -> Response:
    gw = gateway.current()
    decision = routing.decide(gw.catalog, gw.config.policies or {}, gw.config.default_policy or "default", principal,
                              req)
    try:
        if req.stream:
            return await _stream(gw, decision, req, wire)
        result = await _complete(gw, decision, req)
    except ApiError as err:
        decision.outcome = err.code
        gw.recorder.add(decision.record())
        err.headers = {**err.headers, **_headers(decision)}
        raise
    _settle(decision, result.usage)
    decision.outcome = "ok"
    gw.recorder.add(decision.record())
    answer = Answer(decision.id, decision.answered.id, int(time.time()))  # type: ignore[union-attr]
    return json_response(wire.render(result, answer), headers=_headers(decision))


async def _complete(gw: gateway.Gateway, decision: routing.Decision, req: Request) -> Result:
    candidates = decision.runnable()
    for i, cand in enumerate(candidates):
        upstream = gw.upstreams[cand.model.upstream]
        started = time.perf_counter()
        try:
            result = await upstream.complete(req, cand.model.name)
        except UpstreamError as err:
            decision.attempt(cand, started, err.status, f"{err.kind}: {err.message}")
            if err.retryable and i + 1 < len(candidates):
                continue
            raise upstream_failure(err, upstream.name) from None
        decision.attempt(cand, started, 200, None)
        decision.answered = cand.model
        return result
    raise ApiError(503, "no_upstream", "No upstream could take the request.")


async def _open_stream(gw: gateway.Gateway, decision: routing.Decision,
                       req: Request) -> tuple[Event, AsyncIterator[Event]]:
    """The first event of the first candidate that starts; earlier failures fall through to the next."""
    candidates = decision.runnable()
    for i, cand in enumerate(candidates):
        upstream = gw.upstreams[cand.model.upstream]
        started = time.perf_counter()
        events = upstream.stream(req, cand.model.name)
        try:
            first = await anext(events)
        except UpstreamError as err:
            decision.attempt(cand, started, err.status, f"{err.kind}: {err.message}")
            await _close(events)
            if err.retryable and i + 1 < len(candidates):
                continue
            raise upstream_failure(err, upstream.name) from None
        except StopAsyncIteration:
            first = None  # type: ignore[assignment]
        decision.attempt(cand, started, 200, None)
        decision.answered = cand.model
        return first, events
    raise ApiError(503, "no_upstream", "No upstream could take the request.")


async def _close(events: AsyncIterator[Event]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        try:
            await aclose()
        except Exception:  # closing a failed stream must not hide the failure being reported
            log.debug("error while closing an upstream stream", exc_info=True)


async def _stream(gw: gateway.Gateway, decision: routing.Decision, req: Request, wire: ModuleType) -> Response:
    first, events = await _open_stream(gw, decision, req)
    answer = Answer(decision.id, decision.answered.id, int(time.time()))  # type: ignore[union-attr]
    renderer = wire.StreamRenderer(answer, req)
    upstream_name = decision.answered.upstream  # type: ignore[union-attr]

    async def body() -> AsyncIterator[bytes]:
        decision.outcome = "cancelled"  # until the stream ends one way or another
        try:
            yield renderer.start()
            pending = [first] if first is not None else []
            async for ev in _chain(pending, events):
                if isinstance(ev, UsageReport):
                    decision.usage = ev.usage
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
            await _close(events)
            _settle(decision, decision.usage)
            gw.recorder.add(decision.record())

    return sse_response(body(), headers=_headers(decision))


async def _chain(first: list[Event], rest: AsyncIterator[Event]) -> AsyncIterator[Event]:
    for ev in first:
        yield ev
    async for ev in rest:
        yield ev
