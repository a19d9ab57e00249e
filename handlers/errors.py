"""The one error shape: {"type":"error","error":{"type","code","message","param"}}.

It parses in both the OpenAI and the Anthropic SDKs. Every error the gateway answers is an ApiError.
"""

from __future__ import annotations

from typing import Any

import orjson

# HTTP status -> the error "type" both SDK families understand.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    406: "invalid_request_error",
    409: "invalid_request_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
}


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.headers = headers or {}

    @property
    def type(self) -> str:
        return _TYPES.get(self.status, "api_error" if self.status >= 500 else "invalid_request_error")

    def body(self) -> dict[str, Any]:
        return {
            "type": "error",
            "error": {"type": self.type, "code": self.code, "message": self.message, "param": self.param},
        }

    def json(self) -> bytes:
        return orjson.dumps(self.body())


def bad_request(message: str, param: str | None = None, code: str = "invalid_request") -> ApiError:
    return ApiError(400, code, message, param=param)


def not_found(message: str, code: str = "not_found", param: str | None = None) -> ApiError:
    return ApiError(404, code, message, param=param)
