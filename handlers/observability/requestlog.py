"""One structured JSON line per request, on stderr: ids, key id (never its secret), model, status, latencies,
tokens. Never the prompt or the answer."""

from __future__ import annotations

import contextvars
import logging
from typing import Any

import orjson

log = logging.getLogger("specway.requests")
_fields: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("specway_request_fields", default=None)


def begin(fields: dict[str, Any]) -> contextvars.Token[dict[str, Any] | None]:
    return _fields.set(fields)


def add(**fields: Any) -> None:
    """Fields the handlers learn about the request (decision id, key id, model, tokens ...)."""
    current = _fields.get()
    if current is not None:
        current.update(fields)


def end(token: contextvars.Token[dict[str, Any] | None]) -> None:
    fields = _fields.get()
    _fields.reset(token)
    if fields is not None and log.isEnabledFor(logging.INFO):
        log.info(orjson.dumps(fields).decode())


class JsonLines(logging.Formatter):
    """Every log record as one JSON object; a request line's fields sit at the top level."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"), "level": record.levelname.lower(),
                                "logger": record.name}
        message = record.getMessage()
        if record.name == log.name and message.startswith("{"):
            body.update(orjson.loads(message))
        else:
            body["message"] = message
        if record.exc_info:
            body["error"] = self.formatException(record.exc_info)
        return orjson.dumps(body).decode()
