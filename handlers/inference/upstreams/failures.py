"""How an upstream failed, as an UpstreamError: transport failures, non-2xx answers, error events inside a stream.
Messages passed on never carry the gateway's credentials."""

from __future__ import annotations

import contextlib
import email.utils
import re
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import aiohttp
import httpx
import orjson

from handlers.inference.upstreams.base import FailureKind, UpstreamError

_MAX_DETAIL = 1000  # characters of an upstream's error message we pass on

# First match wins. The aiohttp cause is classified before httpx-aiohttp's mapping of it, which is lossy:
# it turns a refused connection into httpx.ConnectTimeout.
_FAILURES: tuple[tuple[tuple[type[BaseException], ...], FailureKind, str], ...] = (
    ((TimeoutError, httpx.TimeoutException), "timeout", "timed out"),
    ((aiohttp.ClientConnectionError, httpx.ConnectError, ConnectionError), "connect", "could not be reached"),
    ((BaseException,), "protocol", "sent an incomplete or malformed response"),
)
CAUGHT = (httpx.HTTPError, aiohttp.ClientError, OSError)  # OSError covers TimeoutError

# Error events inside a 200 stream carry a type but no status; this is the status each provider uses for the type.
ERROR_TYPE_STATUS: Mapping[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "insufficient_quota": 429,
    "api_error": 500,
    "server_error": 500,
    "overloaded_error": 529,
}


def failure(name: str, exc: BaseException) -> UpstreamError:
    """An UpstreamError for a transport failure (timeout, refused connection, cut response)."""
    cause = exc.__cause__ if isinstance(exc.__cause__, aiohttp.ClientError) else exc
    kind, what = next((k, w) for types, k, w in _FAILURES if isinstance(cause, types))
    return UpstreamError(kind, f"upstream {name} {what}")


def status_error(name: str, status: int, headers: Mapping[str, str], body: bytes, secret: str | None) -> UpstreamError:
    """An UpstreamError for a non-2xx answer, carrying the upstream's own message when it sent one."""
    if status in (401, 403):
        # The upstream's text may quote the key it was given; say nothing of it.
        message = f"upstream {name} rejected the gateway's credentials"
    else:
        detail = error_detail(body)
        message = scrub(detail, secret) if detail else f"upstream {name} answered HTTP {status}"
    return UpstreamError("status", message, status=status, retry_after=retry_after(headers, rate_limited=status == 429))


def event_error(name: str, payload: Any, secret: str | None, statuses: Mapping[str, int] = ERROR_TYPE_STATUS
                ) -> UpstreamError:
    """An UpstreamError for an error event inside a stream (`{"error": {"type", "message"}}` in both providers), with
    the status `statuses` gives its type (the kind's own table)."""
    error = payload.get("error") if isinstance(payload, dict) else None
    error_type = (error.get("type") or error.get("code")) if isinstance(error, dict) else None
    detail = error_detail(payload) or f"upstream {name} failed mid-stream"
    return UpstreamError("status", scrub(detail, secret), status=statuses.get(str(error_type), 500))


def error_detail(body: bytes | Any) -> str | None:
    """The human message from an error body: OpenAI, Anthropic and the usual compatible-server shapes."""
    if isinstance(body, bytes):
        try:
            body = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    for candidate in (
        error.get("message") if isinstance(error, dict) else error,
        body.get("message"),
        body.get("detail"),
    ):
        if isinstance(candidate, str) and candidate.strip():
            return candidate.strip()[:_MAX_DETAIL]
    return None


def scrub(text: str, secret: str | None) -> str:
    return text.replace(secret, "[redacted]") if secret else text


def retry_after(headers: Mapping[str, str], rate_limited: bool = False) -> float | None:
    """Seconds to wait, from `retry-after-ms` (OpenAI) or `retry-after` (seconds or an HTTP date); for a rate limit
    (`rate_limited`) that names neither, when the providers' rate-limit headers say the exhausted limit resets."""
    for header, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        with contextlib.suppress(TypeError, ValueError):
            return max(0.0, float(headers.get(header) or "") * scale)
    when = _date(headers.get("retry-after"))
    if when is not None:
        return max(0.0, when - time.time())
    return rate_limit_reset(headers) if rate_limited else None


# (remaining, reset) header pairs: OpenAI's resets are durations ("1s", "6m0s", "20ms"), Anthropic's RFC 3339 times.
_RESETS = (
    ("x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"),
    ("x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"),
    ("anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset"),
    ("anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset"),
    ("anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-reset"),
    ("anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-reset"),
)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def rate_limit_reset(headers: Mapping[str, str]) -> float | None:
    """Seconds until the rate limit that refused resets: the latest reset of the limits whose remaining count is 0,
    else the soonest reset given; None when no provider header says."""
    exhausted, given = [], []
    for remaining, reset in _RESETS:
        wait = _reset_seconds(headers.get(reset))
        if wait is None:
            continue
        given.append(wait)
        if (headers.get(remaining) or "").strip() == "0":
            exhausted.append(wait)
    return max(exhausted) if exhausted else min(given, default=None)


def _reset_seconds(value: str | None) -> float | None:
    """A reset header's wait: a Go duration (OpenAI), a number of seconds, or an RFC 3339 time (Anthropic)."""
    text = (value or "").strip()
    if not text:
        return None
    pieces = _DURATION.findall(text)
    if pieces and "".join(n + u for n, u in pieces) == text:
        return sum(float(n) * _UNIT[u] for n, u in pieces)
    with contextlib.suppress(ValueError):
        return max(0.0, float(text))
    with contextlib.suppress(ValueError):
        return max(0.0, datetime.fromisoformat(text).timestamp() - time.time())
    return None


def _date(value: str | None) -> float | None:
    try:
        return email.utils.parsedate_to_datetime(value or "").timestamp()
    except (TypeError, ValueError, IndexError):
        return None
