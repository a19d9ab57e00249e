"""docs/configuration.md from the configuration file's JSON Schema."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

ENV_PREFIX = "SPECWAY"  # handlers/config.py reads SPECWAY_<KEY>__<KEY>... (one `__` per level)


@dataclass
class Section:
    title: str
    description: str
    rows: list[dict[str, str]] = field(default_factory=list)


def _ref(schema: dict[str, Any]) -> str | None:
    return schema["$ref"].rsplit("/", 1)[-1] if "$ref" in schema else None


def env_prefixes(schema: dict[str, Any]) -> dict[str, str]:
    """Each definition's environment-variable prefix, from where the top level reaches it: `SPECWAY_SERVER`,
    `SPECWAY_UPSTREAMS__<NAME>` for a map's entries. Entries of lists have none (set the whole list instead)."""
    found = {"": ENV_PREFIX}
    pending = [("", schema)]
    while pending:
        name, node = pending.pop()
        for key, sub in node.get("properties", {}).items():
            prefix = f"{found[name]}__{key.upper()}" if name else f"{ENV_PREFIX}_{key.upper()}"
            target = _ref(sub)
            if target is None and isinstance(sub.get("additionalProperties"), dict):
                target, prefix = _ref(sub["additionalProperties"]), f"{prefix}__<NAME>"
            if target is not None and target not in found:
                found[target] = prefix
                pending.append((target, schema["definitions"][target]))
    return found


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


def _row(key: str, schema: dict[str, Any], prefix: str | None) -> dict[str, str]:
    default = schema.get("default")
    bounds = [f"{word} {schema[k]}" for k, word in (("minimum", "≥"), ("maximum", "≤"), ("exclusiveMinimum", ">"))
              if k in schema]
    description = " ".join([schema.get("description", ""), *bounds]).strip().replace("\n", " ")
    env = "" if prefix is None else (f"{prefix}_{key.upper()}" if prefix == ENV_PREFIX else f"{prefix}__{key.upper()}")
    return {"key": key, "type": _type(schema), "default": "" if default is None else f"`{json.dumps(default)}`",
            "description": description, "env": f"`{env}`" if env else ""}


def sections(schema: dict[str, Any]) -> list[Section]:
    prefixes = env_prefixes(schema)
    top = Section("Top level", schema.get("description", ""))
    top.rows = [_row(k, v, ENV_PREFIX) for k, v in schema.get("properties", {}).items()]
    out = [top]
    for name, definition in schema.get("definitions", {}).items():
        section = Section(name, definition.get("description", ""))
        section.rows = [_row(k, v, prefixes.get(name)) for k, v in definition.get("properties", {}).items()]
        out.append(section)
    return out
