"""Wire formats: one package per format, each speaking it both ways (as callers send it and as an upstream speaks
it) in the same modules (base.py says which), and the formats only upstreams speak (converse: Bedrock's Converse
API), which are only the upstream half. FORMATS and UPSTREAM_FORMATS, the registries every other module reads them
from, are filled here, before any module of a format can be used; common.py holds what the packages share."""

from handlers.inference.formats import chat, converse, gemini, messages, responses
from handlers.inference.formats.base import FORMATS, UPSTREAM_FORMATS

FORMATS.update({"chat": chat, "messages": messages, "responses": responses, "gemini": gemini})
UPSTREAM_FORMATS.update({**FORMATS, "converse": converse})
