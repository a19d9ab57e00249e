"""docs/configuration.md from the configuration file's JSON Schema."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Section:
    title: str
    description: str
    rows: list[dict[str, str]] = field(default_factory=list)


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return f"[{schema['$ref'].rsplit('/', 1)[-1]}](#{schema['$ref'].rsplit('/', 1)[-1].lower()})"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    kinds = " or ".join(kind) if isinstance(kind, list) else kind
    if kind == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of name to {_type(schema['additionalProperties'])}"
    return kinds


def _row(key: str, schema: dict[str, Any]) -> dict[str, str]:
    default = schema.get("default")
    bounds = [f"{word} {schema[k]}" for k, word in (("minimum", "≥"), ("maximum", "≤"), ("exclusiveMinimum", ">"))
              if k in schema]
    description = " ".join([schema.get("description", ""), *bounds]).strip().replace("\n", " ")
    return {"key": key, "type": _type(schema), "default": "" if default is None else f"`{json.dumps(default)}`",
            "description": description}


def sections(schema: dict[str, Any]) -> list[Section]:
    top = Section("Top level", schema.get("description", ""))
    top.rows = [_row(k, v) for k, v in schema.get("properties", {}).items()]
    out = [top]
    for name, definition in schema.get("definitions", {}).items():
        section = Section(name, definition.get("description", ""))
        section.rows = [_row(k, v) for k, v in definition.get("properties", {}).items()]
        out.append(section)
    return out
