"""Routing: the key's policy, the requested model or alias, and the request's effort -> ordered candidates.

Every request that reaches routing gets a Decision; its record is what GET /v1/route/explain reads back.
"""

from __future__ import annotations

import math
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from generated.config import PolicySettings
from handlers.administration.auth import Principal
from handlers.errors import ApiError
from handlers.inference.canonical import Request, Usage
from handlers.inference.catalog import Catalog, Model

EFFORT_TIERS = ("minimal", "low", "medium", "high")
_EFFORT_WORDS = {"none": "minimal", "minimal": "minimal", "low": "low", "medium": "medium", "high": "high", "max": "high",
                 "xhigh": "high"}


@dataclass(slots=True)
class Candidate:
    model: Model
    verdict: str  # chosen | fallback | skipped
    reason: str


@dataclass(slots=True)
class Decision:
    id: str
    principal: Principal
    format: str
    requested: str | None
    effort: str | None
    policy: str
    stream: bool
    why: str  # how the first candidate was picked, in words
    candidates: list[Candidate] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    answered: Model | None = None
    usage: Usage | None = None
    usage_estimated: bool = False
    cost: str | None = None
    outcome: str = "pending"
    refusal: ApiError | None = None  # routing itself refused: an unknown model, or one the key may not use
    created: datetime = field(default_factory=lambda: datetime.now(UTC))
    started: float = field(default_factory=time.perf_counter)

    def runnable(self) -> list[Candidate]:
        return [c for c in self.candidates if c.verdict != "skipped"]

    def attempt(self, cand: Candidate, started: float, status: int | None, error: str | None) -> None:
        self.attempts.append({"model": cand.model.id, "upstream": cand.model.upstream, "status": status, "error": error,
                              "latency_ms": round((time.perf_counter() - started) * 1000, 3)})

    def explanation(self) -> str:
        if self.refusal is not None:
            return f"Routing refused the request: {self.why}"
        parts = [self.why]
        first = self.candidates[0] if self.candidates else None
        if first is not None and first.verdict == "skipped":
            parts.append(f"It was skipped ({first.reason}).")
        failed = [a["model"] for a in self.attempts if a["error"] is not None]
        if self.answered is None:
            parts.append(f"No candidate answered (outcome: {self.outcome}).")
        elif first is not None and self.answered.id != first.model.id:
            before = f"{', '.join(failed)} failed before answering, so " if failed else ""
            parts.append(f"{before}the fallback {self.answered.id} answered.")
        return " ".join(parts)

    def record(self) -> dict[str, Any]:
        u = self.usage
        return {
            "id": self.id, "object": "route.decision", "created_at": self.created.isoformat(),
            "key_id": self.principal.key.id, "workspace_id": self.principal.workspace_id, "format": self.format,
            "requested_model": self.requested, "effort": self.effort, "policy": self.policy, "stream": self.stream,
            "candidates": [{"model": c.model.id, "upstream": c.model.upstream, "verdict": c.verdict, "reason": c.reason}
                           for c in self.candidates],
            "attempts": self.attempts, "model": self.answered.id if self.answered else None,
            "usage": None if u is None else {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                                             "cached_input_tokens": u.cached_input_tokens},
            "usage_estimated": self.usage_estimated, "cost": self.cost, "outcome": self.outcome,
            "explanation": self.explanation(),
        }


def new_decision_id() -> str:
    return secrets.token_hex(16)  # 128 random bits: unguessable


def normalise_effort(req: Request, policy: PolicySettings) -> str | None:
    if req.effort:
        return _EFFORT_WORDS.get(req.effort.lower(), req.effort.lower())
    if req.thinking_budget is not None:
        low = policy.thinking_budget.low if policy.thinking_budget else 2048
        medium = policy.thinking_budget.medium if policy.thinking_budget else 8192
        if req.thinking_budget <= (low or 2048):
            return "low"
        return "medium" if req.thinking_budget <= (medium or 8192) else "high"
    return None


def decide(catalog: Catalog, policies: dict[str, PolicySettings], default_policy: str, principal: Principal,
           req: Request) -> Decision:
    key = principal.key
    policy_name = key.policy if key.policy in policies else default_policy
    policy = policies[policy_name]
    effort = normalise_effort(req, policy)
    d = Decision(new_decision_id(), principal, req.format, req.model, effort, policy_name, req.stream, why="")
    try:
        first, d.why, rest = _first_choice(catalog, policy, policy_name, key.models, req.model, effort)
    except ApiError as err:
        d.why, d.refusal = err.message, err
        return d
    named = (policy.fallbacks or {}).get(first.id) or _alias_fallbacks(policy, first)
    chain: list[tuple[Model, str]] = []
    for m, why in [*((m, f"next in the {effort!r} tier of policy {policy_name!r}") for m in rest),
                   *((catalog.resolve(n), f"fallback for {first.id} in policy {policy_name!r}") for n in named)]:
        if m is not None and m.id != first.id and all(m is not seen for seen, _ in chain):
            chain.append((m, why))
    d.candidates.append(Candidate(first, "chosen", "first choice"))
    for m, why in chain:
        if Catalog.allowed(m, key.models):
            d.candidates.append(Candidate(m, "fallback", why))
        else:
            d.candidates.append(Candidate(m, "skipped", "not allowed for this key"))
    return d


def screen(d: Decision, cooldown_left: Callable[[str], float], needed_tokens: int) -> None:
    """Skip candidates whose upstream is cooling down or whose context window is too small; the first left is
    the one chosen, the rest are its fallbacks in order."""
    for c in d.candidates:
        if c.verdict == "skipped":
            continue
        left = cooldown_left(c.model.upstream)
        window = c.model.context_window
        if left > 0:
            c.verdict, c.reason = "skipped", f"upstream {c.model.upstream} is in cooldown for {math.ceil(left)} s more"
        elif window is not None and needed_tokens > window:
            c.verdict, c.reason = "skipped", f"context too small: needs about {needed_tokens} tokens, has {window}"
    runnable = d.runnable()
    for i, c in enumerate(runnable):
        if i == 0 and c.verdict == "fallback":
            c.verdict, c.reason = "chosen", f"first candidate left ({c.reason})"
        elif i > 0 and c.verdict == "chosen":
            c.verdict = "fallback"


def _alias_fallbacks(policy: PolicySettings, model: Model) -> list[str]:
    for alias in model.aliases:
        if alias in (policy.fallbacks or {}):
            return (policy.fallbacks or {})[alias]
    return []


def _first_choice(catalog: Catalog, policy: PolicySettings, policy_name: str, allow: tuple[str, ...] | None,
                  requested: str | None, effort: str | None) -> tuple[Model, str, list[Model]]:
    """The first candidate, why, and the rest of its effort tier (tried next, in order)."""
    if requested:
        model = catalog.resolve(requested)
        if model is None:
            raise ApiError(404, "model_not_found", f"No model or alias named {requested!r}; GET /v1/models lists them.",
                           param="model")
        if not Catalog.allowed(model, allow, requested):
            raise ApiError(403, "model_not_allowed", f"This key may not use the model {requested!r}.", param="model")
        how = f"an alias of {model.id}" if requested != model.id else "a model id"
        return model, f"The request named {requested!r} ({how}), so {model.id} was chosen.", []
    tier = (policy.effort or {}).get(effort or "")
    if tier is not None:
        models = [m for n in tier.root if (m := catalog.resolve(n)) and Catalog.allowed(m, allow)]
        if models:
            model = _weighted(models, policy)
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
    raise ApiError(403, "model_not_allowed", "This key may use no model in the catalog.", param="model")


def _weighted(models: list[Model], policy: PolicySettings) -> Model:
    weights = policy.weights or {}
    if not any(m.id in weights for m in models):
        return models[0]
    w = [float(weights[m.id].root) if m.id in weights else 0.0 for m in models]
    if sum(w) <= 0:
        return models[0]
    return random.choices(models, weights=w, k=1)[0]
