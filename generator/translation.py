"""Lint the `x-translate` marks: how each request field of a wire format travels to an upstream of another format.

A schema (or an inline object) marked `x-translated: true` is a request a format parses into the canonical Request;
each of its properties then says what becomes of it, and the format's vocabulary reads the marks from the generated
models (handlers/inference/formats/fields.py), so no list of fields is kept by hand:

- `canonical`: read into the canonical Request (or owned by the gateway, like `stream`);
- `advisory`: a hint or a label another format may leave out (the answer stays what the caller asked for);
- `{inert: VALUE}`: with this value the field asks for nothing and goes anywhere; any other value is `extra`;
- `extra`: carried as written to an upstream of the same format (or by an upstream format with a word for it),
  refused by name anywhere else.
"""

from __future__ import annotations

from typing import Any

from generator.spec import Problem, SpecError

MARKS = frozenset({"canonical", "advisory", "extra"})


def check(doc: dict[str, Any]) -> None:
    """Every property of every `x-translated` object carries a valid `x-translate`; raises SpecError naming each."""
    problems: list[Problem] = []
    for name, schema in sorted(doc["components"]["schemas"].items()):
        _walk(schema, f"#/components/schemas/{name}", problems)
    if problems:
        raise SpecError(problems)


def _walk(node: Any, where: str, problems: list[Problem]) -> None:
    if isinstance(node, list):
        for i, item in enumerate(node):
            _walk(item, f"{where}/{i}", problems)
        return
    if not isinstance(node, dict):
        return
    if node.get("x-translated") is True:
        for prop, schema in (node.get("properties") or {}).items():
            mark = schema.get("x-translate") if isinstance(schema, dict) else None
            if not _valid(mark):
                problems.append(Problem(f"{where}/properties/{prop}", "needs x-translate: canonical, advisory, "
                                        f"extra or {{inert: VALUE}} (got {mark!r})"))
    for key, value in node.items():
        _walk(value, f"{where}/{key}", problems)


def _valid(mark: Any) -> bool:
    return (isinstance(mark, str) and mark in MARKS) or (isinstance(mark, dict) and set(mark) == {"inert"})
