"""OpenAI Chat Completions, both ways: as callers send it (request in, chat.completion or chunk stream out) and as
an upstream speaks it (request out, chat.completion or chunk stream in).

request.py parses a caller's body; answer.py and stream.py render the answer for the caller; upstream.py renders a
request for a chat upstream (a chat caller's own body, or another format's request from canonical) and reads its
answer back.
"""

from handlers.inference.formats.chat.answer import FINISH_REASONS, render, usage
from handlers.inference.formats.chat.request import ADVISORY, INERT, parse
from handlers.inference.formats.chat.stream import StreamRenderer
from handlers.inference.formats.chat.upstream import (
    KIND,
    STREAM_END,
    STREAM_FIELDS,
    UpstreamReader,
    upstream_body,
    upstream_result,
)

__all__ = [
    "ADVISORY",
    "FINISH_REASONS",
    "INERT",
    "KIND",
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
