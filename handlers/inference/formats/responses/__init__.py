"""OpenAI Responses, both ways: as callers send it (request in, response object or typed event stream out) and as an
upstream speaks it (request out, response object or typed event stream in).

request.py parses a caller's body, answer.py and stream.py render the answer for it; upstream.py renders a body for
a responses-kind upstream and reader.py reads its answer back.
"""

from handlers.inference.formats.responses.answer import STATUSES, render, response
from handlers.inference.formats.responses.reader import UpstreamReader, upstream_result
from handlers.inference.formats.responses.request import ADVISORY, INERT, parse
from handlers.inference.formats.responses.stream import StreamRenderer
from handlers.inference.formats.responses.upstream import STREAM_END, STREAM_FIELDS, upstream_body

__all__ = [
    "ADVISORY",
    "INERT",
    "STATUSES",
    "STREAM_END",
    "STREAM_FIELDS",
    "StreamRenderer",
    "UpstreamReader",
    "parse",
    "render",
    "response",
    "upstream_body",
    "upstream_result",
]
