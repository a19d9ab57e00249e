"""POST /v1/messages/count_tokens: how many input tokens a Messages request would take, for the model routing picks.

An upstream that can count (anthropic) is asked, with the body and headers a message request would carry; for every
other kind the answer is the gateway's estimate, and the response says so (`x-specway-estimated: true`). A count
generates nothing and is never charged: no reservation, nothing taken from the key's tokens per minute; it counts
as one request against the key's requests per minute. Like every routed request it leaves a decision record.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import orjson
from starlette.responses import Response

from handlers import gateway
from handlers.administration.auth import Principal
from handlers.edge.responses import json_response
from handlers.errors import ApiError
from handlers.inference import routing, tokens
from handlers.inference.canonical import Request, Usage
from handlers.inference.catalog import Model
from handlers.inference.formats.base import Traits
from handlers.inference.routing import Plan
from handlers.inference.trace import Trace
from handlers.inference.upstreams.base import Upstream
from handlers.observability import decisions, requestlog
from handlers.serving.relay import attempt, decision_headers, traits_for

ESTIMATED = "x-specway-estimated"
_COUNTED_ONLY = (" Only the prompt's tokens were counted (POST /v1/messages/count_tokens): nothing was generated "
                 "or charged.")


@runtime_checkable
class TokenCounter(Protocol):
    """An upstream that counts a request's input tokens itself (AnthropicUpstream)."""

    name: str

    async def count_tokens(self, request: Request, model: str, traits: Traits) -> int: ...


def estimate(req: Request) -> int:
    """The gateway's count: the prompt's estimate (handlers/inference/tokens.py) and the tools' definitions."""
    tools = sum(tokens.text_tokens(orjson.dumps(t.raw, default=str).decode()) for t in req.tools or ())
    return tokens.input_tokens(req) + tools


async def count(principal: Principal, req: Request) -> Response:
    gw = gateway.current()
    trace = Trace()
    req.stream = False  # nothing is generated, so nothing streams
    plan = routing.decide(gw.catalog, gw.config.policies, gw.config.default_policy, principal.key, req)
    await gw.cooldowns.refresh(c.model.upstream for c in plan.candidates)
    # No context-window check: a prompt too long for a model still has a count, and the caller wants to know it.
    plan = routing.screen(plan, gw.cooldowns.remaining, 0)
    req.effort = plan.effort
    limit_headers: dict[str, str] = {}
    try:
        if plan.refusal is not None:
            raise plan.refusal
        if not plan.runnable():
            reasons = "; ".join(f"{c.model.id}: {c.reason}" for c in plan.candidates)
            raise ApiError(503, "no_upstream_available", f"No candidate can count the request ({reasons}).")
        limit_headers = await gw.meter.count_request(principal.key)
        counted, estimated = await _count(gw, plan, trace, req)
    except ApiError as err:
        trace.outcome = err.code
        _done(plan, trace)
        err.headers = {**limit_headers, **err.headers, **decision_headers(plan, trace)}
        raise
    except BaseException:
        trace.outcome = "internal_error"
        _done(plan, trace)
        raise
    trace.outcome = "ok"
    trace.usage, trace.usage_estimated, trace.cost = Usage(input_tokens=counted), estimated, "0"
    _done(plan, trace)
    headers = {**limit_headers, **decision_headers(plan, trace), **({ESTIMATED: "true"} if estimated else {})}
    return json_response({"input_tokens": counted}, headers=headers)


async def _count(gw: gateway.Gateway, plan: Plan, trace: Trace, req: Request) -> tuple[int, bool]:
    """The count and whether it is estimated. The plan's candidates are tried in order as for a message: an upstream
    failure worth a retry (timeout, refused connection, 429, 5xx) falls through to the next one."""
    first = plan.runnable()[0].model
    if not isinstance(gw.upstreams[first.upstream], TokenCounter):
        trace.answered = first  # nothing to ask: no attempt is recorded
        return estimate(req), True
    traits = traits_for(gw, plan)

    async def ask(upstream: Upstream, model: Model) -> tuple[int, bool]:
        if isinstance(upstream, TokenCounter):
            return await upstream.count_tokens(req, model.name, traits(model)), False
        return estimate(req), True  # a fallback that cannot count

    answer, _ = await attempt(gw, plan, trace, ask)
    return answer


def _done(plan: Plan, trace: Trace) -> None:
    """The decision record (explain reads it back) and the request-log fields. Not the inference metrics: a count
    is no inference, and GET /metrics counts it by its route in specway_requests_total."""
    record = decisions.record(plan, trace)
    record["explanation"] += _COUNTED_ONLY
    gateway.current().recorder.add(record, counted=False)  # usage counts inference only
    u = trace.usage
    requestlog.add(decision_id=plan.id, key_id=plan.key.id, format=plan.format,
                   model=trace.answered.id if trace.answered else None, outcome=trace.outcome,
                   input_tokens=u.input_tokens if u else None, cost=trace.cost, upstream_ms=trace.upstream_ms())
