"""Upstream kinds: where the gateway sends a canonical request (registry.py knows them all)."""

from handlers.inference.upstreams.anthropic import AnthropicUpstream
from handlers.inference.upstreams.base import Timeouts, Upstream, UpstreamError
from handlers.inference.upstreams.echo import EchoUpstream
from handlers.inference.upstreams.openai import OpenAIUpstream
from handlers.inference.upstreams.responses import ResponsesUpstream

__all__ = ["AnthropicUpstream", "EchoUpstream", "OpenAIUpstream", "ResponsesUpstream", "Timeouts", "Upstream",
           "UpstreamError"]
