"""POST /v1/messages/count_tokens (and Gemini's :countTokens): how many input tokens a request would take, for the
model routing picks.

An upstream that can count (anthropic) is asked, with the body and headers a message request would carry; for every
other kind the answer is the gateway's estimate, and the response says so (`x-specway-estimated: true`). A count
generates nothing and is never charged: no reservation, nothing taken from the key's tokens per minute; it counts
as one request against the key's requests per minute. Like every routed request it leaves a decision record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import orjson
from starlette.responses import Response

from handlers import gateway
from handlers.administration.auth import Principal
from handlers.edge.responses import json_response
from handlers.inference import affinity, routing, tokens
from handlers.inference.canonical import Request, Usage
from handlers.inference.catalog import Model
from handlers.inference.formats.base import Traits
from handlers.inference.upstreams.base import Upstream
from handlers.serving import spend
from handlers.serving.lifecycle import Lifecycle
from handlers.serving.relay import traits_for

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


def _messages_count(tokens: int) -> dict[str, Any]:
    return {"input_tokens": tokens}


async def count(principal: Principal, req: Request, session: str | None = None,
                answer: Callable[[int], dict[str, Any]] = _messages_count) -> Response:
    """The count of `req`'s prompt, answered as `answer` writes it (Messages' {input_tokens} unless said)."""
    gw = gateway.current()
    req.stream = False  # nothing is generated, so nothing streams
    key = principal.key
    _, policy = routing.policy_of(gw.config.policies, gw.config.default_policy, key)
    # Routed as the messages it counts for would be: the same session, the same step-down.
    plan = routing.decide(gw.catalog, gw.config.policies, gw.config.default_policy, key, req,
                          affinity.session_of(key.id, req, session), await spend.stepped_down(policy, key, gw.credits))
    # No context-window check: a prompt too long for a model still has a count, and the caller wants to know it.
    life = await Lifecycle.screened(gw, plan, 0, inference=False, note=_COUNTED_ONLY)
    req.effort = life.plan.effort
    async with life.failing():
        life.runnable("count")
        life.limit_headers = await gw.meter.count_request(principal.key)
        counted, estimated = await _count(gw, life, req)
    trace = life.trace
    trace.usage, trace.usage_estimated, trace.cost = Usage(input_tokens=counted), estimated, "0"
    assert trace.answered is not None  # _count answered or raised
    await life.settle(trace.answered, trace.usage, 0)  # nothing was held: nothing is charged
    headers = {**life.headers(), **({ESTIMATED: "true"} if estimated else {})}
    return json_response(answer(counted), headers=headers)


async def _count(gw: gateway.Gateway, life: Lifecycle, req: Request) -> tuple[int, bool]:
    """The count and whether it is estimated. The plan's candidates are tried in order as for a message: an upstream
    failure worth a retry (timeout, refused connection, 429, 5xx) falls through to the next one."""
    first = life.plan.runnable()[0].model
    if not isinstance(gw.upstreams[first.upstream], TokenCounter):
        life.trace.answered = first  # nothing to ask: no attempt is recorded
        return estimate(req), True
    traits = traits_for(gw, life.plan)

    async def ask(upstream: Upstream, model: Model) -> tuple[int, bool]:
        if isinstance(upstream, TokenCounter):
            return await upstream.count_tokens(req, model.name, traits(model)), False
        return estimate(req), True  # a fallback that cannot count

    answer, _ = await life.attempt(ask)
    return answer
