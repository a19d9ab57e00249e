"""Pins the part of OpenAI's published OpenAPI document (github.com/openai/openai-openapi, openapi.json) that
Specway's Responses answers and events must satisfy: the `Response` schema and the `ResponseStreamEvent` union, with
every schema they reference. Not product code.

    python -m tests.openai_spec.pin OPENAPI_JSON COMMIT   # rewrites tests/openai_spec/responses.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOTS = ("Response", "ResponseStreamEvent")
PINNED = Path(__file__).with_name("responses.json")


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                found.add(value.rsplit("/", 1)[-1])
            else:
                _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)


def closure(schemas: dict[str, Any], roots: tuple[str, ...] = ROOTS) -> dict[str, Any]:
    """The named schemas and every schema they reach through $ref, by name."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        found: set[str] = set()
        _refs(schemas[name], found)
        todo.extend(found - seen)
    return {name: schemas[name] for name in sorted(seen)}


def main(source: str, commit: str) -> None:
    document = json.loads(Path(source).read_text())
    pinned = {
        "source": "https://github.com/openai/openai-openapi/blob/" + commit + "/openapi.json",
        "commit": commit,
        "openapi_version": document["info"]["version"],
        "components": {"schemas": closure(document["components"]["schemas"])},
    }
    PINNED.write_text(json.dumps(pinned, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
