"""Ceiling: the least a Python relay of the chat request can cost, with our client library (httpx on the aiohttp
transport, as the gateway's upstream client). Starlette on uvicorn, 1 worker, like the gateway.

    BENCH_UPSTREAM=http://127.0.0.1:18000 uvicorn bench.ceiling_httpx:app --loop uvloop --http httptools
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from httpx_aiohttp import AiohttpTransport, HttpxAiohttpClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

LIMITS = httpx.Limits(max_connections=512, max_keepalive_connections=64, keepalive_expiry=30.0)
client = HttpxAiohttpClient(base_url=os.environ.get("BENCH_UPSTREAM", "http://127.0.0.1:18000"), limits=LIMITS,
                            transport=AiohttpTransport(limits=LIMITS), trust_env=False)


async def chat(request: Request) -> Response:
    body = await request.body()
    req = client.build_request("POST", "/v1/chat/completions", content=body,
                               headers={"content-type": "application/json"})
    upstream = await client.send(req, stream=True)
    if b'"stream":true' not in body.replace(b" ", b""):
        content = await upstream.aread()
        await upstream.aclose()
        return Response(content, upstream.status_code, media_type=upstream.headers.get("content-type"))

    async def relay() -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
        finally:
            await upstream.aclose()

    return StreamingResponse(relay(), upstream.status_code, media_type="text/event-stream")


@asynccontextmanager
async def lifespan(_app: Starlette) -> AsyncIterator[None]:
    yield
    await client.aclose()


app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])], lifespan=lifespan)
