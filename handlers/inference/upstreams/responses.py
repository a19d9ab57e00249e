"""Upstreams that speak the OpenAI Responses API: OpenAI itself and the servers compatible with it."""

from __future__ import annotations

from handlers.inference.formats import responses
from handlers.inference.upstreams.http import HttpUpstream


class ResponsesUpstream(HttpUpstream):
    """Any OpenAI Responses server; base_url includes /v1, like the openai kind.

    Takes HttpUpstream's arguments: (name, *, base_url, api_key=None, headers=None, timeouts=Timeouts(),
    options=UpstreamOptions(), transport=None). Every body carries store false: nothing is kept upstream between
    requests, so a Responses caller's request goes as sent (with the gateway's model name, effort and store).
    """

    kind = "responses"
    format = responses
    speaks = "responses"
    path = "/responses"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"}
