"""What the generated routes call: authenticate the relay key, parse the body once.

Before the body reaches its generated model it must be JSON that every upstream can be sent back faithfully:
pydantic reads `NaN` and `Infinity` (which are not JSON) and keeps integers of any size and numbers past a double's
range (1e400 as inf); an upstream's encoder then fails on them (orjson: "Integer exceeds 64-bit range") or writes
them as null. So the body is also read by the strict JSON reader, and such numbers are refused with a 400 naming the
field. That second read costs a few microseconds for a chat-sized body (~1 ms for 10 MB, mostly a few large strings).
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

import pydantic
import pydantic_core
from starlette.requests import Request

from generated import errors as codes
from handlers import gateway
from handlers.administration.auth import DEFAULT_CREDENTIALS, Credentials, Principal, secret_from
from handlers.edge.connexion_adapter import current_request
from handlers.errors import ApiError, bad_request, validation_error

M = TypeVar("M", bound=pydantic.BaseModel)

# The integers a JSON encoder can write back out (orjson, which the upstream transports use: int64 and uint64).
INT_MIN, INT_MAX = -(2**63), 2**64 - 1
_UTF8_BOM = b"\xef\xbb\xbf"


def request() -> Request:
    """The request being served, made once per operation call (its headers, query and body are then read once)."""
    return current_request()


async def authenticate(request: Request, scope: str, credentials: Credentials = DEFAULT_CREDENTIALS) -> Principal:
    """The relay key from the first of `credentials` (the operation's security schemes, in order) the request has."""
    # The query string is parsed only for an operation that takes its key there.
    query = request.query_params if any(where == "query" for where, _ in credentials) else _NO_QUERY
    secret = secret_from(credentials, request.headers, query)
    return await gateway.current().keys.authenticate(secret, scope)


_NO_QUERY: dict[str, str] = {}


async def parse_body(request: Request, model: type[M], required: bool = True) -> M:
    """The body as its generated model; an empty one, where the spec does not require a body, is the defaults."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise ApiError(codes.UNSUPPORTED_CONTENT_ENCODING,
                       "The body must not be compressed: Content-Encoding is not supported; send plain JSON.")
    raw = await request.body()
    if not raw.strip():
        if not required:
            return model()
        raise bad_request("The body is empty: send a JSON object.")
    check_json(raw)
    try:
        return model.model_validate_json(raw)
    except pydantic.ValidationError as exc:
        raise validation_error(exc) from None


def check_json(raw: bytes) -> None:
    """A 400 unless `raw` is strict JSON whose every number an encoder can write back as it was sent."""
    try:
        value = pydantic_core.from_json(raw, allow_inf_nan=False)
    except ValueError as exc:
        raise bad_request(f"The body is not valid JSON: {_why(raw, exc)}.", code=codes.INVALID_JSON) from None
    if _has_unsendable(value):
        where = _unsendable_at(value, ()) or ()
        param = ".".join(map(str, where)) if where else None  # a field may be named "" (param "")
        raise bad_request(f"{param if where else 'The body'} is a number out of the range the gateway can relay: integers must "
                          f"lie within -2^63 .. 2^64-1, and other numbers within a double's range.",
                          param=param, code=codes.NUMBER_OUT_OF_RANGE)


def _why(raw: bytes, exc: ValueError) -> str:
    if raw.startswith(_UTF8_BOM):
        return "it starts with a byte order mark; send UTF-8 without one"
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in raw[:4]:
        return "it looks like UTF-16 or UTF-32; send UTF-8"
    try:
        pydantic_core.from_json(raw)
    except ValueError:
        return str(exc)
    return f"NaN, Infinity and -Infinity are not JSON numbers ({exc})"


def _unsendable(value: Any) -> bool:
    kind = type(value)
    return (kind is int and not INT_MIN <= value <= INT_MAX) or (kind is float and math.isinf(value))


def _has_unsendable(value: Any) -> bool:
    """Whether any number in the parsed body is one an encoder cannot write back (a fast walk, no paths kept)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif _unsendable(item):
            return True
    return False


def _unsendable_at(value: Any, where: tuple[str | int, ...]) -> tuple[str | int, ...] | None:
    """Where the first such number is (only looked for once one is known to be there)."""
    if _unsendable(value):
        return where
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _unsendable_at(item, (*where, key))
        if found is not None:
            return found
    return None
