"""A streamed answer's server-sent events, written from the request's own task.

Starlette's StreamingResponse, on a server that speaks ASGI below 2.4 (uvicorn says 2.3), starts a task group and
writes the body from a new task while the request's task waits for the client to go away: every stream paid for a
task group and a turn of the event loop before its first byte. Here the request's task writes the head and every
chunk itself, the moment it has them, and a small task only listens for the disconnect, which cancels the writing
(the body's own finally then closes the upstream and settles, as before).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}  # proxies pass it through unbuffered


class EventStream(Response):
    media_type = "text/event-stream"

    def __init__(self, chunks: AsyncIterator[bytes], headers: dict[str, str] | None = None) -> None:
        self.chunks = chunks
        self.status_code = 200
        self.background = None
        self.init_headers({**_HEADERS, **(headers or {})})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with anyio.CancelScope() as writing:
            watcher = asyncio.get_running_loop().create_task(_disconnected(receive, writing))
            try:
                await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
                async for chunk in self.chunks:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                watcher.cancel()
                aclose = getattr(self.chunks, "aclose", None)
                if aclose is not None:  # a cancelled write leaves the body suspended: its finally runs now
                    with anyio.CancelScope(shield=True):
                        await aclose()


async def _disconnected(receive: Receive, writing: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    writing.cancel()
