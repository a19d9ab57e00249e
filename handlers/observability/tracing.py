"""OpenTelemetry traces (the `telemetry` config section): one server span per request, exported over OTLP/HTTP.

Imported only when `telemetry.otlp_endpoint` is set (handlers/edge/app.py, handlers/gateway.py): with tracing off,
nothing of OpenTelemetry is loaded and a request pays for none of it. The client spans of upstream calls are
handlers/observability/upstream_spans.py.

A caller's W3C `traceparent` (and `tracestate`) is continued: the server span is its child, and a caller's sampled
flag decides for its request. Spans leave in batches from the SDK's background thread, never on a request's path; a
collector that is away costs dropped spans, never a slower answer. What a span carries: the method, route, path and
status, the request id and the decision id, the model that answered, the User-Agent; never another header, a key, a
query string, a prompt or an answer. A collector that stops answering is logged once, and once when it is back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from generated.config import TelemetrySettings
from handlers.config import ConfigError

try:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    from opentelemetry.util.re import parse_env_headers
except ImportError as exc:  # the otel extra is not installed
    raise ConfigError("telemetry.otlp_endpoint is set, but OpenTelemetry is not installed: install the otel extra "
                      f"(pip install 'specway[otel]'); missing: {exc.name}") from None

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from handlers.observability import upstream_spans

if TYPE_CHECKING:
    from handlers.inference.upstreams.base import Upstream

__all__ = ["Tracing"]

log = logging.getLogger("specway.tracing")

_QUEUE = 2048  # spans waiting per process; past that new ones are dropped
_BATCH = 512
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})
_PROPAGATED = (b"traceparent", b"tracestate")
# Response headers the server span reads its attributes from: what the handlers learned, set where they set it.
_FROM_RESPONSE = {b"x-request-id": "specway.request_id", b"x-specway-decision-id": "specway.decision_id",
                  b"x-specway-model": "specway.model"}
_AGENT_CHARS = 256


class Tracing:
    """One process's tracer: the SDK's provider with a batching OTLP/HTTP exporter. Made in Gateway.start (in each
    worker, after the fork: the exporter's thread must belong to the process that uses it); shut down, with a last
    flush, in Gateway.stop."""

    def __init__(self, settings: TelemetrySettings) -> None:
        self.settings = settings
        resource = Resource.create({**settings.resource_attributes, "service.name": settings.service_name,
                                    "service.version": _version(), "service.instance.id": uuid.uuid4().hex})
        self.provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)),
                                       resource=resource, shutdown_on_exit=False)
        url = traces_url(settings.otlp_endpoint or "")
        self.exporter = OutageLogged(OTLPSpanExporter(endpoint=url, headers=collector_headers(settings),
                                                      timeout=settings.timeout_seconds), url)
        self.provider.add_span_processor(BatchSpanProcessor(
            self.exporter, max_queue_size=_QUEUE, max_export_batch_size=_BATCH,
            schedule_delay_millis=settings.export_interval_seconds * 1000,
            export_timeout_millis=settings.timeout_seconds * 1000))
        self.tracer = self.provider.get_tracer("specway", _version())
        self.propagator = TraceContextTextMapPropagator()
        self.upstreams = upstream_spans.UpstreamSpans(self.tracer, self.propagator)

    def instrument(self, upstreams: Iterable[Upstream]) -> None:
        """Every HTTP upstream's requests carry the traceparent of the client span they belong to."""
        for upstream in upstreams:
            on_request = getattr(upstream, "on_request", None)
            if on_request is not None:
                on_request(upstream_spans.propagate)

    async def serve(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send, route: str | None) -> None:
        """Run one HTTP request (of `route`, the spec's path template; None when none matched) inside its server
        span. The span ends when the app returns: after a stream's last byte, or once its caller has gone."""
        parent = self.propagator.extract(_trace_headers(scope))
        span = self.tracer.start_span(_span_name(scope["method"], route), context=parent, kind=SpanKind.SERVER,
                                      attributes=_request_attributes(scope, route))
        token = upstream_spans.begin_request(trace.set_span_in_context(span, parent), route)
        answered: list[int] = []

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                answered.append(message["status"])
                if span.is_recording():
                    _answered(span, message)
            await send(message)

        try:
            await app(scope, receive, sending)
        except BaseException as exc:
            if not answered:
                span.set_attribute("error.type", type(exc).__qualname__)
                span.set_status(Status(StatusCode.ERROR))
            raise
        finally:
            upstream_spans.end_request(token)
            span.end()

    async def shutdown(self) -> None:
        """Send the spans still waiting, then stop the exporter's thread. Waited on for at most timeout_seconds, in
        a daemon thread that cannot hold the process up; with the collector failing, what waits is dropped."""
        worker = threading.Thread(target=self._shutdown, name="specway-tracing-shutdown", daemon=True)
        worker.start()
        await asyncio.to_thread(worker.join, self.settings.timeout_seconds)

    def _shutdown(self) -> None:
        if not self.exporter.failing:
            self.provider.force_flush()
        self.provider.shutdown()


class OutageLogged(SpanExporter):
    """The OTLP exporter, saying once that the collector stopped taking spans and once that it takes them again. (The
    exporter's own logger, which says it twice for every failed batch, is kept to its critical lines.)"""

    def __init__(self, exporter: SpanExporter, url: str) -> None:
        self.exporter = exporter
        self.url = url
        self.failing = False
        logging.getLogger(type(exporter).__module__).setLevel(logging.CRITICAL)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.exporter.export(spans)
        failed = result is not SpanExportResult.SUCCESS
        if failed and not self.failing:
            log.warning("the collector at %s does not take spans; they are dropped until it does", self.url)
        elif self.failing and not failed:
            log.warning("the collector at %s takes spans again", self.url)
        self.failing = failed
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


def traces_url(endpoint: str) -> str:
    """Where spans are POSTed: <endpoint>/v1/traces, unless the endpoint already names that path."""
    base = endpoint.rstrip("/")
    return base if base.endswith("/v1/traces") else f"{base}/v1/traces"


def collector_headers(settings: TelemetrySettings) -> dict[str, str]:
    """The collector's headers from the variable `headers_env` names (name=value pairs, comma separated). A named
    variable that is unset or empty stops the start, as for every *_env setting."""
    name = settings.headers_env
    if name is None:
        return {}
    value = os.environ.get(name, "").strip()
    if not value:
        raise ConfigError(f"telemetry.headers_env: the environment variable {name} is not set")
    headers = dict(parse_env_headers(value, liberal=True))
    if not headers:
        raise ConfigError(f"telemetry.headers_env: the environment variable {name} holds no name=value pair")
    return headers


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specway")
    except PackageNotFoundError:
        return "unknown"


def _trace_headers(scope: Scope) -> dict[str, str]:
    """The caller's traceparent and tracestate (the first of each), nothing else of its headers."""
    found: dict[str, str] = {}
    for name, value in scope["headers"]:
        if name in _PROPAGATED and name.decode() not in found:
            found[name.decode()] = value.decode("latin-1")
    return found


def _span_name(method: str, route: str | None) -> str:
    method = method if method in _METHODS else "HTTP"
    return f"{method} {route}" if route else method


def _request_attributes(scope: Scope, route: str | None) -> dict[str, Any]:
    method = scope["method"]
    attributes: dict[str, Any] = {
        "http.request.method": method if method in _METHODS else "_OTHER",
        "url.path": scope["path"],
        "url.scheme": scope.get("scheme", "http"),
        "network.protocol.version": scope.get("http_version", "1.1"),
    }
    if method not in _METHODS:
        attributes["http.request.method_original"] = method[:32]
    if route is not None:
        attributes["http.route"] = route
    for name, value in scope["headers"]:
        if name == b"user-agent":
            attributes["user_agent.original"] = value.decode("latin-1")[:_AGENT_CHARS]
            break
    return attributes


def _answered(span: trace.Span, message: Message) -> None:
    """The status and what the handlers said in headers of their own (request id, decision id, model)."""
    status = message["status"]
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_attribute("error.type", str(status))
        span.set_status(Status(StatusCode.ERROR))
    for name, value in message.get("headers", ()):
        attribute = _FROM_RESPONSE.get(name)
        if attribute is not None:
            span.set_attribute(attribute, value.decode("latin-1"))
