"""OpenAI Responses, both ways: as callers send it (request in, response object or typed event stream out) and as an
upstream speaks it (request out, response object or typed event stream in).

request.py parses a caller's body; answer.py and stream.py render the answer for the caller; upstream.py renders
the body a responses upstream gets; reader.py reads its answer back; vocabulary.py holds the words they share.
"""

from handlers.inference.formats.responses.answer import render, response
from handlers.inference.formats.responses.reader import UpstreamReader, upstream_result
from handlers.inference.formats.responses.request import parse
from handlers.inference.formats.responses.stream import StreamRenderer
from handlers.inference.formats.responses.upstream import upstream_body
from handlers.inference.formats.responses.vocabulary import (
    ADVISORY,
    INERT,
    STATUSES,
    STREAM_END,
    STREAM_FIELDS,
    VOCABULARY,
)

__all__ = [
    "ADVISORY",
    "INERT",
    "STATUSES",
    "STREAM_END",
    "STREAM_FIELDS",
    "VOCABULARY",
    "StreamRenderer",
    "UpstreamReader",
    "parse",
    "render",
    "response",
    "upstream_body",
    "upstream_result",
]
