"""Lint the upstream kinds: every `kind` the configuration's schema admits is registered by a class in
handlers/inference/upstreams/registry.py (read from the source, never imported), and every registered class has a
kind the schema admits."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from generator.spec import Problem, SpecError

REGISTRY = "handlers/inference/upstreams/registry.py"


def check(config_schema: dict[str, Any], upstreams: Path) -> None:
    enum = set(config_schema["definitions"]["UpstreamSettings"]["properties"]["kind"]["enum"])
    kinds = _class_kinds(upstreams)
    registered = {kinds[name] for name in _registered(upstreams / "registry.py") if name in kinds}
    problems = [Problem("specs/config.schema.yaml", f"upstream kind {kind!r} has no class in {REGISTRY}")
                for kind in sorted(enum - registered)]
    problems += [Problem(REGISTRY, f"registers kind {kind!r}, which the configuration's kind enum does not admit")
                 for kind in sorted(registered - enum)]
    if problems:
        raise SpecError(problems)


def _class_kinds(upstreams: Path) -> dict[str, str]:
    """Class name -> the `kind = "..."` it declares, in every module of the upstreams package."""
    found: dict[str, str] = {}
    for module in sorted(upstreams.glob("*.py")):
        for node in ast.parse(module.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if (isinstance(stmt, ast.Assign) and any(getattr(t, "id", None) == "kind" for t in stmt.targets)
                            and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)):
                        found[node.name] = stmt.value.value
    return found


def _registered(registry: Path) -> set[str]:
    """The class names the KINDS table is built from."""
    for node in ast.parse(registry.read_text(encoding="utf-8")).body:
        target = node.target if isinstance(node, ast.AnnAssign) else (node.targets[0] if isinstance(node, ast.Assign)
                                                                        else None)
        if isinstance(target, ast.Name) and target.id == "KINDS" and node.value is not None:
            return {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
    return set()
