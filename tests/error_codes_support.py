"""Every error answer checked against the spec: its code must be one its operation lists (`x-error-codes`) with
that status, or one answered for no operation (`per_operation: false`). This is what keeps the per-operation lists
true: `AuditErrors` wraps the app of every in-process gateway (tests/conftest.py `serve`), so the Schemathesis run
and every test through it check each error they provoke; tests against a spawned gateway call `problem()`."""

from __future__ import annotations

import json
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from handlers.edge import paths

SPEC: dict[str, Any] = json.loads(paths.SPEC.read_bytes())
TABLE: dict[str, dict[str, Any]] = SPEC["components"]["schemas"]["ErrorDetail"]["properties"]["code"]["x-codes"]
UNROUTED = {name: entry["status"] for name, entry in TABLE.items() if entry.get("per_operation") is False}


def declared(method: str, path: str) -> tuple[str, dict[str, int]]:
    """Where a request lands (its operation, or none) and the codes it may answer there, with their statuses."""
    info = paths.match(path, method)
    op = SPEC["paths"][info.template].get(method.lower()) if info else None
    if op is None:
        return f"{method} {path} (no operation)", dict(UNROUTED)
    return f"{method} {info.template}", {**UNROUTED, **{name: TABLE[name]["status"] for name in op["x-error-codes"]}}


def _code(error: dict[str, Any], status: int) -> str:
    """The gateway's code of an error in our shape, or in Google's (the status in `code`, ours in an ErrorInfo's
    reason)."""
    if error["code"] != status:
        return str(error["code"])
    return next(d["reason"] for d in error["details"] if d.get("@type", "").endswith("google.rpc.ErrorInfo"))


def problem(method: str, path: str, status: int, body: bytes) -> str | None:
    """What is wrong with an error answer, or None when its code is declared for that operation and status."""
    where, codes = declared(method, path)
    try:
        code = _code(orjson.loads(body)["error"], status)
    except (orjson.JSONDecodeError, KeyError, TypeError, StopIteration):
        return f"{where}: a {status} without the error shape: {body[:200]!r}"
    if codes.get(code) != status:
        listed = sorted(name for name, s in codes.items() if s == status)
        return f"{where}: {status} {code!r} is not declared for it (its {status} codes: {listed})"
    return None


class AuditErrors:
    """ASGI: passes everything through unchanged, and notes each error answer whose code the spec does not declare
    for its operation and status."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.problems: list[str] = []
        self.checked = 0  # error answers seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0
        body: list[bytes] = []

        async def watched(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and status >= 400:
                body.append(message.get("body", b""))
                if not message.get("more_body", False):
                    self.checked += 1
                    found = problem(scope["method"], scope["path"], status, b"".join(body))
                    if found:
                        self.problems.append(found)
            await send(message)

        await self.app(scope, receive, watched)
