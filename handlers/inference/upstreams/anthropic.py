"""Upstreams that speak the Anthropic Messages API."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from handlers.inference.formats import messages
from handlers.inference.formats.base import UpstreamOptions
from handlers.inference.upstreams.base import Timeouts
from handlers.inference.upstreams.http import DEFAULT_TIMEOUTS, HttpUpstream


class AnthropicUpstream(HttpUpstream):
    kind = "anthropic"
    format = messages
    speaks = "messages"
    path = "/v1/messages"

    def __init__(
        self,
        name: str,
        *,
        base_url: str,  # without /v1, like the Anthropic SDK
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        default_max_tokens: int = 4096,
        anthropic_version: str = "2023-06-01",
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.anthropic_version = anthropic_version
        options = UpstreamOptions(default_max_tokens=default_max_tokens)
        super().__init__(name, base_url=base_url, api_key=api_key, headers=headers, timeouts=timeouts, options=options,
                         transport=transport)

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key}

    def kind_headers(self) -> dict[str, str]:
        return {"anthropic-version": self.anthropic_version}
