"""Upstreams that speak the Anthropic Messages API."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from handlers.inference.canonical import Request
from handlers.inference.formats import messages
from handlers.inference.formats.base import Traits, UpstreamOptions
from handlers.inference.upstreams.base import PLAIN, Pool, Sizes, Timeouts
from handlers.inference.upstreams.http import DEFAULT_POOL, DEFAULT_SIZES, DEFAULT_TIMEOUTS, HttpUpstream

# The fields of a Messages body that Anthropic's count_tokens defines (its own and its beta params); the others only
# steer generation (max_tokens, temperature, metadata, container ...), change no count, and it refuses them.
_COUNTED = frozenset({"model", "messages", "system", "thinking", "tool_choice", "tools", "cache_control", "output_config",
                      "speed", "mcp_servers", "context_management", "compaction", "billing_policy"})


class AnthropicUpstream(HttpUpstream):
    kind = "anthropic"
    format = messages
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
        default_max_tokens: int = 4096,
        passthrough: bool = False,
        anthropic_version: str = "2023-06-01",
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.anthropic_version = anthropic_version
        options = UpstreamOptions(default_max_tokens=default_max_tokens, passthrough=passthrough)
        super().__init__(name, base_url=base_url, api_key=api_key, headers=headers, timeouts=timeouts, sizes=sizes,
                         pool=pool, options=options, transport=transport)

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key}

    def kind_headers(self) -> dict[str, str]:
        return {"anthropic-version": self.anthropic_version}

    async def count_tokens(self, request: Request, model: str, traits: Traits = PLAIN) -> int:
        """The upstream's count of `request`'s input tokens for `model` (POST /v1/messages/count_tokens): the body a
        message request would carry, less what only generation reads, with the same headers (anthropic-beta ...)."""
        rendered = self.format.upstream_body(request, model, self.options, traits)
        body = {name: value for name, value in rendered.items() if name in _COUNTED}
        payload = await self.post_json(self.count_path, body, self._caller_headers(request))
        counted = payload.get("input_tokens")
        if not isinstance(counted, int) or isinstance(counted, bool) or counted < 0:
            raise self.protocol_error("answered a token count without input_tokens")
        return counted
