"""The spec owns the error codes (ErrorDetail.code's x-codes in specs/schemas/errors.yaml): handlers raise them by
name from generated/errors.py, every code is documented on an operation, and every error answer carries a code its
operation declares for that status (tests/error_codes_support.py, wrapped around every in-process gateway)."""

from __future__ import annotations

import ast
import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from generated import errors as codes
from generated import models
from generator import __main__ as gen
from generator.spec import SpecError
from handlers.errors import ApiError, bad_request, not_found
from tests.conftest import Live
from tests.error_codes_support import TABLE, AuditErrors, problem

ROOT = Path(__file__).resolve().parent.parent

# Strings that are an upstream's own vocabulary (its error type or code) and happen to equal one of ours.
UPSTREAM_WORDS = {("handlers/inference/upstreams/failures.py", "request_too_large"),
                  ("handlers/inference/formats/responses/reader.py", "rate_limit_exceeded")}

# function -> the position of its code argument (ApiError's old form has the status there, then the code's name)
_CODE_ARG = {"ApiError": 0, "bad_request": 2, "not_found": 1}


def _called(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def spelled_out(source: str) -> dict[int, str]:
    """line -> what: each error code written as a string, and each raise in the old form ApiError(status, ...)."""
    found: dict[int, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in codes.BY_NAME:
            found.setdefault(node.lineno, f"the code {node.value!r} as a string")
        if not isinstance(node, ast.Call) or _called(node) not in _CODE_ARG:
            continue
        at = _CODE_ARG[_called(node)]
        for arg in [*node.args[at:at + 1], *(k.value for k in node.keywords if k.arg == "code")]:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, (int, str)):
                found[node.lineno] = f"{_called(node)}(...) with {arg.value!r} instead of a code's name"
    return found


def test_the_scanner_finds_what_it_looks_for() -> None:
    source = ('raise ApiError(404, "no_such_code", "m")\nraise bad_request("m", "p", "other_code")\n'
              'raise not_found("m", code="x_y")\nx = "model_not_found"\nraise ApiError(codes.MODEL_NOT_FOUND, "m")\n'
              'raise bad_request("m", "param")\n')
    assert sorted(spelled_out(source)) == [1, 2, 3, 4]


def test_no_error_code_is_spelled_out_in_handlers() -> None:
    offenders, upstream_words = [], set()
    for path in sorted((ROOT / "handlers").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        upstream_words |= {(f, w) for f, w in UPSTREAM_WORDS if f == rel and f'"{w}"' in text}
        words = {f"the code {w!r} as a string" for f, w in UPSTREAM_WORDS if f == rel}
        offenders += [f"{rel}:{line}: {what}" for line, what in sorted(spelled_out(text).items()) if what not in words]
    assert offenders == [], "raise by name (generated/errors.py): " + "\n".join(offenders)
    assert upstream_words == UPSTREAM_WORDS, "drop entries of UPSTREAM_WORDS that are gone"


def test_the_generated_table_is_the_spec_table() -> None:
    spec = json.loads((ROOT / "openapi.json").read_text())
    code = spec["components"]["schemas"]["ErrorDetail"]["properties"]["code"]
    assert code["enum"] == list(code["x-codes"]) == list(codes.BY_NAME)
    for name, entry in code["x-codes"].items():
        assert codes.BY_NAME[name] == codes.Code(name, entry["status"], entry["type"])
        assert getattr(codes, name.upper()) is codes.BY_NAME[name]


def test_every_code_is_documented_on_an_operation() -> None:
    spec = json.loads((ROOT / "openapi.json").read_text())
    listed = {name for item in spec["paths"].values() for op in item.values() for name in op.get("x-error-codes", [])}
    per_operation = {name for name, entry in TABLE.items() if entry.get("per_operation", True)}
    assert per_operation - listed == set()
    assert listed - per_operation == set()
    reference = (ROOT / "docs" / "api.md").read_text()
    assert all(f"| `{name}`" in reference for name in TABLE)


# --- ApiError ----------------------------------------------------------------------------------------------------


def test_an_error_raised_by_name_takes_its_status_and_type_from_the_table() -> None:
    err = ApiError(codes.MODEL_NOT_FOUND, "No model.", param="model", headers={"x": "1"})
    assert (err.status, err.code, err.type, err.param, err.headers) == (404, "model_not_found", "not_found_error",
                                                                       "model", {"x": "1"})
    assert err.body() == {"type": "error", "error": {"type": "not_found_error", "code": "model_not_found",
                                                     "message": "No model.", "param": "model"}}
    assert models.Error.model_validate_json(err.json()).error.code == "model_not_found"
    assert (bad_request("m").code, bad_request("m", code=codes.INVALID_JSON).code) == ("invalid_request", "invalid_json")
    assert not_found("m", codes.KEY_NOT_FOUND).status == 404


# --- the generator -----------------------------------------------------------------------------------------------


def _tree(tmp: Path) -> Path:
    for part in ("specs", "handlers/endpoints"):
        shutil.copytree(ROOT / part, tmp / part)
    return tmp


def _fails(root: Path) -> str:
    with pytest.raises(SpecError) as info:
        gen.render(root)
    return str(info.value)


def test_an_operation_naming_an_unknown_code_fails_naming_the_place(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    catalog = root / "specs/paths/catalog.yaml"
    catalog.write_text(catalog.read_text().replace("[*codes, model_not_found]", "[*codes, model_missing]", 1))
    out = _fails(root)
    assert "paths./v1/models/{modelId}.get.x-error-codes: unknown error code 'model_missing'" in out
    assert "x-codes.model_not_found: no operation lists it" not in out  # other operations still list it


def test_a_code_whose_status_the_operation_does_not_declare_fails(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    catalog = root / "specs/paths/catalog.yaml"
    catalog.write_text(catalog.read_text().replace("[*codes, decision_not_found]", "[*codes, decision_not_found, "
                                                   "upstream_timeout, not_found]", 1))
    out = _fails(root)
    assert "paths./v1/route/explain/{decisionId}.get.x-error-codes: 'upstream_timeout' is a 504" in out
    assert "'not_found' is answered for no operation" in out


def test_a_code_no_operation_lists_and_a_malformed_entry_fail(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    errors = root / "specs/schemas/errors.yaml"
    doc: dict[str, Any] = yaml.safe_load(errors.read_text())
    table = doc["ErrorDetail"]["properties"]["code"]["x-codes"]
    table["never_listed"] = {"status": 409, "type": "invalid_request_error", "description": "Nobody answers it."}
    table["broken"] = {"status": 200, "description": " "}
    errors.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = _fails(root)
    assert "ErrorDetail.properties.code.x-codes.never_listed: no operation lists it" in out
    assert "x-codes.broken: status must be an HTTP error status" in out
    assert "x-codes.broken: type must be an error type" in out
    assert "x-codes.broken: description must say what the code means" in out


# --- answers -------------------------------------------------------------------------------------------------------


def _error(code: str, status: int) -> bytes:
    return json.dumps({"type": "error", "error": {"type": "x", "code": code, "message": "m", "param": None}}).encode()


def test_an_answer_is_checked_against_its_operation() -> None:
    assert problem("GET", "/v1/models/acme/fast", 404, _error("model_not_found", 404)) is None
    assert problem("GET", "/nowhere", 404, _error("not_found", 404)) is None
    assert problem("PUT", "/v1/key", 405, _error("method_not_allowed", 405)) is None
    wrong_op = problem("GET", "/v1/key", 404, _error("model_not_found", 404))
    assert wrong_op is not None and "GET /v1/key: 404 'model_not_found' is not declared" in wrong_op
    wrong_status = problem("GET", "/v1/models/x", 400, _error("model_not_found", 400))
    assert wrong_status is not None and "400 'model_not_found'" in wrong_status
    assert "without the error shape" in (problem("GET", "/v1/key", 500, b"Internal Server Error") or "")


def test_the_audit_notes_an_undeclared_code_and_passes_the_answer_through() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": _error("decision_not_found", 404)[:10], "more_body": True})
        await send({"type": "http.response.body", "body": _error("decision_not_found", 404)[10:]})

    async def call(path: str) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=audit), base_url="http://gw") as client:
            return await client.get(path)

    audit = AuditErrors(app)
    assert asyncio.run(call("/v1/route/explain/abc")).json()["error"]["code"] == "decision_not_found"
    assert audit.problems == []
    asyncio.run(call("/v1/key"))
    assert audit.checked == 2 and len(audit.problems) == 1 and "GET /v1/key" in audit.problems[0]


def test_the_audit_is_around_every_in_process_gateway(live: Live) -> None:
    with httpx.Client(base_url=live.url, headers=live.headers) as client:
        assert client.get("/v1/models/no-such-model").json()["error"]["code"] == "model_not_found"
        assert client.get("/v1/route/explain/nothing").json()["error"]["code"] == "decision_not_found"
        assert client.get("/v1/key", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert client.post("/v1/keys", content=b"{").json()["error"]["code"] == "invalid_json"
    assert live.audit.checked == 4 and live.audit.problems == []
