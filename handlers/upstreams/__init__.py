"""Upstream kinds: where the gateway sends a canonical request."""

from handlers.upstreams.anthropic import AnthropicUpstream
from handlers.upstreams.base import Timeouts, Upstream, UpstreamError
from handlers.upstreams.echo import EchoUpstream
from handlers.upstreams.openai import OpenAIUpstream

__all__ = ["AnthropicUpstream", "EchoUpstream", "OpenAIUpstream", "Timeouts", "Upstream", "UpstreamError"]
