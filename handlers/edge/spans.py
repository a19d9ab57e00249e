"""The outermost ASGI layer when telemetry is on: every request in a server span (handlers/observability/tracing.py),
the Edge's own refusals too. Imported only then (handlers/edge/app.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Receive, Scope, Send

from handlers.edge import paths

if TYPE_CHECKING:
    from handlers.gateway import Gateway


class ServerSpans:
    """Until the gateway has started (its tracing is made in each worker), requests pass untraced."""

    def __init__(self, app: ASGIApp, gateway: Gateway) -> None:
        self.app = app
        self.gateway = gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tracing = self.gateway.tracing
        if scope["type"] != "http" or tracing is None:
            await self.app(scope, receive, send)
            return
        info = paths.match(scope["path"], scope["method"])
        await tracing.serve(self.app, scope, receive, send, info.template if info else None)
