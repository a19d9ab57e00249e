"""OpenAI Chat Completions, both ways: as callers send it (request in, chat.completion or chunk stream out) and as
an upstream speaks it (request out, chat.completion or chunk stream in).

request.py parses a caller's body; answer.py and stream.py render the answer for the caller; upstream.py renders
the body a chat upstream gets (a chat caller's own body, or another format's request from canonical); reader.py
reads its answer back; vocabulary.py holds the words they share.
"""

from handlers.inference.formats.chat.answer import render
from handlers.inference.formats.chat.reader import UpstreamReader, upstream_result
from handlers.inference.formats.chat.request import parse
from handlers.inference.formats.chat.stream import StreamRenderer
from handlers.inference.formats.chat.upstream import upstream_body
from handlers.inference.formats.chat.vocabulary import (
    ADVISORY,
    FINISH_REASONS,
    INERT,
    STREAM_END,
    STREAM_FIELDS,
    VOCABULARY,
    usage,
)

__all__ = [
    "ADVISORY",
    "FINISH_REASONS",
    "INERT",
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
