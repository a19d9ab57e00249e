"""Retries before the first byte reaches the caller: which failures another try can fix, and how long to wait first.

A request tries its candidates once each, falling back at once. When all have failed, those whose failure a retry
can fix are tried again after a jittered, doubling backoff (config `retries`): a refused connection, or a 429 or 5xx
whose upstream named a wait the gateway may wait out itself. A plain 5xx is the SDKs' to retry, a timeout may still
be running upstream; neither is retried here. No retry starts past the request's deadline.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from generated.config import RetrySettings
from handlers.inference.upstreams.base import UpstreamError


@dataclass(slots=True)
class Retries:
    settings: RetrySettings
    started: float  # the request's arrival, on time.perf_counter
    round: int = 0  # 0: the first pass over the candidates; n: the n-th retry

    def worth(self, err: UpstreamError) -> bool:
        """Whether a retry can fix `err`: a refused connection, or a named wait short enough to wait out here."""
        if err.kind == "connect":
            return True
        return err.wait is not None and err.wait <= float(self.settings.max_wait_seconds)

    def pause(self, waits: list[float]) -> float | None:
        """Before the next retry of candidates whose failures named `waits` (0: none): the seconds to wait, or None
        when no retry is left, none is worth it, or it would start past the deadline. Counts the retry."""
        s = self.settings
        if not waits or self.round >= s.max_retries:
            return None
        backoff = min(float(s.max_backoff_seconds), float(s.backoff_seconds) * 2**self.round)
        pause = max(backoff * random.uniform(0.5, 1.0), min(waits))
        if time.perf_counter() - self.started + pause > float(s.deadline_seconds):
            return None
        self.round += 1
        return pause
