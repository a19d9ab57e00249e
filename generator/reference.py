"""docs/api.md, the API reference, from the bundled OpenAPI document: every operation with its scope, parameters,
body, statuses and the error codes it answers (x-error-codes), then every error code, then every schema with its
fields."""

from __future__ import annotations

from typing import Any

from generator.spec import ErrorCode

_METHODS = ("get", "post", "put", "patch", "delete")


def _anchor(name: str) -> str:
    return name.lower()


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def _type(schema: dict[str, Any]) -> str:
    if "x-codes" in schema:
        return "[error code](#error-codes)"
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    for combo, word in (("oneOf", " or "), ("anyOf", " or "), ("allOf", " and ")):
        if combo in schema:
            return word.join(_type(s) for s in schema[combo])
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of {_type(schema['additionalProperties'])}"
    fmt = f" ({schema['format']})" if "format" in schema else ""
    return f"{kind}{fmt}" + (" or null" if schema.get("nullable") else "")


def _resolve(doc: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        _, _, kind, name = node["$ref"].split("/")
        node = doc["components"][kind][name]
    return node


def _fields(schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", []))
    return [f"| `{name}` | {_type(prop)} | {'yes' if name in required else ''} | {_one_line(prop.get('description'))} |"
            for name, prop in schema.get("properties", {}).items()]


def _operation(doc: dict[str, Any], codes: dict[str, ErrorCode], path: str, method: str, op: dict[str, Any]) -> list[str]:
    out = [f"### `{method.upper()} {path}`", "", _one_line(op.get("summary")), ""]
    if op.get("description"):
        out += [_one_line(op["description"]), ""]
    scope = op.get("x-scope")
    out += [f"Scope: `{scope}`." if scope else "No relay key needed.", ""]
    params = [_resolve(doc, p) for p in op.get("parameters", [])]
    if params:
        out += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        out += [f"| `{p['name']}` | {p['in']} | {_type(p.get('schema', {}))} | {'yes' if p.get('required') else ''} "
                f"| {_one_line(p.get('description'))} |" for p in params]
        out.append("")
    body = op.get("requestBody")
    if body:
        body = _resolve(doc, body)
        for media, content in body.get("content", {}).items():
            out += [f"Body ({media}): {_type(content.get('schema', {}))}.", ""]
    out += ["| status | description | body | error codes |", "|---|---|---|---|"]
    answered = [codes[name] for name in op.get("x-error-codes", [])]
    for status, response in sorted(op.get("responses", {}).items()):
        response = _resolve(doc, response)
        schemas = [_type(c["schema"]) for c in response.get("content", {}).values() if "schema" in c]
        named = ", ".join(f"`{c.name}`" for c in answered if str(c.status) == status)
        out.append(f"| {status} | {_one_line(response.get('description'))} | {', '.join(dict.fromkeys(schemas))} "
                   f"| {named} |")
    out.append("")
    return out


_CODES_INTRO = ("Every error answer is `{\"type\":\"error\",\"error\":{\"type\",\"code\",\"message\",\"param\"}}`; its `code` is "
                "one of these, and each operation above lists the ones it answers. Those marked * are answered for no "
                "operation (an unknown path or method, unreadable HTTP, a client that has left).")


def _error_codes(codes: list[ErrorCode]) -> list[str]:
    out = ["## Error codes", "", _CODES_INTRO, "", "| code | status | type | meaning |", "|---|---|---|---|"]
    out += [f"| `{c.name}`{'' if c.per_operation else ' *'} | {c.status} | `{c.type}` | {_one_line(c.description)} |"
            for c in codes]
    return [*out, ""]


def api_md(doc: dict[str, Any], codes: list[ErrorCode], header: str) -> str:
    info = doc.get("info", {})
    out = [f"<!-- {header} -->", f"# {info.get('title', 'API')} API reference ({info.get('version', '')})", "",
           (info.get("description") or "").strip(), "",
           "This page is generated from `specs/` with the bundled `openapi.json`; the spec is the authority.", ""]
    ops = [(path, method, item[method]) for path, item in doc.get("paths", {}).items()
           for method in _METHODS if method in item]
    by_name = {c.name: c for c in codes}
    for tag in doc.get("tags", []):
        tagged = [o for o in ops if tag["name"] in o[2].get("tags", [])]
        if not tagged:
            continue
        out += [f"## {tag['name'].capitalize()}", "", _one_line(tag.get("description")), ""]
        for path, method, op in tagged:
            out += _operation(doc, by_name, path, method, op)
    out += _error_codes(codes)
    out += ["## Schemas", ""]
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        out += [f"### {name}", ""]
        if schema.get("description"):
            out += [_one_line(schema["description"]), ""]
        parts = [_resolve(doc, s) for s in schema.get("allOf", [])] or [schema]
        rows = [row for part in parts for row in _fields(part)]
        if rows:
            out += ["| field | type | required | description |", "|---|---|---|---|", *rows, ""]
        else:
            out += [f"{_type(schema)}.", ""]
    return "\n".join(out).rstrip() + "\n"
