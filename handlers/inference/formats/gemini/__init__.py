"""Google's Gemini API (generateContent; the Gemini API's and Vertex AI's), both ways: as callers send it (request
in, GenerateContentResponse or its stream of chunks out) and as an upstream speaks it (request out, answer or
streamGenerateContent chunks in).

request.py parses a caller's body; answer.py and stream.py render the answer for the caller; upstream.py renders
the body a Gemini upstream gets; reader.py reads its answer back; vocabulary.py holds the words they share.
"""

from handlers.inference.formats.gemini.answer import render
from handlers.inference.formats.gemini.reader import UpstreamReader, upstream_result
from handlers.inference.formats.gemini.request import parse, parse_count
from handlers.inference.formats.gemini.stream import StreamRenderer
from handlers.inference.formats.gemini.upstream import upstream_body
from handlers.inference.formats.gemini.vocabulary import (
    ADVISORY,
    COUNTED_FIELDS,
    ERROR_STATUSES,
    FINISH_REASONS,
    INERT,
    KIND,
    METHODS,
    ROUTE,
    STREAM_END,
    STREAM_FIELDS,
    VOCABULARY,
    count_body,
    count_request,
    usage,
)

__all__ = [
    "ADVISORY",
    "COUNTED_FIELDS",
    "ERROR_STATUSES",
    "FINISH_REASONS",
    "INERT",
    "KIND",
    "METHODS",
    "ROUTE",
    "STREAM_END",
    "STREAM_FIELDS",
    "VOCABULARY",
    "StreamRenderer",
    "UpstreamReader",
    "count_body",
    "count_request",
    "parse",
    "parse_count",
    "render",
    "upstream_body",
    "upstream_result",
    "usage",
]
