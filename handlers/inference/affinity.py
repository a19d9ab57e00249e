"""Session affinity: the requests of one conversation go to the same model and deployment while those are healthy,
so that prompt caches and thinking signatures keep working, and so that a route preview of a request picks what the
request itself then picks.

A request's session is, the first that applies: the caller's `x-specway-session` header, its `prompt_cache_key`
(Chat Completions, Responses), Anthropic's `metadata.user_id`, else the conversation itself: a hash of the key, the
system prompt and the first message, which every turn of a conversation repeats. Weighted choices are made by
rendezvous hashing of the session (`rank`): the same session always ranks the same names the same way, and across
sessions each name comes first as often as its weight says. A policy without affinity ranks by the request itself
(`request_of`: a hash of the key and the whole body), so every request is its own session, and a preview of the
same body still picks what the request then picks.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from handlers.inference.canonical import Request
from handlers.inference.formats import FORMATS

# Where a session came from: the x-specway-session header, the caller's format's session field (its
# VOCABULARY.session_field: prompt_cache_key, metadata.user_id), "conversation" or "request".
Source = str
_MAX = float(2**64)


@dataclass(frozen=True, slots=True)
class Session:
    source: Source  # where the session came from (explain says it, never the value)
    digest: bytes  # a hash of the key and the session's value: sessions of different keys never meet


def session_of(key_id: str, req: Request, header: str | None = None) -> Session:
    """The session `req` belongs to (see the module's docstring)."""
    field = FORMATS[req.format].VOCABULARY.session_field
    for source, value in (("x-specway-session", header), (field, _dig(req.body, field) if field else None)):
        if source and isinstance(value, str) and value:
            return Session(source, _digest(key_id, source, value))
    first = req.messages[0].text() if req.messages else ""
    return Session("conversation", _digest(key_id, "conversation", req.system or "", first))


def _dig(body: dict[str, Any], field: str) -> Any:
    value: Any = body
    for name in field.split("."):
        value = value.get(name) if isinstance(value, dict) else None
    return value


def request_of(key_id: str, req: Request) -> Session:
    """The request as a session of its own: a hash of the key and the whole body, as sent."""
    body = orjson.dumps(req.body, option=orjson.OPT_SORT_KEYS, default=str).decode()
    return Session("request", _digest(key_id, "request", body))


def _digest(*parts: str) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.digest()


def rank(session: Session | None, names: Sequence[str], weights: Sequence[float]) -> list[int]:
    """The indices of `names` in the order `session` prefers them: weighted rendezvous hashing, so each name is
    first for a share of sessions equal to its share of the weights. A weight of 0 (or less) comes last. Without a
    session (a request that has none, embeddings), a fresh random order by the same weights."""
    def score(i: int) -> float:
        if weights[i] <= 0:
            return math.inf
        if session is None:
            u = random.random() or 0.5
        else:
            h = hashlib.blake2b(names[i].encode(), digest_size=8, key=session.digest).digest()
            u = (int.from_bytes(h, "big") + 0.5) / _MAX  # in (0, 1)
        return -math.log(u) / weights[i]  # the first of independent exponential clocks, rate = weight

    return sorted(range(len(names)), key=lambda i: (score(i), i))
