"""Balancing: each candidate of a plan (a catalog model) becomes its deployments, in the order the policy's
`balance` gives them for this request, with the conversation's own deployment first while affinity is on.

`weighted` ranks by weight, per session (affinity.rank: deterministic, so a preview and the request agree, and every
process gives a session the same deployment); `least_busy` by calls in flight in this process; `latency` by the
moving average of the time to the first byte (an unmeasured deployment first, to measure it); `cost` by the
request's worst case. Ties go by the weighted rank; a deployment of weight 0 comes after the others whatever the
balance. Health, quotas and windows are screened afterwards (routing.screen), so an unhealthy deployment keeps its
place, skipped, and the next one is chosen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from handlers.inference import affinity
from handlers.inference.affinity import Session
from handlers.inference.catalog import Catalog, Model
from handlers.inference.deployments import Deployments
from handlers.inference.routing import Candidate, Plan
from handlers.store.values import fmt_money


@dataclass(frozen=True, slots=True)
class Request:
    """What ordering a request's deployments needs: the policy's balance, the session affinity keeps (None: off),
    what weighted ranks hash (Plan.seed), and the request's size for worst cases."""

    balance: str
    session: Session | None
    seed: Session | None
    input_tokens: int
    output_tokens: int


def expand(plan: Plan, catalog: Catalog, state: Deployments, req: Request) -> Plan:
    """`plan` with each runnable candidate replaced by its deployments, in order. The first keeps the candidate's
    verdict and says how it was picked; the others are fallbacks ("another deployment of ...")."""
    rows: list[Candidate] = []
    remembered = None
    expanded = False
    for c in plan.candidates:
        deployments = catalog.deployments(c.model)
        if c.verdict == "skipped" or len(deployments) == 1:
            rows.append(c)
            continue
        expanded = True
        ordered, how, kept = _arrange(c.model, deployments, state, req)
        remembered = remembered or kept
        rows.append(dataclasses.replace(c, model=ordered[0], reason=f"{c.reason}; {how}"))
        rows += [Candidate(d, "fallback", f"another deployment of {c.model.id}") for d in ordered[1:]]
    if not expanded and plan.remembered is None:
        return plan  # one deployment each: the same plan (a replace() per request costs more than the routing)
    return dataclasses.replace(plan, candidates=tuple(rows), remembered=remembered)


def _arrange(model: Model, deployments: tuple[Model, ...], state: Deployments, req: Request
             ) -> tuple[list[Model], str, str | None]:
    """The deployments in order, how the first was picked (in words), and the conversation's deployment when
    affinity put it first."""
    names = [d.deployment for d in deployments]
    weighted = affinity.rank(req.seed, names, [d.weight for d in deployments])
    place = {i: p for p, i in enumerate(weighted)}
    metric, words = _METRICS[req.balance]
    order = sorted(range(len(deployments)),
                   key=lambda i: (deployments[i].weight <= 0, metric(deployments[i], state, req), place[i]))
    if req.session is not None:
        kept = state.recall(req.session.digest, model.id)
        if kept in names:
            first = names.index(kept)
            order.remove(first)
            how = (f"session affinity ({req.session.source}): the conversation's last request went to deployment "
                   f"{kept}")
            return [deployments[first], *(deployments[i] for i in order)], how, kept
    chosen = deployments[order[0]]
    return [deployments[i] for i in order], words(chosen, deployments, state, req), None


def _weight_words(d: Model, every: tuple[Model, ...], _state: Deployments, _req: Request) -> str:
    total = sum(x.weight for x in every if x.weight > 0)
    return f"balance weighted: deployment {d.deployment}, weight {d.weight:g} of {total:g}"


def _busy_words(d: Model, _every: tuple[Model, ...], state: Deployments, _req: Request) -> str:
    n = state.in_flight(d.deployment)
    return f"balance least_busy: deployment {d.deployment}, {n} call{'' if n == 1 else 's'} in flight"


def _latency_words(d: Model, _every: tuple[Model, ...], state: Deployments, _req: Request) -> str:
    seconds = state.latency(d.deployment)
    measured = "not measured yet" if seconds is None else f"{round(seconds * 1000)} ms to the first byte"
    return f"balance latency: deployment {d.deployment}, {measured}"


def _cost_words(d: Model, _every: tuple[Model, ...], _state: Deployments, req: Request) -> str:
    return (f"balance cost: deployment {d.deployment}, worst case "
            f"{fmt_money(d.worst_case(req.input_tokens, req.output_tokens))}")


def _latency(d: Model, state: Deployments, _req: Request) -> float:
    seconds = state.latency(d.deployment)
    return -1.0 if seconds is None else seconds  # unmeasured first


_METRICS: dict[str, tuple[Callable[[Model, Deployments, Request], Any], Callable[..., str]]] = {
    "weighted": (lambda _d, _s, _r: 0, _weight_words),
    "least_busy": (lambda d, s, _r: s.in_flight(d.deployment), _busy_words),
    "latency": (_latency, _latency_words),
    "cost": (lambda d, _s, r: d.worst_case(r.input_tokens, r.output_tokens), _cost_words),
}
