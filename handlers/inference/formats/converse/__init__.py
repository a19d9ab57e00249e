"""Amazon Bedrock's Converse API, as an upstream speaks it (no caller does): request out, answer or ConverseStream
events in. Only the upstream half of a format (base.UpstreamFormat), in UPSTREAM_FORMATS, not FORMATS.

upstream.py renders the body a Bedrock upstream gets; reader.py reads its answer back; vocabulary.py holds the
words they share.
"""

from handlers.inference.formats.converse.reader import UpstreamReader, upstream_result
from handlers.inference.formats.converse.upstream import upstream_body
from handlers.inference.formats.converse.vocabulary import KIND, STREAM_END, STREAM_EXCEPTIONS, STREAM_FIELDS

__all__ = ["KIND", "STREAM_END", "STREAM_EXCEPTIONS", "STREAM_FIELDS", "UpstreamReader", "upstream_body",
           "upstream_result"]
