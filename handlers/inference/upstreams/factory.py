"""Build an Upstream from its config entry: the one place that knows every kind."""

from __future__ import annotations

from generated.config import UpstreamSettings
from handlers.config import api_key
from handlers.inference.upstreams.anthropic import AnthropicUpstream
from handlers.inference.upstreams.base import Timeouts, Upstream
from handlers.inference.upstreams.echo import EchoUpstream
from handlers.inference.upstreams.openai import OpenAIUpstream


def _timeouts(settings: UpstreamSettings) -> Timeouts:
    t = settings.timeouts
    if t is None:
        return Timeouts()
    return Timeouts(connect=float(t.connect or 5), read=float(t.read or 60), total=float(t.total or 300))


def build_upstream(name: str, settings: UpstreamSettings) -> Upstream:
    if settings.kind == "echo":
        return EchoUpstream(name)
    common = {
        "base_url": settings.base_url or "",
        "api_key": api_key(name, settings),
        "headers": dict(settings.headers or {}),
        "timeouts": _timeouts(settings),
    }
    if settings.kind == "openai":
        return OpenAIUpstream(name, **common)  # type: ignore[arg-type]
    return AnthropicUpstream(
        name,
        default_max_tokens=settings.default_max_tokens or 4096,
        anthropic_version=settings.anthropic_version or "2023-06-01",
        **common,  # type: ignore[arg-type]
    )
