"""Prometheus metrics. With several workers, `specway serve` sets PROMETHEUS_MULTIPROC_DIR before any worker
starts, and GET /metrics aggregates every worker's files (prometheus-client's multiprocess mode). With
`server.metrics_token_env` set, GET /metrics needs that bearer token."""

from __future__ import annotations

import hmac
import os
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import multiprocess as _multiprocess

from generated import errors as codes
from handlers.config import ConfigError
from handlers.errors import ApiError

if TYPE_CHECKING:
    from generated.config import Server
    from handlers.inference.routing import Plan
    from handlers.inference.trace import Trace

_FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_SLOW = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

REQUESTS = Counter("specway_requests", "HTTP requests answered, by spec route and status",
                   ["route", "method", "status"])
INFERENCE = Counter("specway_inference_requests", "Inference requests, by format, model and outcome",
                    ["format", "model", "outcome"])
OVERHEAD = Histogram("specway_gateway_overhead_seconds",
                     "Time a whole answer spent in the gateway itself (request time minus upstream time)",
                     ["format"], buckets=_FAST)
UPSTREAM = Histogram("specway_upstream_seconds", "Time of each upstream attempt", ["upstream", "model", "status"],
                     buckets=_SLOW)
FIRST_BYTE = Histogram("specway_stream_first_byte_seconds", "Time to the first byte of a stream", ["format", "model"],
                       buckets=_SLOW)
TOKENS = Counter("specway_tokens",
                 "Tokens, by model and kind (input: every prompt token, cache reads and writes included; output; "
                 "cached_input: read from a prompt cache; cache_write: written to one; reasoning_output: of the "
                 "output, the model's thinking)", ["model", "kind"])
COST = Counter("specway_cost", "Cost at the catalog's prices, by model", ["model"])
FALLBACKS = Counter("specway_fallbacks", "Requests answered by a fallback, by the upstream that failed", ["upstream"])
COOLDOWNS = Counter("specway_cooldowns", "Times an upstream was put in cooldown", ["upstream"])
HOLDS = Counter("specway_holds", "Priced requests' holds, by where they were taken: on a lease in memory or in the "
                "store directly (the end of a budget, a burst no lease covered)", ["on"])
OVERLOADED = Counter("specway_overloaded", "Requests refused at once because a limit of this worker was reached: "
                     "connections (server.max_connections) or requests (server.max_requests)", ["limit"])
RELOADS = Counter("specway_config_reloads", "Configuration reloads, by outcome: applied, unchanged, or the code of "
                  "their refusal (config_invalid, restart_required)", ["outcome"])
REFUSALS = Counter("specway_refusals", "Requests refused before any upstream call, by reason", ["reason"])
UNREAD = Counter("specway_upstream_unread",
                 "What an upstream sent that the gateway did not carry: a type its format's reader does not know "
                 "(what: event, part, block or delta), or an output item or a citation the caller's format has no "
                 "place for (what: item, citation)",
                 ["format", "what", "type"])

LOOP_LAG = Histogram("specway_event_loop_lag_seconds",
                     "How late this process's event loop ran a timer: while it is late, every request in the process "
                     "waits (work that held the loop: a big flush, a GC pass, a blocking call)", buckets=_FAST)

_REFUSAL_CODES = {codes.RATE_LIMIT_EXCEEDED.name: "rate_limit", codes.BUDGET_EXCEEDED.name: "budget",
                  codes.INSUFFICIENT_CREDIT.name: "credit"}


_CHILDREN_KEPT = 10_000  # label sets remembered (they come from the config: routes, models, upstreams, outcomes)
_children: dict[tuple[object, tuple[str, ...]], Any] = {}


def child(metric: Any, *values: str) -> Any:
    """`metric.labels(*values)`, looked up once: labels() takes a lock and rebuilds the label tuple on every call,
    several times per request. Values must be strings (labels() would str() them)."""
    key = (metric, values)
    found = _children.get(key)
    if found is None:
        found = metric.labels(*values)
        if len(_children) < _CHILDREN_KEPT:
            _children[key] = found
    return found


def observe(plan: Plan, trace: Trace, seconds: float) -> None:
    """Everything one routed request says, once it is over."""
    model = trace.answered.id if trace.answered else "none"
    child(INFERENCE, plan.format, model, trace.outcome).inc()
    if trace.outcome in _REFUSAL_CODES:
        child(REFUSALS, _REFUSAL_CODES[trace.outcome]).inc()
    upstream_time = 0.0
    for attempt in trace.attempts:
        upstream_time += attempt.latency_ms / 1000
        child(UPSTREAM, attempt.upstream, attempt.model, str(attempt.status or attempt.failure)
              ).observe(attempt.latency_ms / 1000)
    for attempt in trace.attempts[:-1] if trace.answered else []:
        child(FALLBACKS, attempt.upstream).inc()
    if not plan.stream and trace.outcome == "ok":
        child(OVERHEAD, plan.format).observe(max(0.0, seconds - upstream_time))
    if trace.usage is not None and trace.answered is not None:
        child(TOKENS, model, "input").inc(trace.usage.input_tokens or 0)
        child(TOKENS, model, "output").inc(trace.usage.output_tokens or 0)
        child(TOKENS, model, "cached_input").inc(trace.usage.cached_input_tokens or 0)
        child(TOKENS, model, "cache_write").inc(trace.usage.cache_write_tokens or 0)
        child(TOKENS, model, "reasoning_output").inc(trace.usage.reasoning_tokens or 0)
    if trace.cost is not None:
        child(COST, model).inc(float(trace.cost))


def exposition() -> tuple[bytes, str]:
    """The text format, from every worker when several share PROMETHEUS_MULTIPROC_DIR."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        _multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST


def token(server: Server) -> bytes | None:
    """The /metrics token from the variable `server.metrics_token_env` names; None when no variable is named. A
    named variable that is unset or empty stops the start: metrics meant to be private are never served public."""
    name = server.metrics_token_env
    if name is None:
        return None
    value = os.environ.get(name, "")
    if not value.strip():
        raise ConfigError(f"server.metrics_token_env: the environment variable {name} is not set")
    return value.strip().encode()


def authorize(authorization: str | None, expected: bytes) -> None:
    """A 401 unless the Authorization header is `Bearer <the token>` (compared in constant time)."""
    scheme, _, given = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
        raise ApiError(codes.INVALID_METRICS_TOKEN, "GET /metrics needs 'Authorization: Bearer <metrics token>'.",
                       headers={"WWW-Authenticate": 'Bearer realm="metrics"'})
