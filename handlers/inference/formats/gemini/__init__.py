"""Gemini's generateContent API (the Gemini API's and Vertex AI's), as an upstream speaks it: request out, answer
or streamGenerateContent chunks in.

upstream.py renders the body a Gemini upstream gets; reader.py reads its answer back; vocabulary.py holds the words
they share.
"""

from handlers.inference.formats.gemini.reader import UpstreamReader, upstream_result
from handlers.inference.formats.gemini.upstream import upstream_body
from handlers.inference.formats.gemini.vocabulary import (
    COUNTED_FIELDS,
    ERROR_STATUSES,
    KIND,
    STREAM_END,
    STREAM_FIELDS,
    count_request,
)

__all__ = ["COUNTED_FIELDS", "ERROR_STATUSES", "KIND", "STREAM_END", "STREAM_FIELDS", "UpstreamReader",
           "count_request", "upstream_body", "upstream_result"]
