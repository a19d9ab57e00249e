"""Anthropic Messages, both ways: as callers send it (request in, message or event stream out) and as an upstream
speaks it (request out, message or event stream in).

request.py parses a caller's body; answer.py renders the answer (whole or streamed); upstream.py renders the body
an Anthropic upstream gets; reading.py reads its answer back; vocabulary.py holds the words they share.
"""

from __future__ import annotations

from typing import Any

from handlers.inference.formats.messages.answer import StreamRenderer, render
from handlers.inference.formats.messages.reading import UpstreamReader, upstream_result
from handlers.inference.formats.messages.request import parse
from handlers.inference.formats.messages.upstream import upstream_body
from handlers.inference.formats.messages.vocabulary import (
    ADVISORY,
    INERT,
    OUTPUT_TOOL_PREFIX,
    STOP_REASONS,
    usage,
)

STREAM_FIELDS: dict[str, Any] = {"stream": True}
STREAM_END = "message_stop"

__all__ = [
    "ADVISORY",
    "INERT",
    "OUTPUT_TOOL_PREFIX",
    "STOP_REASONS",
    "STREAM_END",
    "STREAM_FIELDS",
    "StreamRenderer",
    "UpstreamReader",
    "parse",
    "render",
    "upstream_body",
    "upstream_result",
    "usage",
]
