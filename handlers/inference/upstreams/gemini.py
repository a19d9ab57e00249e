"""The Gemini API: POST /v1beta/models/{model}:generateContent, :streamGenerateContent?alt=sse and :countTokens,
with the key in `x-goog-api-key`.

Its errors are Google's (`{"error": {"code", "message", "status", "details"}}`); a 429 says when to come back in its
details (google.rpc.RetryInfo's retryDelay, "27s"), which is read as the upstream's Retry-After. The Gemini API
refuses a bad key with a 400 whose google.rpc.ErrorInfo says API_KEY_INVALID: that is the gateway's credentials,
not the caller's request, and is read as a 401.
"""

from __future__ import annotations

import abc
from typing import Any
from urllib.parse import quote

import httpx
import orjson

from generated.config import UpstreamSettings
from handlers.inference.canonical import Request
from handlers.inference.formats.base import Traits, UpstreamOptions
from handlers.inference.formats.gemini import COUNTED_FIELDS, ERROR_STATUSES, count_request
from handlers.inference.known import DataProvider
from handlers.inference.upstreams.base import PLAIN, UpstreamError
from handlers.inference.upstreams.failures import status_error
from handlers.inference.upstreams.http import HttpUpstream

ENDPOINT = "https://generativelanguage.googleapis.com"
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
_BAD_KEY = frozenset({"API_KEY_INVALID", "API_KEY_EXPIRED"})


class GeminiSpeaker(HttpUpstream):
    """What the kinds that speak generateContent share (gemini, and vertex's Gemini models): the paths of a model's
    actions, Google's errors, and counting tokens."""

    speaks = "gemini"
    error_statuses = ERROR_STATUSES

    @abc.abstractmethod
    def model_path(self, model: str) -> str:
        """The path of `model` before `:action` (the Gemini API's models/NAME; Vertex AI's publishers/.../NAME)."""

    def path_for(self, model: str, stream: bool) -> str:
        action = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"{self.model_path(model)}:{action}"

    async def count_tokens(self, request: Request, model: str, traits: Traits = PLAIN) -> int:
        """The upstream's count of `request`'s input tokens for `model` (:countTokens of the body a generation would
        carry: its contents, system instruction and tools)."""
        rendered = self.body_for(request, model, traits)
        payload = await self.post_json(f"{self.model_path(model)}:countTokens", self.count_body(model, rendered))
        counted = payload.get("totalTokens")
        if not isinstance(counted, int) or isinstance(counted, bool) or counted < 0:
            raise self.protocol_error("answered a token count without totalTokens")
        return counted

    def count_body(self, model: str, rendered: dict[str, Any]) -> dict[str, Any]:
        """The countTokens body for what a generation would send (Vertex AI's: the fields a count reads, as they
        are)."""
        return {name: value for name, value in rendered.items() if name in COUNTED_FIELDS}

    def _status_error(self, response: httpx.Response, body: bytes) -> UpstreamError:
        details = _details(body)
        status = 401 if response.status_code == 400 and any(
            d.get("@type") == _ERROR_INFO and d.get("reason") in _BAD_KEY for d in details) else response.status_code
        err = status_error(self.name, status, response.headers, body, self._secret)
        if err.retry_after is None:
            err.retry_after = retry_delay(details)
        return err


class GeminiUpstream(GeminiSpeaker):
    """The Gemini API (Google AI Studio's key). `base_url` without /v1beta; Google's by default."""

    kind = "gemini"
    system = "gcp.gemini"  # OpenTelemetry's gen_ai.system for the Gemini API
    data_provider = DataProvider(prices="google", abilities="google")
    path = "/v1beta/models"  # path_for gives each model's

    def model_path(self, model: str) -> str:
        name = model.removeprefix("models/")
        return f"/v1beta/models/{quote(name, safe='')}"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"x-goog-api-key": api_key}

    def count_body(self, model: str, rendered: dict[str, Any]) -> dict[str, Any]:
        return count_request(model, rendered)

    @classmethod
    def from_settings(cls, name: str, settings: UpstreamSettings) -> GeminiUpstream:
        transport = cls.transport_args(name, settings)
        transport["base_url"] = settings.base_url or ENDPOINT
        return cls(name, options=UpstreamOptions.of(settings), **transport)


def _details(body: bytes) -> list[dict[str, Any]]:
    """The details of a Google error body (google.rpc.Status's), [] when it has none."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return []
    error = value.get("error") if isinstance(value, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    return [d for d in details if isinstance(d, dict)] if isinstance(details, list) else []


def retry_delay(details: list[dict[str, Any]]) -> float | None:
    """google.rpc.RetryInfo's retryDelay ("27s", "1.5s") in a Google error's details, in seconds."""
    for detail in details:
        delay = detail.get("retryDelay") if detail.get("@type") == _RETRY_INFO else None
        if isinstance(delay, str) and delay.endswith("s"):
            try:
                return max(0.0, float(delay[:-1]))
            except ValueError:
                return None
    return None
