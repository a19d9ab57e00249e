"""Every upstream kind by the name the configuration's `kind` enum gives it: the one place that knows them all.

Adding a kind is one class (and, when it speaks a new wire format, one format package) named here; the generator
refuses a `kind` enum that names a kind no class here registers."""

from __future__ import annotations

from generated.config import UpstreamSettings
from handlers.inference.upstreams.anthropic import AnthropicUpstream
from handlers.inference.upstreams.azure import AzureUpstream
from handlers.inference.upstreams.base import Upstream
from handlers.inference.upstreams.bedrock import BedrockUpstream
from handlers.inference.upstreams.echo import EchoUpstream
from handlers.inference.upstreams.gemini import GeminiUpstream
from handlers.inference.upstreams.openai import OpenAIUpstream
from handlers.inference.upstreams.responses import ResponsesUpstream
from handlers.inference.upstreams.vertex import VertexUpstream

KINDS: dict[str, type[Upstream]] = {
    kind.kind: kind
    for kind in (OpenAIUpstream, AnthropicUpstream, ResponsesUpstream, AzureUpstream, EchoUpstream, BedrockUpstream,
                 GeminiUpstream, VertexUpstream)
}


def build_upstream(name: str, settings: UpstreamSettings) -> Upstream:
    return KINDS[settings.kind].from_settings(name, settings)
