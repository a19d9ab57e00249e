"""What the generated routes call: authenticate the relay key, parse the body once."""

from __future__ import annotations

from typing import Any, TypeVar

import pydantic
from connexion.lifecycle import ConnexionRequest

from handlers import gateway
from handlers.administration.auth import Principal, secret_from_headers
from handlers.errors import ApiError, bad_request

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


def validation_error(exc: pydantic.ValidationError) -> ApiError:
    """One problem, naming the field as a dotted path (messages.0.role).

    For a union (string or list) pydantic reports each branch; the deepest location is the most precise one.
    """
    errors = exc.errors(include_url=False, include_context=False)
    err: dict[str, Any] = max(errors, key=lambda e: len(e["loc"]))
    loc = [str(p) for p in err["loc"] if not _is_union_branch(p)]
    param = ".".join(loc) or None
    if err["type"] == "json_invalid":
        return bad_request(f"The body is not valid JSON: {err['msg']}.", code="invalid_json")
    if err["type"] == "model_type" and param is None:
        return bad_request("The body must be a JSON object.")
    if err["type"] == "missing":
        return bad_request(f"{param} is required.", param=param)
    return bad_request(f"{param}: {err['msg']}." if param else f"{err['msg']}.", param=param)


def _is_union_branch(part: Any) -> bool:
    # pydantic names the union member it tried ("str", "list[...]", a model class such as "Input");
    # callers want the field path only, and every field of the API is snake_case.
    return isinstance(part, str) and (part in ("str", "float", "int", "bool") or "[" in part or part[:1].isupper())
