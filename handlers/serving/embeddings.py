"""POST /v1/embeddings: route the named model, hold its worst case, ask the upstream, settle, record the decision.

Routing is the inference one (the key's allowlist and policy, aliases, fallbacks, cooldowns) for a request that
names its model; a model that cannot embed (not marked `embeddings`, or on an upstream that is not openai) is a 400
`unsupported_model` when named, and a skipped candidate when it is a fallback. The hold's worst case is every input
token at the highest input-side price and no output; the charge is the upstream's prompt_tokens (the estimate when
it reported none). Fallback, cooldowns and upstream failures are the relay's (attempt, upstream_failure).
"""

from __future__ import annotations

import dataclasses
from typing import cast

from starlette.responses import Response

from generated import errors as codes
from handlers import gateway
from handlers.administration.auth import Principal
from handlers.edge.responses import json_response
from handlers.errors import ApiError
from handlers.inference import affinity, routing
from handlers.inference.canonical import Request
from handlers.inference.catalog import Model
from handlers.inference.formats import embeddings as wire
from handlers.inference.formats.embeddings import Embed
from handlers.inference.routing import Candidate, Plan
from handlers.inference.upstreams.base import Embedder
from handlers.inference.upstreams.registry import KINDS
from handlers.serving import spend
from handlers.serving.lifecycle import Lifecycle
from handlers.store.base import Key


async def planned(gw: gateway.Gateway, key: Key, req: Embed, max_cost: str | None = None) -> tuple[Lifecycle, int]:
    """The request's screened plan, and its input estimate (every input's tokens): what embed() tries, and what a
    route preview shows. `max_cost` is the caller's x-specway-max-cost header."""
    header = spend.asked(max_cost)
    total, longest = wire.input_tokens(req)
    plan = _route(gw, key, req)
    ceiling = spend.ceiling(gw.config.policies[plan.policy], header)
    # The window bounds each input, not their sum.
    return await Lifecycle.screened(gw, plan, longest, worst=(total, 0), ceiling=ceiling), total


async def embed(principal: Principal, req: Embed, max_cost: str | None = None) -> Response:
    gw = gateway.current()
    life, total = await planned(gw, principal.key, req, max_cost)
    async with life.failing():
        models = life.runnable()
        life.hold = await gw.meter.admit_tokens(principal.key, models, total, 0)
        vectors, model = await life.attempt(lambda up, m: cast(Embedder, up).embed(req, m.name))
    charge = await life.settle(model, vectors.usage, 0)
    assert charge is not None  # embeddings always hold (nothing for a free model)
    # The name the caller used, unless a fallback's vectors answered: those belong to another model's space.
    named = req.model if gw.catalog.resolve(req.model) is model else model.id
    return json_response(wire.render(vectors, named, charge.usage), headers=life.headers())


def _route(gw: gateway.Gateway, key: Key, req: Embed) -> Plan:
    """The inference routing of a request that names `req.model`, without the candidates that cannot embed."""
    # Routing reads a request's model, format and effort; an embeddings request has only a model. It belongs to no
    # conversation: its weighted choices hash the request itself, so that a preview agrees with it.
    ask = Request(format="chat", messages=[], model=req.model, body=req.body)
    plan = routing.decide(gw.catalog, gw.config.policies, gw.config.default_policy, key, ask)
    plan = dataclasses.replace(plan, seed=affinity.request_of(key.id, ask))
    plan = dataclasses.replace(plan, format=wire.FORMAT)
    if plan.refusal is not None:
        return plan
    why_not = _cannot_embed(gw, plan.candidates[0].model)
    if why_not is not None:
        err = ApiError(codes.UNSUPPORTED_MODEL, f"The model {req.model!r} cannot make embeddings: {why_not}.",
                       param="model")
        return dataclasses.replace(plan, why=err.message, refusal=err)
    return dataclasses.replace(plan, candidates=tuple(_embedding_candidate(gw, c) for c in plan.candidates))


def _embedding_candidate(gw: gateway.Gateway, c: Candidate) -> Candidate:
    why_not = None if c.verdict == "skipped" else _cannot_embed(gw, c.model)
    return c if why_not is None else Candidate(c.model, "skipped", f"cannot make embeddings: {why_not}")


def _cannot_embed(gw: gateway.Gateway, model: Model) -> str | None:
    upstream = gw.upstreams[model.upstream]
    if not upstream.embeds:
        return (f"it is served by upstream {model.upstream!r} of kind {upstream.kind!r}, and embeddings are relayed "
                f"to {', '.join(k for k, c in KINDS.items() if c.embeds)} upstreams only")
    if not model.embeddings:
        return "it is not an embedding model (the catalog does not mark it `embeddings: true`)"
    return None
