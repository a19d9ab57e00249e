"""What the generated routes call: authenticate the relay key, parse the body once."""

from __future__ import annotations

from typing import TypeVar

import pydantic
from connexion.lifecycle import ConnexionRequest

from handlers import gateway
from handlers.administration.auth import Principal, secret_from_headers
from handlers.errors import bad_request, validation_error

M = TypeVar("M", bound=pydantic.BaseModel)


async def authenticate(request: ConnexionRequest, scope: str) -> Principal:
    headers = request.headers
    secret = secret_from_headers(headers.get("authorization"), headers.get("x-api-key"))
    return await gateway.current().keys.authenticate(secret, scope)


async def parse_body(request: ConnexionRequest, model: type[M]) -> M:
    raw = await request.body()
    if not raw.strip():
        raise bad_request("The request body is empty: send a JSON object.")
    try:
        return model.model_validate_json(raw)
    except pydantic.ValidationError as exc:
        raise validation_error(exc) from None
