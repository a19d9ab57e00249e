"""Routing: the key's policy, the requested model or alias, and the request's effort -> ordered candidates.

Every request that reaches routing gets a Plan. What then happens to it is its Trace (handlers/inference/trace.py);
the two together make the decision record that GET /v1/route/explain reads back.
"""

from __future__ import annotations

import dataclasses
import functools
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

from generated import errors as codes
from generated.config import PolicySettings
from handlers.errors import ApiError
from handlers.inference import affinity
from handlers.inference.affinity import Session
from handlers.inference.canonical import Request
from handlers.inference.catalog import Catalog, Model
from handlers.inference.cooldown import Cooling
from handlers.store.base import Key
from handlers.store.values import fmt_money

_EFFORT_WORDS = {"none": "minimal", "minimal": "minimal", "low": "low", "medium": "medium", "high": "high", "max": "high",
                 "xhigh": "high"}


@dataclass(frozen=True, slots=True)
class Candidate:
    model: Model  # one deployment of a catalog model (Model.deployment)
    verdict: str  # chosen | fallback | skipped
    reason: str
    cooling: Cooling | None = None  # the cooldown that skipped it, if one did
    worst: Decimal | None = None  # its worst case, when that is what skipped it (over the cost ceiling)


@dataclass(frozen=True, slots=True)
class Ceiling:
    """The most a request may cost (serving/spend.py), and where that comes from, in words."""

    amount: Decimal
    source: str


@dataclass(frozen=True, slots=True)
class Plan:
    id: str
    key: Key  # the relay key that made the request
    format: str
    requested: str | None
    effort: str | None
    policy: str
    stream: bool
    why: str  # how the first candidate was picked, in words
    candidates: tuple[Candidate, ...] = ()
    refusal: ApiError | None = None  # routing itself refused: an unknown model, or one the key may not use
    created: datetime = field(default_factory=lambda: datetime.now(UTC))
    max_cost: Ceiling | None = None  # the cost ceiling it was routed under
    stepped_down: str | None = None  # why the policy stepped down to its cheaper tier, if it did
    session: Session | None = None  # the conversation it belongs to, while the policy keeps affinity
    seed: Session | None = None  # what weighted choices hash: the session, or the request itself without affinity
    remembered: str | None = None  # the deployment session affinity put first, if it did

    def runnable(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.candidates if c.verdict != "skipped")


def new_decision_id() -> str:
    """32 hex digits: the time in milliseconds (12), then 80 random bits (unguessable). Ids that begin with the time
    are added at the end of the store's index of records rather than at a random page of it, which costs a SQLite
    store with 200,000 records 27 % less CPU per record (bench/README.md, "Decision records")."""
    return f"{time.time_ns() // 1_000_000:012x}{secrets.token_hex(10)}"


def normalise_effort(req: Request, policy: PolicySettings) -> str | None:
    if req.effort:
        return _EFFORT_WORDS.get(req.effort.lower(), req.effort.lower())
    if req.thinking_budget is not None:
        budget = policy.thinking_budget
        if req.thinking_budget <= budget.low:
            return "low"
        return "medium" if req.thinking_budget <= budget.medium else "high"
    return None


def policy_of(policies: dict[str, PolicySettings], default_policy: str, key: Key) -> tuple[str, PolicySettings]:
    """The key's policy (the default one when it names none that exists), with its name."""
    name = key.policy if key.policy in policies else default_policy
    return name, policies[name]


def decide(catalog: Catalog, policies: dict[str, PolicySettings], default_policy: str, key: Key,
           req: Request, session: Session | None = None, stepped_down: str | None = None) -> Plan:
    """The key's plan for `req`: its first choice and the fallbacks, in order. Weighted choices follow the request's
    `session` (affinity.py), so that a conversation stays where it started and a preview picks what the request
    then picks (without affinity, they follow the request itself); without a session they are random. A request
    that names no model is routed by the policy's step-down tier when `stepped_down` says why (serving/spend.py)."""
    policy_name, policy = policy_of(policies, default_policy, key)
    effort = normalise_effort(req, policy)
    if stepped_down is None or req.model or policy.step_down is None:
        stepped_down = None
    else:
        effort = policy.step_down.tier
    seed = session if policy.affinity or session is None else affinity.request_of(key.id, req)
    plan = functools.partial(Plan, new_decision_id(), key, req.format, req.model, effort, policy_name, req.stream,
                             stepped_down=stepped_down, session=session if policy.affinity else None, seed=seed)
    try:
        first, why, rest = _first_choice(catalog, policy, policy_name, key.models, req.model, effort, seed)
    except ApiError as err:
        return plan(why=err.message, refusal=err)
    named = policy.fallbacks.get(first.id) or _alias_fallbacks(policy, first)
    chain: list[tuple[Model, str]] = []
    for m, reason in [*((m, f"next in the {effort!r} tier of policy {policy_name!r}") for m in rest),
                      *((catalog.resolve(n), f"fallback for {first.id} in policy {policy_name!r}") for n in named)]:
        if m is not None and m.id != first.id and all(m is not seen for seen, _ in chain):
            chain.append((m, reason))
    if stepped_down is not None:
        why = f"{stepped_down[0].upper()}{stepped_down[1:]}. {why}"
    candidates = [Candidate(first, "chosen", "first choice")]
    for m, reason in chain:
        if Catalog.allowed(m, key.models):
            candidates.append(Candidate(m, "fallback", reason))
        else:
            candidates.append(Candidate(m, "skipped", "not allowed for this key"))
    return plan(why=why, candidates=tuple(candidates))


# What skips a deployment now, if anything: why in words, and the wait until it may be tried (Cooldowns.blocking).
Blocking = Callable[[Model], tuple[str, Cooling] | None]


def screen(plan: Plan, blocking: Blocking, needed_tokens: int, ceiling: Ceiling | None = None,
           worst: tuple[int, int] = (0, 0)) -> Plan:
    """The plan without candidates whose deployment or upstream is cooling down, whose context window is too small,
    or whose worst case for `worst` (input, output) tokens is over the cost `ceiling` (they stay, skipped, with the
    reason); the first left is the one chosen, the rest are its fallbacks in order."""
    screened = [_screen_one(c, blocking, needed_tokens, ceiling, worst) for c in plan.candidates]
    ranked: list[Candidate] = []
    chosen = False
    for c in screened:
        if c.verdict != "skipped":
            c, chosen = _ranked(c, first=not chosen), True
        ranked.append(c)
    if ceiling is plan.max_cost and all(a is b for a, b in zip(ranked, plan.candidates, strict=True)):
        return plan  # nothing skipped or moved (a frozen plan: no copy needed)
    return dataclasses.replace(plan, candidates=tuple(ranked), max_cost=ceiling)


def _screen_one(c: Candidate, blocking: Blocking, needed_tokens: int, ceiling: Ceiling | None,
                worst: tuple[int, int]) -> Candidate:
    if c.verdict == "skipped":
        return c
    blocked = blocking(c.model)
    window = c.model.context_window
    if blocked is not None:
        reason, cooling = blocked
        return Candidate(c.model, "skipped", reason, cooling)
    if window is not None and needed_tokens > window:
        return Candidate(c.model, "skipped", f"context too small: needs about {needed_tokens} tokens, has {window}")
    cost = c.model.worst_case(*worst) if ceiling is not None else None
    if ceiling is not None and cost is not None and cost > ceiling.amount:
        return Candidate(c.model, "skipped", f"worst case {fmt_money(cost)} is over the cost ceiling of "
                                             f"{fmt_money(ceiling.amount)} ({ceiling.source})", worst=cost)
    return c


def _ranked(c: Candidate, first: bool) -> Candidate:
    """A runnable candidate's verdict by its place: the first is chosen, every other one a fallback."""
    if first and c.verdict == "fallback":
        return dataclasses.replace(c, verdict="chosen", reason=f"first candidate left ({c.reason})")
    if not first and c.verdict == "chosen":
        return dataclasses.replace(c, verdict="fallback")
    return c


def _alias_fallbacks(policy: PolicySettings, model: Model) -> list[str]:
    for alias in model.aliases:
        if alias in policy.fallbacks:
            return policy.fallbacks[alias]
    return []


def _first_choice(catalog: Catalog, policy: PolicySettings, policy_name: str, allow: tuple[str, ...] | None,
                  requested: str | None, effort: str | None, session: Session | None
                  ) -> tuple[Model, str, list[Model]]:
    """The first candidate, why, and the rest of its effort tier (tried next, in order)."""
    if requested:
        model = catalog.resolve(requested)
        if model is None:
            raise ApiError(codes.MODEL_NOT_FOUND, f"No model or alias named {requested!r}; GET /v1/models lists them.",
                           param="model")
        if not Catalog.allowed(model, allow, requested):
            raise ApiError(codes.MODEL_NOT_ALLOWED, f"This key may not use the model {requested!r}.", param="model")
        how = f"an alias of {model.id}" if requested != model.id else "a model id"
        return model, f"The request named {requested!r} ({how}), so {model.id} was chosen.", []
    tier = policy.effort.get(effort or "")
    if tier is not None:
        models = [m for n in tier.root if (m := catalog.resolve(n)) and Catalog.allowed(m, allow)]
        if models:
            model = _weighted(models, policy, session)
            return model, (f"No model was named; effort {effort!r} picked the {effort!r} tier of policy "
                           f"{policy_name!r}, which chose {model.id}."), [m for m in models if m is not model]
    if policy.default_model:
        model = catalog.resolve(policy.default_model)
        if model is not None and Catalog.allowed(model, allow):
            return model, f"No model was named, so policy {policy_name!r} chose its default model {model.id}.", []
    for model in catalog.models:
        if Catalog.allowed(model, allow):
            why = (f"No model was named and policy {policy_name!r} had no usable default, so the first model "
                   f"this key may use, {model.id}, was chosen.")
            return model, why, []
    raise ApiError(codes.MODEL_NOT_ALLOWED, "This key may use no model in the catalog.", param="model")


def _weighted(models: list[Model], policy: PolicySettings, session: Session | None) -> Model:
    weights = policy.weights
    if not any(m.id in weights for m in models):
        return models[0]
    w = [float(weights[m.id].root) if m.id in weights else 0.0 for m in models]
    if sum(w) <= 0:
        return models[0]
    return models[affinity.rank(session, [m.id for m in models], w)[0]]
