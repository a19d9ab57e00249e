"""The one error shape: {"type":"error","error":{"type","code","message","param"}}.

It parses in both the OpenAI and the Anthropic SDKs. Every error the gateway answers is an ApiError; a request
model's ValidationError becomes one by validation_error, for the API and the CLI alike.

The one place it yields is the Gemini paths, whose callers (Google's SDKs, Gemini CLI) read only Google's shape:
there the same error is answered as google_body() says (handlers/edge/paths.py picks the shape by path).
"""

from __future__ import annotations

from typing import Any

import orjson
import pydantic

from generated import errors as codes
from generated.errors import Code


class ApiError(Exception):
    """An error answer, raised by its code's name: ApiError(codes.MODEL_NOT_FOUND, "No model ...", param="model").

    The code fixes the status and the type (generated/errors.py, from specs/schemas/errors.yaml)."""

    def __init__(self, code: Code, message: str, *, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = code.status
        self.code = code.name
        self.type = code.type
        self.message = message
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "type": "error",
            "error": {"type": self.type, "code": self.code, "message": self.message, "param": self.param},
        }

    def json(self) -> bytes:
        return orjson.dumps(self.body())

    def google_body(self) -> dict[str, Any]:
        """Google's error shape, {"error": {code, message, status, details}}: the status word for the HTTP status,
        and in `details` the gateway's code (a google.rpc.ErrorInfo) and the field at fault (a google.rpc.BadRequest
        field violation)."""
        details: list[dict[str, Any]] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": self.code,
                                          "domain": "specway", "metadata": {"type": self.type}}]
        if self.param is not None:
            details.append({"@type": "type.googleapis.com/google.rpc.BadRequest",
                            "fieldViolations": [{"field": self.param, "description": self.message}]})
        status = GOOGLE_STATUS.get(self.status) or ("INTERNAL" if self.status >= 500 else "INVALID_ARGUMENT")
        return {"error": {"code": self.status, "message": self.message, "status": status, "details": details}}


# Google's status words (google.rpc.Code) by HTTP status, as its API answers them; 402 (out of credit) is a resource
# exhausted, and 502 an upstream that is unavailable.
GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 402: "RESOURCE_EXHAUSTED", 403: "PERMISSION_DENIED",
                 404: "NOT_FOUND", 405: "UNIMPLEMENTED", 408: "DEADLINE_EXCEEDED", 409: "ABORTED",
                 413: "INVALID_ARGUMENT", 415: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 431: "INVALID_ARGUMENT",
                 499: "CANCELLED", 500: "INTERNAL", 501: "UNIMPLEMENTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE",
                 504: "DEADLINE_EXCEEDED"}

STORE_RETRY_AFTER = 5  # seconds a caller is told to wait when the store cannot be reached


class StoreUnavailable(ApiError):
    """The store did not answer within `store.timeout_seconds`, or could not be reached at all.

    Raised by the store backends, so any request that needs the store answers 503 `store_unavailable` with
    Retry-After, never 500 (nor 401, for a key the gateway cannot look up). `reason` says what failed, for logs."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(codes.STORE_UNAVAILABLE, "The gateway's store cannot be reached right now; retry shortly.",
                         headers={"Retry-After": str(STORE_RETRY_AFTER)})
        self.reason = reason


def bad_request(message: str, param: str | None = None, code: Code = codes.INVALID_REQUEST) -> ApiError:
    return ApiError(code, message, param=param)


def not_found(message: str, code: Code, param: str | None = None) -> ApiError:
    return ApiError(code, message, param=param)


def validation_error(exc: pydantic.ValidationError) -> ApiError:
    """One problem, naming the field as a dotted path (messages.0.role).

    For a union (string or list) pydantic reports each branch; the deepest location is the most precise one.
    """
    errors = exc.errors(include_url=False)
    err: dict[str, Any] = max(errors, key=lambda e: len(e["loc"]))
    loc = [str(p) for p in err["loc"] if not _is_union_branch(p)]
    param = ".".join(loc) or None
    if err["type"] == "json_invalid":
        return bad_request(f"The body is not valid JSON: {err['msg']}.", code=codes.INVALID_JSON)
    if err["type"] == "model_type" and param is None:
        return bad_request("The body must be a JSON object.")
    if err["type"] == "missing":
        return bad_request(f"{param} is required.", param=param)
    if err["type"] == "string_pattern_mismatch" and (err.get("ctx") or {}).get("pattern") in PATTERN_WORDS:
        return bad_request(f"{param}: {PATTERN_WORDS[err['ctx']['pattern']]}, not {err['input']!r}.", param=param)
    return bad_request(f"{param}: {err['msg']}." if param else f"{err['msg']}.", param=param)


# The spec's string patterns in words, for the messages of values that do not match them (tests/test_bad_input.py
# checks that every pattern of the spec is here).
PATTERN_WORDS = {
    r"^[0-9]{1,12}(\.[0-9]{1,12})?$": 'must be an amount such as "12.50": digits, at most 12 before and 12 after the '
                                      "point, no sign",
    r"^-?[0-9]{1,12}(\.[0-9]{1,12})?$": 'must be an amount such as "10.00", or a negative one such as "-2.50" to '
                                        "take credit back: at most 12 digits before and 12 after the point",
    r"^[^\x00-\x1f\x7f]+$": "must not be empty nor hold control characters",
    r"^((key|model|upstream|workspace)(,(key|model|upstream|workspace))*)?$":
        "must be key, model, upstream or workspace, or several of them separated by commas",
    r"^[0-9]{1,17}~[0-9A-Za-z_-]{1,64}$": "must be a cursor this list gave (its next_cursor)",
    r"^aud_[0-9a-f]{16}$": "must be an audit entry's id (aud_ and 16 hex digits), as next_cursor gives it",
}


def _is_union_branch(part: Any) -> bool:
    # pydantic names the union member it tried ("str", "list[...]", a model class such as "Input");
    # callers want the field path only, and every field of the API is snake_case.
    return isinstance(part, str) and (part in ("str", "float", "int", "bool") or "[" in part or part[:1].isupper())


def unsupported(field: str, upstream_kind: str, why: str = "") -> ApiError:
    """A field the caller's format defines that the chosen upstream's kind cannot carry: refused, never dropped."""
    reason = f" ({why})" if why else ""
    message = f"{field} cannot reach this model: its {upstream_kind} upstream has no way to take it{reason}."
    return ApiError(codes.UNSUPPORTED_PARAMETER, message, param=field)
