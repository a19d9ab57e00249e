"""Response helpers: JSON via orjson, and SSE streams that proxies pass through unbuffered."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pydantic
from starlette.responses import Response, StreamingResponse

JSON = "application/json"
SSE = "text/event-stream"


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, headers=headers, media_type=JSON)


def model_response(model: pydantic.BaseModel, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A generated response model as its JSON: every field, in the spec's order."""
    return json_response(model.model_dump(), status, headers)


def sse_response(chunks: AsyncIterator[bytes], headers: dict[str, str] | None = None) -> StreamingResponse:
    h = {"cache-control": "no-cache", "x-accel-buffering": "no", **(headers or {})}
    return StreamingResponse(chunks, media_type=SSE, headers=h)
