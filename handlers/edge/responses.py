"""Response helpers: JSON via orjson (streamed answers: handlers/serving/event_stream.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pydantic
from starlette.responses import Response

JSON = "application/json"


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, headers=headers, media_type=JSON)


def model_response(model: pydantic.BaseModel, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A generated response model as its JSON: every field, in the spec's order."""
    return json_response(model.model_dump(), status, headers)
