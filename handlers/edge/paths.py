"""Which spec path a request path is (for metrics and the Allow header); the table is generated/paths.py."""

from __future__ import annotations

from pathlib import Path

from generated.paths import TABLE, PathInfo

SPEC = Path(__file__).resolve().parents[2] / "generated" / "openapi.json"  # the bundled spec, inside the package
_cache: dict[str, PathInfo | None] = {}
_CACHED_LENGTH = 512  # longer paths are matched each time: 4096 entries of this size stay near 2 MB


def match(path: str) -> PathInfo | None:
    """The spec path a request path is, or None. Cached: the same few paths come again and again."""
    if path in _cache:
        return _cache[path]
    found = next((info for info in TABLE if info.pattern.match(path)), None)
    if len(_cache) < 4096 and len(path) <= _CACHED_LENGTH:  # bounded: scanners send endless distinct paths
        _cache[path] = found
    return found
