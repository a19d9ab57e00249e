"""What this process knows of each deployment beyond its health: its calls in flight, a moving average of its time
to the first byte, and which deployment each recent conversation went to (session affinity). Balancing
(balance.py) orders a model's deployments by these; GET /v1/route/deployments shows them. Nothing here is shared
between processes (config `balancing`)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from generated.config import BalancingSettings


@dataclass(slots=True)
class Latency:
    ewma: float  # seconds
    at: float  # when last measured, on the clock


class Deployments:
    def __init__(self, settings: BalancingSettings | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.tune(settings or BalancingSettings())
        self._clock = clock
        self._flying: dict[str, int] = {}
        self._latency: dict[str, Latency] = {}
        self._sessions: OrderedDict[tuple[bytes, str], tuple[str, float]] = OrderedDict()

    def tune(self, s: BalancingSettings) -> None:
        """New settings (at start, and at a reload: what was measured and remembered stays)."""
        self._alpha = float(s.latency_smoothing)
        self._expiry = float(s.latency_expiry_seconds)
        self._affinity_seconds = float(s.affinity_seconds)
        self._affinity_size = s.affinity_sessions

    def started(self, deployment: str) -> None:
        self._flying[deployment] = self._flying.get(deployment, 0) + 1

    def ended(self, deployment: str) -> None:
        left = self._flying.get(deployment, 0) - 1
        if left > 0:
            self._flying[deployment] = left
        else:
            self._flying.pop(deployment, None)

    def in_flight(self, deployment: str) -> int:
        """Calls to `deployment` from this process not yet over (a stream until it ends)."""
        return self._flying.get(deployment, 0)

    def measured(self, deployment: str, seconds: float) -> None:
        """A time to the first byte (of a stream's first event, or of a whole answer) into the moving average."""
        now, old = self._clock(), self._latency.get(deployment)
        ewma = seconds if old is None or now - old.at > self._expiry else old.ewma + self._alpha * (seconds - old.ewma)
        self._latency[deployment] = Latency(ewma, now)

    def latency(self, deployment: str, fresh: bool = True) -> float | None:
        """The moving average in seconds; None when never measured (or, `fresh`, not within the expiry)."""
        known = self._latency.get(deployment)
        if known is None or (fresh and self._clock() - known.at > self._expiry):
            return None
        return known.ewma

    def remember(self, session: bytes, model: str, deployment: str) -> None:
        """The conversation `session` of catalog model `model` was answered by `deployment`."""
        key = (session, model)
        self._sessions[key] = (deployment, self._clock())
        self._sessions.move_to_end(key)
        while len(self._sessions) > self._affinity_size:
            self._sessions.popitem(last=False)

    def recall(self, session: bytes, model: str) -> str | None:
        """The deployment the conversation's last request to `model` went to, while remembered."""
        found = self._sessions.get((session, model))
        if found is None:
            return None
        deployment, at = found
        if self._clock() - at > self._affinity_seconds:
            del self._sessions[(session, model)]
            return None
        return deployment
