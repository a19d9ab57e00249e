"""Which spec path a request path is (for metrics, the Allow header and the shape of its errors); the table is
generated/paths.py."""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from generated.paths import TABLE, PathInfo
from handlers.errors import ApiError

SPEC = Path(__file__).resolve().parents[2] / "generated" / "openapi.json"  # the bundled spec, inside the package
_cache: dict[tuple[str, str], PathInfo | None] = {}
_CACHED_LENGTH = 512  # longer paths are matched each time: 4096 entries of this size stay near 2 MB
_GOOGLE = "/v1beta/"  # a path under it that is no spec path still answers in Google's shape: only Gemini lives there


def match(path: str, method: str = "") -> PathInfo | None:
    """The spec path a request path is, or None: the first whose template matches the path and serves `method`, else
    the first that matches the path (POST /v1/models/x:countTokens is Gemini's, GET /v1/models/x OpenAI's). Cached:
    the same few paths come again and again."""
    if (path, method) in _cache:
        return _cache[path, method]
    found = [info for info in TABLE if info.pattern.match(path)]
    chosen = next((info for info in found if method in info.methods.split(", ")), found[0] if found else None)
    if len(_cache) < 4096 and len(path) <= _CACHED_LENGTH:  # bounded: scanners send endless distinct paths
        _cache[path, method] = chosen
    return chosen


def allowed(path: str) -> str:
    """The methods of the spec path `path` is most specifically (the template with the most fixed text:
    /v1/models/{model}:countTokens rather than /v1/models/{modelId}), as an Allow header lists them; "" for none."""
    found = [info for info in TABLE if info.pattern.match(path)]
    best = max(found, key=lambda info: len(re.sub(r"\{[^}]*\}", "", info.template)), default=None)
    return best.methods if best is not None else ""


def error_json(err: ApiError, path: str, method: str = "") -> bytes:
    """`err`'s body in the shape its path answers errors in: Google's on the Gemini paths, ours everywhere else."""
    info = match(path, method)
    google = info.errors == "google" if info is not None else path.startswith(_GOOGLE)
    return orjson.dumps(err.google_body()) if google else err.json()
