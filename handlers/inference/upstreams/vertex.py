"""Vertex AI: a Google Cloud project's models in one location, signed in with Google access tokens
(upstreams/google_tokens.py).

Two publishers' models on one upstream, each in its own wire format, chosen by the model's name: Google's Gemini
models through generateContent (.../publishers/google/models/NAME:generateContent, :streamGenerateContent?alt=sse,
:countTokens), Anthropic's Claude models through the Messages API at .../publishers/anthropic/models/NAME:rawPredict
and :streamRawPredict, whose body names no model and carries `anthropic_version: vertex-2023-10-16`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from generated.config import UpstreamSettings
from handlers.inference.canonical import Dialect, Request
from handlers.inference.formats.base import Traits, UpstreamOptions
from handlers.inference.formats.gemini import ERROR_STATUSES
from handlers.inference.formats.messages.vocabulary import COUNTED_FIELDS
from handlers.inference.known import DataProvider
from handlers.inference.upstreams.base import PLAIN
from handlers.inference.upstreams.failures import ERROR_TYPE_STATUS
from handlers.inference.upstreams.gemini import GeminiSpeaker
from handlers.inference.upstreams.google_tokens import GoogleTokens, credentials

ANTHROPIC_VERSION = "vertex-2023-10-16"  # the anthropic_version Claude on Vertex AI takes, in the body
_CLAUDE = DataProvider(prices="anthropic", abilities="google-vertex-anthropic")


def endpoint(location: str) -> str:
    """Vertex AI's endpoint for a location: regional, or the global one."""
    return "https://aiplatform.googleapis.com" if location == "global" else f"https://{location}-aiplatform.googleapis.com"


def publisher(model: str) -> str:
    """Whose model a name is: Anthropic's Claude models (claude-sonnet-4-5@20250929), else Google's."""
    return "anthropic" if model.startswith("claude") else "google"


class VertexUpstream(GeminiSpeaker):
    """Vertex AI in `project` and `location`. `base_url` replaces the location's endpoint (a private endpoint, a
    test's fake); takes HttpUpstream's arguments, without a key."""

    kind = "vertex"
    system = "gcp.vertex_ai"  # OpenTelemetry's gen_ai.system for Vertex AI
    data_provider = DataProvider(prices="google", abilities="google-vertex")
    path = "/v1/projects"  # path_for gives each model's
    # Google's status words (Gemini's stream errors) and Anthropic's error types (Claude's)
    error_statuses: Mapping[str, int] = {**ERROR_TYPE_STATUS, **ERROR_STATUSES}

    def __init__(self, name: str, *, project: str, location: str, tokens: GoogleTokens, base_url: str | None = None,
                 **transport: Any) -> None:
        self.project = project
        self.location = location
        self.tokens = tokens
        super().__init__(name, base_url=base_url or endpoint(location), **transport)
        self._prefix = f"/v1/projects/{quote(project, safe='')}/locations/{quote(location, safe='')}/publishers"

    @classmethod
    def from_settings(cls, name: str, settings: UpstreamSettings) -> VertexUpstream:
        transport = cls.transport_args(name, settings)
        transport.pop("api_key")
        transport["base_url"] = settings.base_url or None
        creds = credentials(f"upstreams.{name}", settings.credentials_env)
        return cls(name, project=settings.project or "", location=settings.location or "",
                   tokens=GoogleTokens(name, creds), options=UpstreamOptions.of(settings), **transport)

    @classmethod
    def data_for(cls, model: str) -> DataProvider | None:
        return _CLAUDE if publisher(model) == "anthropic" else cls.data_provider

    @classmethod
    def data_providers(cls) -> tuple[DataProvider, ...]:
        return (cls.data_provider, _CLAUDE)  # type: ignore[return-value]

    def dialect(self, model: str) -> Dialect:
        return "messages" if publisher(model) == "anthropic" else "gemini"

    def model_path(self, model: str) -> str:
        return f"{self._prefix}/{publisher(model)}/models/{quote(model, safe='@')}"

    def path_for(self, model: str, stream: bool) -> str:
        if publisher(model) == "anthropic":
            return f"{self.model_path(model)}:{'streamRawPredict' if stream else 'rawPredict'}"
        return super().path_for(model, stream)

    def body_for(self, request: Request, model: str, traits: Traits) -> dict[str, Any]:
        """Claude's Messages body names no model on Vertex AI (the path does) and says Vertex's anthropic_version."""
        body = super().body_for(request, model, traits)
        if publisher(model) == "anthropic":
            body.pop("model", None)
            body["anthropic_version"] = ANTHROPIC_VERSION
        return body

    def _caller_headers(self, request: Request, model: str) -> dict[str, str]:
        """A Messages caller's headers, less anthropic-version: Claude on Vertex AI takes its own, in the body."""
        headers = super()._caller_headers(request, model)
        return {k: v for k, v in headers.items() if k != "anthropic-version"} if "anthropic-version" in headers \
            else headers

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {}  # never given a key: every request carries an access token (sign)

    async def sign(self, url: httpx.URL, content: bytes, headers: Mapping[str, str]) -> Mapping[str, str]:
        return {**headers, "authorization": f"Bearer {await self.tokens.token()}"}

    async def count_tokens(self, request: Request, model: str, traits: Traits = PLAIN) -> int:
        """Gemini models count at :countTokens; Claude's at Anthropic's count-tokens model (rawPredict of the
        Messages fields a count reads, naming the model)."""
        if publisher(model) != "anthropic":
            return await super().count_tokens(request, model, traits)
        rendered = self.body_for(request, model, traits)
        body = {"model": model, **{name: value for name, value in rendered.items() if name in COUNTED_FIELDS}}
        payload = await self.post_json(f"{self._prefix}/anthropic/models/count-tokens:rawPredict", body)
        counted = payload.get("input_tokens")
        if not isinstance(counted, int) or isinstance(counted, bool) or counted < 0:
            raise self.protocol_error("answered a token count without input_tokens")
        return counted
