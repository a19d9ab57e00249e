"""Google's Gemini API (generateContent), as callers send it: request in, GenerateContentResponse or its stream of
chunks out.

request.py parses a caller's body; answer.py and stream.py render the answer for the caller; vocabulary.py holds
the words both directions share. The upstream half (upstream.py: canonical into Gemini's body; reader.py: Gemini's
answer and stream back into canonical) completes the package as a WireFormat.
"""

from handlers.inference.formats.gemini.answer import render
from handlers.inference.formats.gemini.request import parse, parse_count
from handlers.inference.formats.gemini.stream import StreamRenderer
from handlers.inference.formats.gemini.vocabulary import (
    ADVISORY,
    FINISH_REASONS,
    INERT,
    METHODS,
    ROUTE,
    VOCABULARY,
    count_body,
    usage,
)

__all__ = [
    "ADVISORY",
    "FINISH_REASONS",
    "INERT",
    "METHODS",
    "ROUTE",
    "VOCABULARY",
    "StreamRenderer",
    "count_body",
    "parse",
    "parse_count",
    "render",
    "usage",
]
