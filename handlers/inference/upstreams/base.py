"""What every upstream kind implements: canonical Request in, canonical Result or Events out."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol

from generated.config import PoolSettings, TimeoutSettings, UpstreamSettings
from handlers.inference.canonical import Event, Request, Result
from handlers.inference.formats.base import Traits
from handlers.inference.formats.embeddings import Embed, Vectors
from handlers.inference.known import DataProvider

PLAIN = Traits()  # a model the catalog says nothing special of

# busy: every connection of the upstream's pool stayed in use for pool.wait_seconds (the gateway's own load);
# quota: the deployment is at its rpm or tpm quota (metering/quotas.py), so it was not called
FailureKind = Literal["timeout", "connect", "busy", "status", "protocol", "quota"]


_UPSTREAM = UpstreamSettings.model_fields  # the configuration's defaults, never typed again here
_TIMEOUTS, _POOL = TimeoutSettings(), PoolSettings()


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect: float = float(_TIMEOUTS.connect)
    read: float = float(_TIMEOUTS.read)
    total: float = float(_TIMEOUTS.total)

    @classmethod
    def of(cls, settings: TimeoutSettings) -> Timeouts:
        return cls(connect=float(settings.connect), read=float(settings.read), total=float(settings.total))


@dataclass(frozen=True, slots=True)
class Sizes:
    """The most an upstream may send: a whole answer (a JSON body, or every byte of a stream), and one stream event."""

    answer: int = _UPSTREAM["max_answer_bytes"].default
    event: int = _UPSTREAM["max_event_bytes"].default

    @classmethod
    def of(cls, settings: UpstreamSettings) -> Sizes:
        return cls(answer=settings.max_answer_bytes, event=settings.max_event_bytes)


@dataclass(frozen=True, slots=True)
class Pool:
    """How many calls one upstream may have open at once in this process (each holds a connection for its whole
    life, a stream until it ends), and how long a call beyond them waits for one to end before it fails as busy."""

    max_connections: int = _POOL.max_connections
    wait_seconds: float = float(_POOL.wait_seconds)

    @classmethod
    def of(cls, settings: PoolSettings) -> Pool:
        return cls(max_connections=settings.max_connections, wait_seconds=float(settings.wait_seconds))


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
        """Transient: the same call may succeed later (timeouts, refused connections, a full pool, 429 and 5xx)."""
        if self.kind in ("timeout", "connect", "busy"):
            return True
        return self.kind == "status" and self.status is not None and (self.status == 429 or self.status >= 500)

    @property
    def falls_back(self) -> bool:
        """Worth the request's next candidate: anything but the caller's fault. A broken credential (401/403) or an
        answer that cannot be read belongs to this one upstream; another may answer."""
        return not self.caller_fault

    @property
    def breaker(self) -> Literal["upstream", "deployment"] | None:
        """Whose circuit breaker this failure counts toward (handlers/inference/cooldown.py). The whole upstream's
        when it cannot be reached (a refused connection, DNS, TLS) or refuses the gateway's key (401): then every
        model on it fails alike. The deployment's (this model on this upstream) for its other transient failures,
        and for a 403, which providers answer for one model a key may not use as much as for a bad key. None for a
        full pool (the gateway's own load), an answer that cannot be read and the caller's own fault: no caller may
        cool anything down for everyone by sending a bad request."""
        if self.kind == "connect" or self.status == 401:
            return "upstream"
        if self.status == 403 or (self.retryable and self.kind != "busy"):
            return "deployment"
        return None

    @property
    def trips_cooldown(self) -> bool:
        """Counts toward a circuit breaker (see `breaker`)."""
        return self.breaker is not None

    @property
    def wait(self) -> float | None:
        """The wait the upstream named for a rate limit or an overload (429, 529, or a 5xx with Retry-After): the
        deployment is skipped for exactly that long, at once, rather than counted toward its breaker."""
        if self.kind != "status" or self.retry_after is None or not self.retryable:
            return None
        return self.retry_after


class Upstream(abc.ABC):
    """One configured upstream. Created once at startup (from_settings); `aclose` at shutdown.

    A kind declares its facts on its class: its name in the configuration's `kind` enum, the name OpenTelemetry's
    GenAI conventions give its provider (gen_ai.system), whether it answers POST /v1/embeddings, and whose models
    the known-model data should look its models' names up among (None: never looked up). The registry
    (upstreams/registry.py) builds each configured upstream by its kind."""

    kind: ClassVar[str]
    system: ClassVar[str]
    embeds: ClassVar[bool] = False
    data_provider: ClassVar[DataProvider | None] = None

    def __init__(self, name: str) -> None:
        self.name = name

    @classmethod
    def data_for(cls, model: str) -> DataProvider | None:
        """Whose models the known-model data should look `model` (the upstream's own name) up among: the kind's
        data_provider, unless it serves several providers' models (vertex)."""
        return cls.data_provider

    @classmethod
    def data_providers(cls) -> tuple[DataProvider, ...]:
        """Every provider data_for may name."""
        return (cls.data_provider,) if cls.data_provider is not None else ()

    @classmethod
    @abc.abstractmethod
    def from_settings(cls, name: str, settings: UpstreamSettings) -> Upstream:
        """The upstream an entry of the configuration's `upstreams` describes."""

    @abc.abstractmethod
    async def complete(self, request: Request, model: str, traits: Traits = PLAIN) -> Result:
        """Send `request` to `model` (the upstream's own model name) and return the whole answer."""

    @abc.abstractmethod
    def stream(self, request: Request, model: str, traits: Traits = PLAIN) -> AsyncIterator[Event]:
        """Stream the answer as canonical events.

        Raises UpstreamError before the first event when the upstream refuses (so the caller can fall back),
        or while iterating when it fails mid-stream. Closing the iterator cancels the upstream request.
        """

    def omitted_tools(self, request: Request, model: str) -> list[str]:
        """The hosted tools of `request` this upstream has no equivalent of, left out of what it sends `model` (by
        type)."""
        return []

    def left_out(self, request: Request, model: str, traits: Traits = PLAIN) -> list[str]:
        """What of `request` this upstream's `model` (with `traits`) is not sent, in words for the decision
        record."""
        return []

    async def aclose(self) -> None:
        """Release connections."""


class Embedder(Protocol):
    """An upstream that answers OpenAI embeddings requests (OpenAIUpstream)."""

    name: str
    kind: str

    async def embed(self, request: Embed, model: str) -> Vectors:
        """Embed `request`'s inputs with `model` (the upstream's own model name); failures are UpstreamError."""
