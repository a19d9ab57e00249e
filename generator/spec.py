"""Load specs/ and bundle it into one OpenAPI document; lint it.

specs/openapi.yaml is the root. Every specs/paths/*.yaml maps URL paths to path items (top-level keys
starting with "x-" are shared fragments for YAML anchors, not paths). Every specs/schemas/*.yaml maps
schema names to schemas. Files are read in sorted order so the bundle is byte-for-byte repeatable.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


@dataclass(frozen=True)
class Problem:
    where: str  # a file, a spec path, or a handler module
    detail: str
    level: str = "error"

    def __str__(self) -> str:
        return f"{self.level}: {self.where}: {self.detail}"


class SpecError(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


def load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SpecError([Problem(f"specs/{path.parent.name}/{path.name}", f"not valid YAML: {exc}")]) from None


def _merge(target: dict[str, Any], path: Path, what: str, problems: list[Problem], skip_x: bool) -> None:
    doc = load_yaml(path) or {}
    if not isinstance(doc, dict):
        problems.append(Problem(f"specs/{path.parent.name}/{path.name}", f"must map {what} names to definitions"))
        return
    for name, value in doc.items():
        if skip_x and str(name).startswith("x-"):
            continue
        if name in target:
            problems.append(Problem(f"specs/{path.parent.name}/{path.name}", f"{what} {name!r} is defined twice"))
        target[name] = value


def bundle(specs: Path) -> dict[str, Any]:
    """The whole OpenAPI document, built from specs/."""
    problems: list[Problem] = []
    root = load_yaml(specs / "openapi.yaml")
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for f in sorted((specs / "paths").glob("*.yaml")):
        _merge(paths, f, "path", problems, skip_x=True)
    for f in sorted((specs / "schemas").glob("*.yaml")):
        _merge(schemas, f, "schema", problems, skip_x=False)
    if problems:
        raise SpecError(problems)
    doc = {k: v for k, v in root.items() if k != "components"}
    doc["paths"] = paths
    doc["components"] = {"schemas": schemas, **root.get("components", {})}
    _expand_error_codes(doc)
    return doc


# Where the error codes are listed: ErrorDetail.code's x-codes (code -> status, type, description).
CODES_AT = ("ErrorDetail", "properties", "code")
CODES_WHERE = "components.schemas.ErrorDetail.properties.code.x-codes"


def _code_table(doc: dict[str, Any]) -> dict[str, Any]:
    node: Any = doc["components"]["schemas"]
    for part in CODES_AT:
        node = node.get(part, {}) if isinstance(node, dict) else {}
    table = node.get("x-codes") if isinstance(node, dict) else None
    return table if isinstance(table, dict) else {}


def _flat(items: Any) -> list[Any]:
    """An operation's x-error-codes, whose items may be lists (YAML aliases of shared lists), as one list."""
    if not isinstance(items, list):
        return [items]
    return [leaf for item in items for leaf in _flat(item)]


def _expand_error_codes(doc: dict[str, Any]) -> None:
    """Write what the code table implies: ErrorDetail.code's enum, and each operation's x-error-codes as one flat
    list in the table's order (unknown names kept at the end, for error_codes() to name)."""
    table = _code_table(doc)
    if not table:
        return
    code: dict[str, Any] = doc["components"]["schemas"][CODES_AT[0]]["properties"][CODES_AT[2]]
    code["enum"] = list(table)
    order = {name: i for i, name in enumerate(table)}
    for item in doc["paths"].values():
        for method in METHODS:
            op = item.get(method) if isinstance(item, dict) else None
            if isinstance(op, dict) and "x-error-codes" in op:
                names = list(dict.fromkeys(n if isinstance(n, str) else repr(n) for n in _flat(op["x-error-codes"])))
                op["x-error-codes"] = sorted(names, key=lambda n: order.get(n, len(order)))


@dataclass(frozen=True)
class Param:
    name: str  # as in the spec
    arg: str  # the Python argument Connexion passes (pythonic_params)
    location: str
    required: bool


@dataclass(frozen=True)
class Operation:
    id: str
    method: str
    path: str
    handler: str  # module name in handlers/endpoints
    scope: str | None
    body_model: str | None
    params: tuple[Param, ...] = field(default_factory=tuple)
    # Where the relay key may be, in order, when the operation's own `security` says so: ("bearer", header) for an
    # http bearer scheme, ("header", name) or ("query", name) for an apiKey scheme. Empty: the root's (glue's default).
    credentials: tuple[tuple[str, str], ...] = ()
    body_required: bool = True  # requestBody.required: false takes an empty body as the model's defaults


def _pythonic(name: str) -> str:
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower().replace("-", "_")


def _body_model(op: dict[str, Any]) -> str | None:
    content = (op.get("requestBody") or {}).get("content", {})
    schema = (content.get("application/json") or {}).get("schema") or {}
    ref = schema.get("$ref", "")
    return ref.rsplit("/", 1)[-1] or None


def _credentials(doc: dict[str, Any], op: dict[str, Any], where: str, problems: list[Problem]
                 ) -> tuple[tuple[str, str], ...]:
    """The places an operation's own `security` reads the relay key from, in its order (none: the root's)."""
    schemes = doc.get("components", {}).get("securitySchemes", {})
    out: list[tuple[str, str]] = []
    for requirement in op.get("security") or ():
        for name in requirement:
            scheme = schemes.get(name)
            if not isinstance(scheme, dict):
                problems.append(Problem(where, f"security names {name!r}, which securitySchemes does not define"))
            elif scheme.get("type") == "http" and scheme.get("scheme") == "bearer":
                out.append(("bearer", "authorization"))
            elif scheme.get("type") == "apiKey" and scheme.get("in") in ("header", "query"):
                out.append((scheme["in"], str(scheme["name"]).lower() if scheme["in"] == "header" else scheme["name"]))
            else:
                problems.append(Problem(where, f"security scheme {name!r} is neither http bearer nor a header or query "
                                        "apiKey"))
    return tuple(out)


def operations(doc: dict[str, Any]) -> list[Operation]:
    """Every operation, sorted by operationId; raises SpecError listing every problem found."""
    problems: list[Problem] = []
    ops: dict[str, Operation] = {}
    for path, item in doc["paths"].items():
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            where = f"paths.{path}.{method}"
            op_id = op.get("operationId")
            if not op_id:
                problems.append(Problem(where, "has no operationId"))
                continue
            if op_id in ops:
                problems.append(Problem(where, f"operationId {op_id!r} is already used by {ops[op_id].path}"))
                continue
            if not op.get("x-handler"):
                problems.append(Problem(where, "has no x-handler (the module in handlers/endpoints that serves it)"))
                continue
            params = tuple(
                Param(p["name"], _pythonic(p["name"]), p["in"], bool(p.get("required")))
                for p in op.get("parameters", [])
            )
            ops[op_id] = Operation(
                op_id, method, path, op["x-handler"], op.get("x-scope"), _body_model(op), params,
                _credentials(doc, op, where, problems),
                body_required=bool((op.get("requestBody") or {}).get("required", False)),
            )
    if problems:
        raise SpecError(problems)
    return [ops[k] for k in sorted(ops)]


@dataclass(frozen=True)
class Scopes:
    known: tuple[str, ...]  # the Scope schema's enum
    default: tuple[str, ...]  # what a new key gets when it names none: the default of KeyCreate.scopes


def scopes(doc: dict[str, Any], ops: list[Operation]) -> Scopes:
    """The relay-key scopes; every default and every operation's x-scope must be one of them."""
    schemas = doc["components"]["schemas"]
    known = tuple(schemas.get("Scope", {}).get("enum", ()))
    default = tuple(schemas.get("KeyCreate", {}).get("properties", {}).get("scopes", {}).get("default", ()))
    problems = [] if known else [Problem("components.schemas.Scope", "must be the enum of relay-key scopes")]
    problems += [Problem("components.schemas.KeyCreate.scopes", f"default {s!r} is not a Scope")
                 for s in default if s not in known]
    problems += [Problem(f"paths.{op.path}.{op.method}", f"x-scope {op.scope!r} is not a Scope")
                 for op in ops if op.scope and op.scope not in known]
    if problems:
        raise SpecError(problems)
    return Scopes(known, default)


ERROR_SHAPES = ("specway", "google")  # an operation's x-error-shape: ours (the default), or Google's (GeminiError)


@dataclass(frozen=True)
class PathPattern:
    template: str  # as in the spec: /v1/keys/{keyId}
    regex: str  # what a request path for it matches
    methods: str  # "GET, POST", as an Allow header lists them
    errors: str = "specway"  # the shape of its errors (ERROR_SHAPES)


def path_patterns(doc: dict[str, Any]) -> list[PathPattern]:
    """Every spec path as a pattern, in the spec's order. A parameter of `format: path` may span slashes, or be
    empty, as Starlette's path convertor (which routes the request) matches it."""
    out = []
    problems: list[Problem] = []
    for path, item in doc["paths"].items():
        ops = [item[m] for m in METHODS if m in item]
        shapes = {op.get("x-error-shape", "specway") for op in ops}
        if len(shapes) != 1 or not shapes <= set(ERROR_SHAPES):
            problems.append(Problem(f"paths.{path}", f"x-error-shape must be one of {', '.join(ERROR_SHAPES)}, the "
                                    f"same for every operation of a path (got {', '.join(sorted(map(str, shapes)))})"))
        slashed = {p["name"] for op in ops for p in op.get("parameters", []) if p.get("schema", {}).get("format") == "path"}
        regex = re.escape(path)
        for name in re.findall(r"\{([^}]+)\}", path):
            regex = regex.replace(re.escape("{" + name + "}"), ".*" if name in slashed else "[^/]+")
        methods = sorted(m.upper() for m in item if m in ("get", "put", "post", "delete", "patch"))
        out.append(PathPattern(path, f"^{regex}$", ", ".join(methods), next(iter(shapes))))
    if problems:
        raise SpecError(problems)
    return out


def _public_functions(module: Path) -> set[str]:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    return {
        n.name
        for n in tree.body
        if isinstance(n, (ast.AsyncFunctionDef, ast.FunctionDef)) and not n.name.startswith("_")
    }


def check_handlers(ops: list[Operation], endpoints: Path) -> None:
    """Every operation has its handler function, and every handler function has its operation."""
    problems: list[Problem] = []
    wanted: dict[str, set[str]] = {}
    for op in ops:
        wanted.setdefault(op.handler, set()).add(op.id)
    modules = {p.stem: p for p in endpoints.glob("*.py") if p.stem != "__init__"}
    for name, ids in sorted(wanted.items()):
        module = modules.get(name)
        if module is None:
            problems.append(Problem(f"handlers/endpoints/{name}.py", f"missing; it must define {', '.join(sorted(ids))}"))
            continue
        defined = _public_functions(module)
        for op_id in sorted(ids - defined):
            problems.append(Problem(f"handlers/endpoints/{name}.py", f"has no function {op_id} for operation {op_id}"))
    for name, module in sorted(modules.items()):
        for fn in sorted(_public_functions(module) - wanted.get(name, set())):
            problems.append(Problem(f"handlers/endpoints/{name}.py", f"function {fn} serves no operation in the spec"))
    if problems:
        raise SpecError(problems)


@dataclass(frozen=True)
class ErrorCode:
    name: str
    status: int
    type: str  # the error type both SDK families read (ErrorDetail.type)
    description: str
    per_operation: bool  # False: answered before any operation is known, or to nobody; no operation lists it


def _error_code(name: Any, entry: Any, problems: list[Problem]) -> ErrorCode | None:
    where = f"{CODES_WHERE}.{name}"
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*", name):
        problems.append(Problem(where, "a code is a snake_case name"))
        return None
    if not isinstance(entry, dict):
        problems.append(Problem(where, "must map status, type and description"))
        return None
    status, kind, text = entry.get("status"), entry.get("type"), entry.get("description")
    unknown = sorted(set(entry) - {"status", "type", "description", "per_operation"})
    bad = [f"unknown field {k!r}" for k in unknown]
    bad += [] if isinstance(status, int) and 400 <= status <= 599 else ["status must be an HTTP error status (400-599)"]
    bad += [] if isinstance(kind, str) and kind else ["type must be an error type (e.g. invalid_request_error)"]
    bad += [] if isinstance(text, str) and text.strip() else ["description must say what the code means"]
    bad += [] if isinstance(entry.get("per_operation", True), bool) else ["per_operation must be true or false"]
    problems += [Problem(where, b) for b in bad]
    if bad:
        return None
    return ErrorCode(name, status, kind, " ".join(text.split()), entry.get("per_operation", True))


def error_codes(doc: dict[str, Any]) -> list[ErrorCode]:
    """The code table, in its order; raises SpecError unless every entry is well formed, every operation lists only
    known codes with a status it declares, and every code (per_operation) is listed by some operation."""
    table = _code_table(doc)
    problems = [] if table else [Problem(CODES_WHERE, "must map every error code to its status, type and description")]
    codes = {c.name: c for name, entry in table.items() if (c := _error_code(name, entry, problems))}
    listed: set[str] = set()
    for path, item in doc["paths"].items():
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            where = f"paths.{path}.{method}.x-error-codes"
            declared = {str(s) for s in op.get("responses", {})}
            for name in op.get("x-error-codes", []):
                code = codes.get(name)
                listed.add(name)
                if code is None:
                    known = name in table  # a malformed entry, already named above
                    problems += [] if known else [Problem(where, f"unknown error code {name!r} (not in {CODES_WHERE})")]
                elif not code.per_operation:
                    problems.append(Problem(where, f"{name!r} is answered for no operation (per_operation: false)"))
                elif str(code.status) not in declared:
                    problems.append(Problem(where, f"{name!r} is a {code.status}, which the operation does not declare"))
    problems += [Problem(f"{CODES_WHERE}.{c.name}", "no operation lists it in x-error-codes")
                 for c in codes.values() if c.per_operation and c.name not in listed]
    if problems:
        raise SpecError(problems)
    return list(codes.values())
