"""The spec's paths as patterns: which template a request path is (for metrics), and its methods (for Allow)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPEC = Path(__file__).resolve().parents[2] / "openapi.json"


@dataclass(frozen=True, slots=True)
class PathInfo:
    template: str
    pattern: re.Pattern[str]
    methods: str  # "GET, POST", as an Allow header lists them


def _table(spec: dict[str, Any]) -> list[PathInfo]:
    table = []
    for path, item in spec["paths"].items():
        ops = [op for op in item.values() if isinstance(op, dict)]
        slashed = {p["name"] for op in ops for p in op.get("parameters", []) if p.get("schema", {}).get("format") == "path"}
        pattern = re.escape(path)
        for name in re.findall(r"\{([^}]+)\}", path):
            pattern = pattern.replace(re.escape("{" + name + "}"), ".+" if name in slashed else "[^/]+")
        methods = sorted(m.upper() for m in item if m in ("get", "put", "post", "delete", "patch"))
        table.append(PathInfo(path, re.compile(f"^{pattern}$"), ", ".join(methods)))
    return table


TABLE = _table(json.loads(SPEC.read_text(encoding="utf-8")))
_cache: dict[str, PathInfo | None] = {}


def match(path: str) -> PathInfo | None:
    """The spec path a request path is, or None. Cached: the same few paths come again and again."""
    if path in _cache:
        return _cache[path]
    found = next((info for info in TABLE if info.pattern.match(path)), None)
    if len(_cache) < 4096:  # bounded: fuzzers and scanners send endless distinct paths
        _cache[path] = found
    return found
