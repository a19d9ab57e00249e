"""Anthropic Messages, both ways: as callers send it (request in, message or event stream out) and as an upstream
speaks it (request out, message or event stream in).

request.py parses a caller's body; answer.py and stream.py render the answer for the caller; upstream.py renders
the body an Anthropic upstream gets; reader.py reads its answer back; vocabulary.py holds the words they share.
"""

from handlers.inference.formats.messages.answer import render
from handlers.inference.formats.messages.reader import UpstreamReader, upstream_result
from handlers.inference.formats.messages.request import parse
from handlers.inference.formats.messages.stream import StreamRenderer
from handlers.inference.formats.messages.upstream import upstream_body
from handlers.inference.formats.messages.vocabulary import (
    ADVISORY,
    INERT,
    OUTPUT_TOOL_PREFIX,
    STOP_REASONS,
    STREAM_END,
    STREAM_FIELDS,
    VOCABULARY,
    usage,
)

__all__ = [
    "ADVISORY",
    "INERT",
    "OUTPUT_TOOL_PREFIX",
    "STOP_REASONS",
    "STREAM_END",
    "STREAM_FIELDS",
    "VOCABULARY",
    "StreamRenderer",
    "UpstreamReader",
    "parse",
    "render",
    "upstream_body",
    "upstream_result",
    "usage",
]
