"""Upstreams that speak the Anthropic Messages API."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from generated.config import UpstreamSettings
from handlers.inference.canonical import Request
from handlers.inference.formats.base import Traits, UpstreamOptions
from handlers.inference.formats.messages.vocabulary import COUNTED_FIELDS
from handlers.inference.known import DataProvider
from handlers.inference.upstreams.base import PLAIN, Pool, Sizes, Timeouts
from handlers.inference.upstreams.http import (
    DEFAULT_OPTIONS,
    DEFAULT_POOL,
    DEFAULT_SIZES,
    DEFAULT_TIMEOUTS,
    HttpUpstream,
)


class AnthropicUpstream(HttpUpstream):
    kind = "anthropic"
    system = "anthropic"
    data_provider = DataProvider(prices="anthropic", abilities="anthropic")
    speaks = "messages"
    path = "/v1/messages"
    count_path = "/v1/messages/count_tokens"

    def __init__(
        self,
        name: str,
        *,
        base_url: str,  # without /v1, like the Anthropic SDK
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        sizes: Sizes = DEFAULT_SIZES,
        pool: Pool = DEFAULT_POOL,
        default_max_tokens: int = DEFAULT_OPTIONS.default_max_tokens,
        passthrough: bool = DEFAULT_OPTIONS.passthrough,
        anthropic_version: str = UpstreamSettings.model_fields["anthropic_version"].default,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.anthropic_version = anthropic_version
        options = UpstreamOptions(default_max_tokens=default_max_tokens, passthrough=passthrough)
        super().__init__(name, base_url=base_url, api_key=api_key, headers=headers, timeouts=timeouts, sizes=sizes,
                         pool=pool, options=options, transport=transport)

    @classmethod
    def from_settings(cls, name: str, settings: UpstreamSettings) -> AnthropicUpstream:
        return cls(name, **cls.transport_args(name, settings), default_max_tokens=settings.default_max_tokens,
                   passthrough=settings.passthrough, anthropic_version=settings.anthropic_version)

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key}

    def kind_headers(self) -> dict[str, str]:
        return {"anthropic-version": self.anthropic_version}

    async def count_tokens(self, request: Request, model: str, traits: Traits = PLAIN) -> int:
        """The upstream's count of `request`'s input tokens for `model` (POST /v1/messages/count_tokens): the body a
        message request would carry, less what only generation reads, with the same headers (anthropic-beta ...)."""
        rendered = self.format_for(model).upstream_body(request, model, self.options, traits)
        body = {name: value for name, value in rendered.items() if name in COUNTED_FIELDS}
        payload = await self.post_json(self.count_path, body, self._caller_headers(request, model))
        counted = payload.get("input_tokens")
        if not isinstance(counted, int) or isinstance(counted, bool) or counted < 0:
            raise self.protocol_error("answered a token count without input_tokens")
        return counted
