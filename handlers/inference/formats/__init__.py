"""Wire formats: one package per format, each speaking it both ways (as callers send it and as an upstream speaks
it) in the same modules (base.py says which). FORMATS, the registry every other module reads them from, is filled
here, before any module of a format can be used; common.py holds what the packages share."""

from handlers.inference.formats import chat, messages, responses
from handlers.inference.formats.base import FORMATS

FORMATS.update({"chat": chat, "messages": messages, "responses": responses})
