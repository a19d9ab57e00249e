"""Upstreams that speak the OpenAI Responses API: OpenAI itself and the servers compatible with it."""

from __future__ import annotations

from handlers.inference.upstreams.openai import OpenAIUpstream


class ResponsesUpstream(OpenAIUpstream):
    """Any OpenAI Responses server; base_url includes /v1, like the openai kind.

    OpenAI's transport (bearer key, base URL with /v1) with the Responses format. Takes HttpUpstream's arguments:
    (name, *, base_url, api_key=None, headers=None, timeouts=Timeouts(), sizes=Sizes(), pool=Pool(),
    options=UpstreamOptions(), transport=None). Every body carries store false: nothing is kept upstream between
    requests, so a Responses caller's request goes as sent (with the gateway's model name, effort and store).
    """

    kind = "responses"
    embeds = False  # its servers are not promised to have /embeddings
    speaks = "responses"
    path = "/responses"
