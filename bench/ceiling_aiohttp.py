"""Ceiling: the same minimal relay as bench/ceiling_httpx.py, on plain aiohttp (no httpx layer on top).

    BENCH_UPSTREAM=http://127.0.0.1:18000 uvicorn bench.ceiling_aiohttp:app --loop uvloop --http httptools
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

URL = os.environ.get("BENCH_UPSTREAM", "http://127.0.0.1:18000") + "/v1/chat/completions"
_session: list[aiohttp.ClientSession] = []


async def chat(request: Request) -> Response:
    body = await request.body()
    upstream = await _session[0].post(URL, data=body, headers={"content-type": "application/json"})
    if b'"stream":true' not in body.replace(b" ", b""):
        async with upstream:
            content = await upstream.read()
        return Response(content, upstream.status, media_type=upstream.content_type)

    async def relay() -> AsyncIterator[bytes]:
        async with upstream:
            async for chunk in upstream.content.iter_any():
                yield chunk

    return StreamingResponse(relay(), upstream.status, media_type="text/event-stream")


@asynccontextmanager
async def lifespan(_app: Starlette) -> AsyncIterator[None]:
    connector = aiohttp.TCPConnector(limit=512, limit_per_host=512, keepalive_timeout=30)
    _session.append(aiohttp.ClientSession(connector=connector, trust_env=False))
    yield
    await _session.pop().close()


app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])], lifespan=lifespan)
