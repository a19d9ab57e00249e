"""The client span of each upstream call, with OpenTelemetry's GenAI attributes, and the traceparent it sends.

Loaded with handlers/observability/tracing.py, only when tracing is on. Lifecycle.attempt wraps each candidate's call
in UpstreamSpans.traced: a span starts before the call, as a child of the request's server span; while the call
sends its request, the `traceparent` naming that span waits in a context variable for the upstream client's request
hook (`propagate`, added by Tracing.instrument). A whole answer ends its span when it arrives; a stream's span ends
with the stream (its end, its failure, or its closing when the caller leaves). A failed attempt's span has status
ERROR and `error.type`: the upstream's HTTP status, or how it failed (timeout, connect, busy, protocol).

Attributes: gen_ai.operation.name, gen_ai.system and gen_ai.provider.name (the same value: the first is the name
semantic conventions before 1.37 used), gen_ai.request.model (the upstream's own model name), gen_ai.response.model
(when the upstream says it), gen_ai.usage.* and gen_ai.response.finish_reasons; specway.decision_id, specway.model
(the catalog's id), specway.upstream and specway.upstream.kind. Never a prompt, an answer, a header or a key.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar, cast

import httpx
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from handlers.inference.canonical import Event, Finish, Result, Usage, UsageReport
from handlers.inference.catalog import Model
from handlers.inference.formats.embeddings import Vectors
from handlers.inference.routing import Plan
from handlers.inference.upstreams.base import Upstream, UpstreamError

T = TypeVar("T")
Call = Callable[[Upstream, Model], Awaitable[T]]

# What an upstream call is, by the route of the request it serves (semantic conventions' names where they have one).
OPERATIONS = {"/v1/chat/completions": "chat", "/v1/messages": "chat", "/v1/responses": "chat",
              "/v1/embeddings": "embeddings", "/v1/messages/count_tokens": "count_tokens"}

# The request being served: its server span (as a context) and its route.
_request: contextvars.ContextVar[tuple[Context, str | None] | None] = contextvars.ContextVar(
    "specway_trace_request", default=None)
# The headers (traceparent, tracestate) of the upstream call being made.
_outgoing: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("specway_trace_outgoing",
                                                                                   default=None)


def begin_request(context: Context, route: str | None) -> contextvars.Token[tuple[Context, str | None] | None]:
    return _request.set((context, route))


def end_request(token: contextvars.Token[tuple[Context, str | None] | None]) -> None:
    _request.reset(token)


async def propagate(request: httpx.Request) -> None:
    """An upstream client's request hook: the traceparent of the client span this request belongs to."""
    carrier = _outgoing.get()
    if carrier:
        request.headers.update(carrier)


class UpstreamSpans:
    def __init__(self, tracer: trace.Tracer, propagator: TraceContextTextMapPropagator) -> None:
        self.tracer = tracer
        self.propagator = propagator

    def traced(self, call: Call[T], plan: Plan) -> Call[T]:
        """`call`, each time inside a client span of its own."""

        async def one(upstream: Upstream, model: Model) -> T:
            span = self._start(upstream, model, plan)
            carrier: dict[str, str] = {}
            self.propagator.inject(carrier, context=trace.set_span_in_context(span))
            token = _outgoing.set(carrier)
            try:
                answer = await call(upstream, model)
            except BaseException as exc:
                _failed(span, exc)
                span.end()
                raise
            finally:
                _outgoing.reset(token)
            return _answered(span, answer)

        return one

    def _start(self, upstream: Upstream, model: Model, plan: Plan) -> trace.Span:
        request = _request.get()
        parent, route = request if request is not None else (None, None)
        operation = OPERATIONS.get(route or "") or ("embeddings" if plan.format == "embeddings" else "chat")
        system = upstream.system
        attributes = {"gen_ai.operation.name": operation, "gen_ai.system": system, "gen_ai.provider.name": system,
                      "gen_ai.request.model": model.name, "specway.model": model.id, "specway.upstream": upstream.name,
                      "specway.upstream.kind": upstream.kind, "specway.decision_id": plan.id}
        return self.tracer.start_span(f"{operation} {model.name}", context=parent, kind=SpanKind.CLIENT,
                                      attributes=attributes)


def _answered(span: trace.Span, answer: T) -> T:
    """End the span of a whole answer with what it says; a stream's span goes on with the stream."""
    if isinstance(answer, Result):
        if answer.upstream_model:
            span.set_attribute("gen_ai.response.model", answer.upstream_model)
        span.set_attribute("gen_ai.response.finish_reasons", [answer.finish_reason])
        _usage(span, answer.usage)
    elif isinstance(answer, Vectors):
        _usage(span, answer.usage)
    elif isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], AsyncIterator):
        first, events = answer  # relay's (first event, the rest): the span lasts until the rest is done
        stream = SpannedStream(events, span)
        if first is not None:
            stream.observe(first)
        return cast(T, (first, stream))
    span.end()
    return answer


def _usage(span: trace.Span, usage: Usage | None) -> None:
    if usage is None:
        return
    for attribute, value in (("gen_ai.usage.input_tokens", usage.input_tokens),
                             ("gen_ai.usage.output_tokens", usage.output_tokens),
                             ("gen_ai.usage.cache_read.input_tokens", usage.cached_input_tokens),
                             ("gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens)):
        if value is not None:
            span.set_attribute(attribute, value)


def _failed(span: trace.Span, exc: BaseException) -> None:
    """An upstream failure is the span's error; a caller who left (cancellation) is not the upstream's."""
    if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
        span.set_attribute("specway.cancelled", True)
        return
    if isinstance(exc, UpstreamError):
        if exc.status is not None:
            span.set_attribute("http.response.status_code", exc.status)
        error_type = str(exc.status) if exc.kind == "status" and exc.status is not None else exc.kind
        description: str | None = exc.message  # safe to show a caller: never our credentials
    else:
        error_type, description = type(exc).__qualname__, None
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, description))


class SpannedStream:
    """A stream's events, passed through; its span ends when the stream does (or is closed, started or not)."""

    def __init__(self, events: AsyncIterator[Event], span: trace.Span) -> None:
        self._events = events
        self._span = span
        self._ended = False

    def __aiter__(self) -> SpannedStream:
        return self

    async def __anext__(self) -> Event:
        try:
            event = await anext(self._events)
        except StopAsyncIteration:
            self._end()
            raise
        except BaseException as exc:
            _failed(self._span, exc)
            self._end()
            raise
        self.observe(event)
        return event

    def observe(self, event: Event) -> None:
        if isinstance(event, UsageReport):
            _usage(self._span, event.usage)
        elif isinstance(event, Finish):
            self._span.set_attribute("gen_ai.response.finish_reasons", [event.reason])

    async def aclose(self) -> None:
        """Close the upstream's stream (its connection goes back), then end the span: a stream closed before its
        end was left by its caller."""
        try:
            aclose: Any = getattr(self._events, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            if not self._ended:
                self._span.set_attribute("specway.cancelled", True)
            self._end()

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self._span.end()
