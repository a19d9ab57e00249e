"""What a wire format is: one module that speaks it in both directions.

As the caller's format it parses the request body into the canonical Request and renders the canonical answer (whole
or streamed) back. As an upstream's format it renders the canonical Request into that upstream's body and reads the
upstream's answer and stream events back into canonical. An upstream kind is then a transport plus one format.

Each format module (chat, messages, responses) satisfies these Protocols with module-level names, so the relay and
the upstreams hold a format as a typed value rather than as an untyped module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from handlers.errors import ApiError
from handlers.inference.canonical import Answer, Event, Request, Result


class StreamRenderer(Protocol):
    """Renders canonical events as the caller's server-sent events: start, each event, then finish or error."""

    def start(self) -> bytes: ...

    def event(self, ev: Event) -> bytes: ...

    def finish(self) -> bytes: ...

    def error(self, err: ApiError) -> bytes: ...


class StreamRendererFactory(Protocol):
    def __call__(self, answer: Answer, request: Request) -> StreamRenderer: ...


class CallerFormat(Protocol):
    """A format as callers speak it."""

    def parse(self, body: Any) -> Request: ...

    def render(self, result: Result, answer: Answer, request: Request) -> dict[str, Any]: ...

    @property
    def StreamRenderer(self) -> StreamRendererFactory: ...


@dataclass(frozen=True, slots=True)
class UpstreamOptions:
    """What an upstream's configuration changes in the body rendered for it."""

    default_max_tokens: int = 4096  # for formats where max_tokens is required (Messages)
    passthrough: bool = False  # a same-format caller's fields that no format defines still reach this upstream


@dataclass(frozen=True, slots=True)
class Traits:
    """What the catalog says of the model a body is rendered for."""

    reasoning: bool = False  # takes an effort (reasoning_effort, thinking, reasoning.effort); max_completion_tokens
    thinking_budgets: tuple[int, int, int] = (2048, 8192, 24576)  # Anthropic budget_tokens for low, medium, high


class UpstreamReader(Protocol):
    """Reads one upstream stream's server-sent events into canonical events; `done` once the stream's end came."""

    done: bool

    def read(self, event: str, data: str) -> list[Event]: ...


class UpstreamReaderFactory(Protocol):
    def __call__(self) -> UpstreamReader: ...


class UpstreamFormat(Protocol):
    """A format as an upstream speaks it."""

    STREAM_FIELDS: dict[str, Any]  # added to the body of a streamed request
    STREAM_END: str  # what ends a stream, for the message when a stream is cut before it

    def upstream_body(self, request: Request, model: str, options: UpstreamOptions, traits: Traits) -> dict[str, Any]:
        ...

    def upstream_result(self, payload: dict[str, Any]) -> Result: ...

    @property
    def UpstreamReader(self) -> UpstreamReaderFactory: ...


class UpstreamFault(Exception):
    """An upstream's answer or stream event that is an error object (`payload`) or that cannot be read (`what`)."""

    def __init__(self, *, payload: dict[str, Any] | None = None, what: str | None = None) -> None:
        super().__init__(what or "error payload")
        self.payload = payload
        self.what = what
