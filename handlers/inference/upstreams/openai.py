"""Upstreams that speak OpenAI Chat Completions: OpenAI itself and the many compatible servers."""

from __future__ import annotations

from handlers.inference.formats import embeddings
from handlers.inference.formats.base import UpstreamFault
from handlers.inference.formats.embeddings import Embed, Vectors
from handlers.inference.known import DataProvider
from handlers.inference.upstreams.http import HttpUpstream


class OpenAIUpstream(HttpUpstream):
    """Any OpenAI-compatible Chat Completions server; base_url includes /v1. It also answers embeddings.

    Takes HttpUpstream's arguments: (name, *, base_url, api_key=None, headers=None, timeouts=Timeouts(),
    sizes=Sizes(), pool=Pool(), options=UpstreamOptions(), transport=None).
    """

    kind = "openai"
    system = "openai"
    embeds = True
    data_provider = DataProvider(prices="openai", abilities="openai")  # compatible servers' names rarely collide
    speaks = "chat"
    path = "/chat/completions"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"}

    def embeddings_path(self, model: str) -> str:
        return "/embeddings"

    async def embed(self, request: Embed, model: str) -> Vectors:
        """POST /embeddings (base_url includes /v1): the caller's body with `model`; the vectors as the upstream sent
        them. An answer without one embedding per input cannot be read (an UpstreamError, which falls back)."""
        body = embeddings.upstream_body(request, model, self.options)
        payload = await self.post_json(self.embeddings_path(model), body)
        try:
            return embeddings.upstream_result(payload, len(embeddings.inputs(request)))
        except UpstreamFault as fault:
            raise self._fault(fault) from None
