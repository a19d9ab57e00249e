"""Upstreams that speak OpenAI Chat Completions: OpenAI itself and the many compatible servers."""

from __future__ import annotations

from handlers.inference.formats import chat
from handlers.inference.upstreams.http import HttpUpstream


class OpenAIUpstream(HttpUpstream):
    """Any OpenAI-compatible Chat Completions server; base_url includes /v1.

    Takes HttpUpstream's arguments: (name, *, base_url, api_key=None, headers=None, timeouts=Timeouts(),
    sizes=Sizes(), pool=Pool(), options=UpstreamOptions(), transport=None).
    """

    kind = "openai"
    format = chat
    speaks = "chat"
    path = "/chat/completions"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"}
