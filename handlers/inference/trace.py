"""What happened to a routed request: its upstream attempts, the model that answered, the outcome and the charge.

The relay fills a Trace as the request goes; with the request's Plan it renders the decision record and the metrics.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from handlers.inference.canonical import Usage
from handlers.inference.catalog import Model
from handlers.inference.upstreams.base import FailureKind


@dataclass(frozen=True, slots=True)
class Attempt:
    model: str  # model id
    upstream: str
    deployment: str
    status: int | None  # the upstream's HTTP status, when it answered
    failure: FailureKind | None  # None when the attempt succeeded
    message: str | None
    latency_ms: float
    retry: int = 0  # which pass over the candidates: 0 the first, n the n-th retry

    @property
    def error(self) -> str | None:
        """The failure in words, as the decision record shows it."""
        return None if self.failure is None else f"{self.failure}: {self.message}"


@dataclass(slots=True)
class Trace:
    attempts: list[Attempt] = field(default_factory=list)
    answered: Model | None = None
    outcome: str = "pending"
    usage: Usage | None = None
    usage_estimated: bool = False
    cost: str | None = None
    omitted_tools: list[str] = field(default_factory=list)  # hosted tools the answering upstream was not offered
    # What the upstream was not sent, and what its answer had that the caller's format has no place for, in words
    left_out: list[str] = field(default_factory=list)
    paid_by: object | None = None  # the lease its cost was settled into: the record is written with that charge
    started: float = field(default_factory=time.perf_counter)

    def attempted(self, model: Model, started: float, status: int | None, failure: FailureKind | None = None,
                  message: str | None = None, retry: int = 0) -> None:
        """One upstream attempt, begun at `started` (time.perf_counter), ended now."""
        latency = round((time.perf_counter() - started) * 1000, 3)
        self.attempts.append(Attempt(model.id, model.upstream, model.deployment, status, failure, message, latency,
                                     retry))

    def upstream_ms(self) -> float:
        return round(sum(a.latency_ms for a in self.attempts), 3)
