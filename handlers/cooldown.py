"""The circuit breaker: an upstream that keeps failing is skipped for a while, then comes back by itself."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class Cooldowns:
    def __init__(self, failures: int = 3, window: float = 60.0, seconds: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.failures = failures
        self.window = window
        self.seconds = seconds
        self._clock = clock
        self._recent: dict[str, deque[float]] = {}
        self._until: dict[str, float] = {}

    def failed(self, upstream: str) -> bool:
        """Count a failure; True when it puts the upstream in cooldown."""
        if self.seconds <= 0:
            return False
        now = self._clock()
        recent = self._recent.setdefault(upstream, deque())
        recent.append(now)
        while recent and recent[0] < now - self.window:
            recent.popleft()
        if len(recent) >= self.failures:
            self._until[upstream] = now + self.seconds
            recent.clear()
            return True
        return False

    def succeeded(self, upstream: str) -> None:
        self._recent.pop(upstream, None)

    def remaining(self, upstream: str) -> float:
        """Seconds left in the upstream's cooldown; 0 when it may be tried."""
        until = self._until.get(upstream)
        if until is None:
            return 0.0
        left = until - self._clock()
        if left <= 0:
            del self._until[upstream]
            return 0.0
        return left
