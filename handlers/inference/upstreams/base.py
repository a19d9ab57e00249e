"""What every upstream kind implements: canonical Request in, canonical Result or Events out."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

from handlers.inference.canonical import Event, Request, Result
from handlers.inference.formats.base import Traits

PLAIN = Traits()  # a model the catalog says nothing special of

FailureKind = Literal["timeout", "connect", "status", "protocol"]


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect: float = 5.0
    read: float = 60.0
    total: float = 300.0


@dataclass(frozen=True, slots=True)
class Sizes:
    """The most an upstream may send: a whole answer (a JSON body, or every byte of a stream), and one stream event."""

    answer: int = 16 * 1024 * 1024
    event: int = 8 * 1024 * 1024


class UpstreamError(Exception):
    """An upstream failed. `kind` says how; `status` is the upstream's HTTP status when it answered.

    The message is safe to show a caller: it never carries our upstream credentials.
    """

    def __init__(self, kind: FailureKind, message: str, *, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.retry_after = retry_after

    @property
    def caller_fault(self) -> bool:
        """A 4xx (other than auth and rate limits) means the request itself was bad."""
        return self.kind == "status" and self.status is not None and 400 <= self.status < 500 and self.status not in (401, 403, 408, 429)

    @property
    def retryable(self) -> bool:
        """Worth trying the next candidate: timeouts, refused connections, 429 and 5xx."""
        if self.kind in ("timeout", "connect"):
            return True
        return self.kind == "status" and self.status is not None and (self.status == 429 or self.status >= 500)


class Upstream(abc.ABC):
    """One configured upstream. Created once at startup; `aclose` at shutdown."""

    kind: str

    def __init__(self, name: str) -> None:
        self.name = name

    @abc.abstractmethod
    async def complete(self, request: Request, model: str, traits: Traits = PLAIN) -> Result:
        """Send `request` to `model` (the upstream's own model name) and return the whole answer."""

    @abc.abstractmethod
    def stream(self, request: Request, model: str, traits: Traits = PLAIN) -> AsyncIterator[Event]:
        """Stream the answer as canonical events.

        Raises UpstreamError before the first event when the upstream refuses (so the caller can fall back),
        or while iterating when it fails mid-stream. Closing the iterator cancels the upstream request.
        """

    async def aclose(self) -> None:
        """Release connections."""
