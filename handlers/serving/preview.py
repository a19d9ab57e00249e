"""POST /v1/route/preview/...: the plan a request would get, routed exactly as the real request would be (the same
`planned` of the relay and of embeddings), answered without calling an upstream, charging, recording or taking
anything from a rate limit."""

from __future__ import annotations

from starlette.responses import Response

from generated import models
from handlers import gateway
from handlers.administration.auth import Principal
from handlers.edge.responses import model_response
from handlers.errors import ApiError
from handlers.inference import tokens
from handlers.inference.canonical import Request
from handlers.inference.formats.embeddings import Embed
from handlers.inference.routing import Plan
from handlers.observability import decisions
from handlers.serving import embeddings, relay
from handlers.serving.lifecycle import Lifecycle, nothing_left
from handlers.store.values import fmt_money


async def inference(principal: Principal, req: Request, session: str | None = None, max_cost: str | None = None
                    ) -> Response:
    """The plan of a chat, Responses or Messages request (with its x-specway-session and x-specway-max-cost)."""
    gw = gateway.current()
    life, estimate = await relay.planned(gw, principal.key, req, session, max_cost)
    return _answer(gw, life, estimate, tokens.max_output_tokens(req))


async def embedding(principal: Principal, req: Embed, max_cost: str | None = None) -> Response:
    """The plan of an embeddings request (which generates no output)."""
    gw = gateway.current()
    life, total = await embeddings.planned(gw, principal.key, req, max_cost)
    return _answer(gw, life, total, 0)


def _answer(gw: gateway.Gateway, life: Lifecycle, inp: int, out: int) -> Response:
    plan = life.plan
    refusal = plan.refusal or (None if plan.runnable() else nothing_left(gw, plan))
    return model_response(models.RoutePreview(
        object="route.preview", format=plan.format, requested_model=plan.requested, effort=plan.effort,
        policy=plan.policy, input_tokens=inp, max_output_tokens=out,
        candidates=[models.PreviewCandidate(
            model=c.model.id, upstream=c.model.upstream, deployment=c.model.deployment, verdict=c.verdict,
            reason=c.reason, worst_case_cost=fmt_money(c.model.worst_case(inp, out))) for c in plan.candidates],
        max_cost=decisions.max_cost_of(plan), stepped_down=plan.stepped_down, affinity=decisions.affinity_of(plan),
        refusal=None if refusal is None else models.PreviewRefusal(
            status=refusal.status, code=refusal.code, message=refusal.message),
        explanation=_explanation(plan, refusal),
    ))


def _explanation(plan: Plan, refusal: ApiError | None) -> str:
    if plan.refusal is not None:
        return f"Routing would refuse the request: {plan.why}"
    parts = [plan.why]
    first = plan.candidates[0]
    if first.verdict == "skipped":
        parts.append(f"It would be skipped ({first.reason}).")
    runnable = plan.runnable()
    if runnable:
        parts.append(f"{runnable[0].model.id} on {runnable[0].model.deployment} would be tried first.")
    elif refusal is not None:
        parts.append(f"No candidate is left, so the request would be answered {refusal.status} {refusal.code}.")
    return " ".join(parts)
