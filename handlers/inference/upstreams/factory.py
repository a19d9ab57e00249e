"""Build an Upstream from its config entry: the one place that knows every kind."""

from __future__ import annotations

from generated.config import UpstreamSettings
from handlers.config import api_key
from handlers.inference.formats.base import UpstreamOptions
from handlers.inference.upstreams.anthropic import AnthropicUpstream
from handlers.inference.upstreams.base import Pool, Sizes, Timeouts, Upstream
from handlers.inference.upstreams.echo import EchoUpstream
from handlers.inference.upstreams.openai import OpenAIUpstream
from handlers.inference.upstreams.responses import ResponsesUpstream


def build_upstream(name: str, settings: UpstreamSettings) -> Upstream:
    if settings.kind == "echo":
        return EchoUpstream(name)
    t = settings.timeouts
    timeouts = Timeouts(connect=float(t.connect), read=float(t.read), total=float(t.total))
    base_url, key, headers = settings.base_url or "", api_key(name, settings), dict(settings.headers)
    options = UpstreamOptions(default_max_tokens=settings.default_max_tokens, passthrough=settings.passthrough)
    sizes = Sizes(answer=settings.max_answer_bytes, event=settings.max_event_bytes)
    pool = Pool(max_connections=settings.pool.max_connections, wait_seconds=float(settings.pool.wait_seconds))
    common = {"base_url": base_url, "api_key": key, "headers": headers, "timeouts": timeouts, "sizes": sizes,
              "pool": pool}
    if settings.kind == "openai":
        return OpenAIUpstream(name, options=options, **common)
    if settings.kind == "responses":
        return ResponsesUpstream(name, options=options, **common)
    return AnthropicUpstream(name, default_max_tokens=settings.default_max_tokens, passthrough=settings.passthrough,
                             anthropic_version=settings.anthropic_version, **common)
