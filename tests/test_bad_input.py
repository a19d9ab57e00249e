"""Bad input against a real `specway serve`: every case gets a 4xx in the one error shape, or a correct 2xx.

Never a 5xx, never a redirect, never a hang. Requests are written byte by byte on a socket (no client library
normalizes a path, fixes an encoding or adds a header), to a spawned gateway whose upstreams are the fake upstream (an
OpenAI-kind one, so that every accepted number is also encoded for an upstream). The last test replays the suite and
reads the gateway's RSS from /proc between rounds.
"""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pydantic
import pytest
import yaml

from generated import models
from generated.paths import TABLE
from handlers.edge import paths
from tests.conftest import free_port, proc_kib, spawn, stop
from tests.fake_upstream import FakeUpstream

LIMIT = 1024 * 1024  # the spawned gateway's server.body_limit_bytes
HANG = 30.0  # seconds any one answer may take before the case counts as a hang
MODEL = "acme/oa"  # on the fake upstream, kind openai
GEMINI = f"/v1beta/models/{MODEL}:generateContent"


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Case:
    id: str
    method: str
    target: str
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = (("content-type", "application/json"),)
    expect: frozenset[int] = frozenset({400})
    code: str | None = None
    param: str | None = None
    answer: Callable[[Any], Any] | None = None  # validates a 2xx's JSON
    chunked: bool = False
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass
class Gateway:
    port: int
    key: str
    pid: int
    log: Path


def send(gw: Gateway, case: Case) -> Reply:
    """One request as raw bytes on its own connection; the answer read by http.client, within HANG seconds."""
    head = [f"{case.method} {case.target} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    if not any(name == "authorization" for name, _ in case.headers):
        head.append(f"Authorization: Bearer {gw.key}")
    head += [f"{name}: {value}" for name, value in case.headers]
    payload = b""
    if case.body is not None and case.chunked:
        head.append("Transfer-Encoding: chunked")
        pieces = [case.body[i:i + 65536] for i in range(0, len(case.body), 65536)]
        payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    elif case.body is not None:
        head.append(f"Content-Length: {len(case.body)}")
        payload = case.body
    with socket.create_connection(("127.0.0.1", gw.port), timeout=HANG) as sock:
        try:
            sock.sendall("\r\n".join(head).encode("utf-8") + b"\r\n\r\n" + payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the gateway may answer (413) and close before the whole body is written
        answer = http.client.HTTPResponse(sock, method=case.method)
        answer.begin()
        return Reply(answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read())


def check(reply: Reply, case: Case) -> None:
    assert reply.status < 500, f"{case.id}: {reply.status} {reply.body[:300]!r}"
    assert "location" not in reply.headers, f"{case.id}: a redirect to {reply.headers['location']}"
    assert reply.status in case.expect, f"{case.id}: {reply.status} {reply.body[:300]!r}"
    assert b"Traceback" not in reply.body
    if reply.status >= 400:
        assert reply.headers["content-type"].startswith("application/json"), case.id
        assert reply.headers.get("x-request-id")
        if case.method != "HEAD":
            code, param = error_of(reply.body, case)
            assert case.code is None or code == case.code, f"{case.id}: {reply.body[:300]!r}"
            assert case.param is None or param == case.param, f"{case.id}: {reply.body[:300]!r}"
    elif case.answer is not None and case.method != "HEAD":
        case.answer(reply.body)


def error_of(body: bytes, case: Case) -> tuple[str, str | None]:
    """(code, param) of an error answer, in the shape its path answers: Google's on the Gemini paths (the code in an
    ErrorInfo's reason, the param in a BadRequest's field violation), ours everywhere else."""
    path = case.target.partition("?")[0]
    info = paths.match(path, case.method)
    if (info.errors == "google") if info is not None else path.startswith("/v1beta/"):
        error = models.GeminiError.model_validate_json(body).error
        reasons = [d["reason"] for d in error.details or () if d["@type"].endswith("google.rpc.ErrorInfo")]
        fields = [v["field"] for d in error.details or () if d["@type"].endswith("google.rpc.BadRequest")
                  for v in d["fieldViolations"]]
        assert error.status and len(reasons) == 1, body
        return reasons[0], fields[0] if fields else None
    detail = models.Error.model_validate_json(body).error
    return detail.code, detail.param


def _valid(model: type[pydantic.BaseModel]) -> Callable[[bytes], Any]:
    return model.model_validate_json


def _json_object(body: bytes) -> None:
    assert isinstance(orjson.loads(body), dict)


# --- bodies -----------------------------------------------------------------------------------------------------------

USER = [{"role": "user", "content": "Say hello."}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
    "n": {"type": "number", "maximum": 1}}}}}
BASE: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": MODEL, "messages": USER, "tools": [TOOL], "logit_bias": {"50256": 1},
                             "x_extra": {"a": [1]}},
    "/v1/messages": {"model": MODEL, "max_tokens": 64, "tools": [{"name": "f", "input_schema": {
        "type": "object", "properties": {"n": {"type": "number", "maximum": 1}}}}], "x_extra": {"a": [1]}, "messages": [
        *USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"n": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]},
    "/v1/responses": {"model": MODEL, "input": "Say hello.", "x_extra": {"a": [1]},
                      "tools": [{"type": "function", "name": "f", "parameters": {"maximum": 1}}]},
    "/v1/messages/count_tokens": {"model": MODEL, "messages": USER},
    GEMINI: {"contents": [{"role": "user", "parts": [{"text": "Say hello."}]}], "generationConfig": {
        "maxOutputTokens": 64, "temperature": 0.5, "topP": 0.5}, "x_extra": {"a": [1]}, "tools": [
        {"functionDeclarations": [{"name": "f", "parametersJsonSchema": {"type": "object", "properties": {
            "n": {"type": "number", "maximum": 1}}}}]}]},
}
ANSWERS: dict[str, Callable[[bytes], Any]] = {
    "/v1/chat/completions": _valid(models.ChatCompletion), "/v1/messages": _valid(models.Message),
    "/v1/responses": _valid(models.ResponseObject), "/v1/messages/count_tokens": _json_object,
    "/v1/workspaces": _json_object, GEMINI: _valid(models.GeminiGenerateContentResponse),
}
INFERENCE = ("/v1/chat/completions", "/v1/messages", "/v1/responses", GEMINI)
# Where a number goes, per endpoint (dotted paths, as the error's param names them).
NUMBER_FIELDS = {
    "/v1/chat/completions": ["max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "seed",
                             "frequency_penalty", "logit_bias.50256", "x_unknown", "x_extra.a.0",
                             "tools.0.function.parameters.properties.n.maximum"],
    "/v1/messages": ["max_tokens", "temperature", "top_p", "top_k", "x_unknown", "x_extra.a.0",
                     "messages.1.content.0.input.n", "tools.0.input_schema.properties.n.maximum"],
    "/v1/responses": ["max_output_tokens", "temperature", "top_p", "top_logprobs", "x_unknown", "x_extra.a.0",
                      "tools.0.parameters.maximum"],
    GEMINI: ["generationConfig.maxOutputTokens", "generationConfig.temperature", "generationConfig.topP",
             "generationConfig.seed", "x_unknown", "x_extra.a.0",
             "tools.0.functionDeclarations.0.parametersJsonSchema.properties.n.maximum"],
}
NOT_JSON = ["NaN", "Infinity", "-Infinity"]
OUT_OF_RANGE = ["1e400", "-1e400", str(2**64), str(-(2**63) - 1), str(10**30)]
IN_RANGE = ["-0", "-0.0", str(2**63), str(2**64 - 1), "1e-400", "-9223372036854775808"]


def with_number(base: dict[str, Any], where: str, literal: str) -> bytes:
    """`base` as JSON with the number written as `literal` (NaN and 10**30 included) at the dotted path `where`."""
    body = json.loads(json.dumps(base))
    *parents, last = where.split(".")
    node: Any = body
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if isinstance(node, list):
        node[int(last)] = "\x00NUMBER\x00"
    else:
        node[last] = "\x00NUMBER\x00"
    return orjson.dumps(body).replace(b'"\\u0000NUMBER\\u0000"', literal.encode())


def nested(depth: int, open_: bytes = b"[", close: bytes = b"]", inner: bytes = b"1") -> bytes:
    return open_ * depth + inner + close * depth


# --- the cases --------------------------------------------------------------------------------------------------------


def number_cases() -> Iterator[Case]:
    for path, fields in NUMBER_FIELDS.items():
        for where in fields:
            for literal in NOT_JSON:
                yield Case(f"{path} {where}={literal}", "POST", path, with_number(BASE[path], where, literal),
                           code="invalid_json")
            for literal in OUT_OF_RANGE:
                yield Case(f"{path} {where}={literal}", "POST", path, with_number(BASE[path], where, literal),
                           code="number_out_of_range", param=where)
            for literal in IN_RANGE:
                yield Case(f"{path} {where}={literal}", "POST", path, with_number(BASE[path], where, literal),
                           expect=frozenset({200, 400}), answer=ANSWERS[path])
    for literal in ("1e400", str(10**30)):  # inside tool arguments, which chat and responses carry as JSON text
        args = '{"n": ' + literal + "}"
        chat = {**BASE["/v1/chat/completions"], "messages": [*USER, {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}]}
        yield Case(f"chat tool arguments text {literal}", "POST", "/v1/chat/completions", orjson.dumps(chat),
                   expect=frozenset({200}), answer=ANSWERS["/v1/chat/completions"])
        items = [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": args},
                 {"type": "function_call_output", "call_id": "c1", "output": "ok"}]
        yield Case(f"responses tool arguments text {literal}", "POST", "/v1/responses",
                   orjson.dumps({**BASE["/v1/responses"], "input": items}), expect=frozenset({200}),
                   answer=ANSWERS["/v1/responses"])


def encoding_cases() -> Iterator[Case]:
    ok = {path: orjson.dumps(BASE.get(path, {"name": "bad input"})) for path in [*BASE, "/v1/workspaces"]}
    for path, body in ok.items():
        # An admin body takes no unknown field: there the variants that add one are a 400.
        yes = {"expect": frozenset({201, 400} if path == "/v1/workspaces" else {200}), "answer": ANSWERS[path]}
        json_ct = (("content-type", "application/json"),)
        variants: list[tuple[str, bytes, tuple[tuple[str, str], ...], dict[str, Any]]] = [
            ("invalid utf-8", body.replace(b"}", b', "s": "\xff\xfe"}', 1), json_ct, {"code": "invalid_json"}),
            ("overlong utf-8", body.replace(b"}", b', "s": "\xc0\xaf"}', 1), json_ct, {"code": "invalid_json"}),
            ("lone surrogate", body.replace(b"}", b', "s": "\\ud800"}', 1), json_ct, {"code": "invalid_json"}),
            ("raw control char", body.replace(b"}", b', "s": "a\x01b"}', 1), json_ct, {"code": "invalid_json"}),
            ("raw nul", body + b"\x00", json_ct, {"code": "invalid_json"}),
            ("utf-8 bom", b"\xef\xbb\xbf" + body, json_ct, {"code": "invalid_json"}),
            ("utf-16le", body.decode().encode("utf-16-le"), json_ct, {"code": "invalid_json"}),
            ("utf-16 with bom", body.decode().encode("utf-16"), json_ct, {"code": "invalid_json"}),
            ("utf-32", body.decode().encode("utf-32"), json_ct, {"code": "invalid_json"}),
            ("charset utf-16 declared", body.decode().encode("utf-16"),
             (("content-type", "application/json; charset=utf-16"),), {"code": "invalid_json"}),
            ("escaped nul", body.replace(b"}", b', "s": "a\\u0000b"}', 1), json_ct, yes),
            ("truncated", body[:-1], json_ct, {"code": "invalid_json"}),
            ("trailing garbage", body + b"x", json_ct, {"code": "invalid_json"}),
            ("two objects", body + body, json_ct, {"code": "invalid_json"}),
            ("whitespace only", b" \r\n\t ", json_ct, {}),
            ("null", b"null", json_ct, {}),
            ("number", b"1", json_ct, {}),
            ("string", b'"hi"', json_ct, {}),
            ("array", b"[]", json_ct, {}),
            ("duplicate keys", body.replace(b"{", b'{"model": 1, ', 1), json_ct, yes),
            ("text/plain", body, (("content-type", "text/plain"),), {"expect": frozenset({415})}),
            ("form", body, (("content-type", "application/x-www-form-urlencoded"),), {"expect": frozenset({415})}),
            ("multipart", body, (("content-type", "multipart/form-data; boundary=x"),), {"expect": frozenset({415})}),
            ("no content-type", body, (), yes),  # read as JSON, as curl users expect
            ("gzip", gzip.compress(body), (*json_ct, ("content-encoding", "gzip")),
             {"expect": frozenset({415}), "code": "unsupported_content_encoding"}),
            ("deflate", zlib.compress(body), (*json_ct, ("content-encoding", "deflate")),
             {"expect": frozenset({415}), "code": "unsupported_content_encoding"}),
            ("br claimed", body, (*json_ct, ("content-encoding", "br")),
             {"expect": frozenset({415}), "code": "unsupported_content_encoding"}),
            ("identity encoding", body, (*json_ct, ("content-encoding", "identity")), yes),
        ]
        for name, raw, headers, more in variants:
            yield Case(f"{path} {name}", "POST", path, raw, headers=headers, **more)


def nesting_cases() -> Iterator[Case]:
    for path in INFERENCE:
        base = orjson.dumps(BASE[path])[:-1]
        for name, deep in [("arrays 5000", nested(5000)), ("objects 5000", nested(5000, b'{"a":', b"}")),
                           ("mixed 3000", nested(3000, b'[{"a":', b"}]"))]:
            yield Case(f"{path} top level {name}", "POST", path, deep, code="invalid_json")
            yield Case(f"{path} field {name}", "POST", path, base + b', "x_deep": ' + deep + b"}", code="invalid_json")
        yield Case(f"{path} field arrays 100", "POST", path, base + b', "x_deep": ' + nested(100) + b"}",
                   expect=frozenset({200}), answer=ANSWERS[path])


def size_cases() -> Iterator[Case]:
    chat = "/v1/chat/completions"
    big = {"model": MODEL, "messages": [{"role": "user", "content": "x" * (LIMIT - 1000)}]}
    yield Case("huge string under the limit", "POST", chat, orjson.dumps(big), expect=frozenset({200}),
               answer=ANSWERS[chat])
    many = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}] * 20000}
    yield Case("20000 messages", "POST", chat, orjson.dumps(many), expect=frozenset({200}), answer=ANSWERS[chat])
    keys = {"model": MODEL, "messages": USER, "x_wide": {f"k{i}": i for i in range(40000)}}
    yield Case("40000 keys in an unknown field", "POST", chat, orjson.dumps(keys), expect=frozenset({200}),
               answer=ANSWERS[chat])
    tools = {"model": MODEL, "messages": USER, "tools": [TOOL] * 3000}
    yield Case("3000 tools", "POST", chat, orjson.dumps(tools), expect=frozenset({200}), answer=ANSWERS[chat])
    yield Case("10 KB model name", "POST", chat, orjson.dumps({"model": "m" * 10240, "messages": USER}),
               expect=frozenset({400, 404}))
    over = orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * LIMIT}]})
    for path in [*BASE, "/v1/workspaces", "/v1/keys"]:
        yield Case(f"{path} over the limit", "POST", path, over, expect=frozenset({413}), code="request_too_large")
        yield Case(f"{path} over the limit, chunked", "POST", path, over, expect=frozenset({413}),
                   code="request_too_large", chunked=True)
    yield Case("8 KB junk key", "GET", "/v1/key", None, headers=(("authorization", "Bearer " + "k" * 8192),),
               expect=frozenset({401}), code="invalid_api_key")


ID_TRICKS = {
    "dotdot slash encoded": "%2e%2e%2f", "dotdot encoded": "%2e%2e", "dot encoded": "%2e", "dotdot raw": "..",
    "nul": "%00", "nul inside": "a%00b", "crlf": "a%0d%0aX-Injected:%201", "invalid utf-8": "%ff%fe",
    "unicode": quote("é中😀"), "10 KB": "k" * 10240, "double slash": "/x", "trailing slash": "x/", "empty": "",
    "encoded slash": "a%2fb", "bad percent": "%zz", "lone percent": "%", "space": "a%20b", "question mark": "a%3fb",
    "semicolon": "a;b=c", "backslash": "a%5cb", "quote": "x'%20OR%20'1'='1",
}
PATCH_BODIES = {"/v1/workspaces/{workspaceId}": {"name": "renamed"}, "/v1/keys/{keyId}": {"name": "renamed"},
                "/v1/workspaces/{workspaceId}/credit": {"amount": "1"}}


def with_id(template: str, value: str) -> str:
    """The template with its one path parameter replaced by `value`, as is (percent-encoding and all)."""
    head, brace, rest = template.partition("{")
    return head + value + rest.partition("}")[2] if brace else template


def path_cases() -> Iterator[Case]:
    for info in TABLE:
        if "{" not in info.template:
            continue
        for method in info.methods.split(", "):
            body = PATCH_BODIES.get(info.template, {}) if method in ("POST", "PATCH", "PUT") else None
            for name, trick in ID_TRICKS.items():
                target = with_id(info.template, trick)
                yield Case(f"{method} {info.template} {name}", method, target,
                           None if body is None else orjson.dumps(body),
                           expect=frozenset({404}) if body is None else frozenset({400, 404}))


def method_cases() -> Iterator[Case]:
    for info in TABLE:
        target = with_id(info.template, "x")
        allowed = paths.allowed(target)
        # GET /v1/models/x:countTokens is no 405: it is a GET of /v1/models/{modelId}
        served = {m for other in TABLE if other.pattern.match(target) for m in other.methods.split(", ")}
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"):
            if method not in served:
                yield Case(f"{method} {info.template}", method, target, b"{}" if method != "GET" else None,
                           expect=frozenset({405}), code="method_not_allowed", extra={"allow": allowed})
    for method in ("POST", "PUT", "DELETE"):
        yield Case(f"{method} /openapi.json", method, "/openapi.json", b"{}", expect=frozenset({405}))
    yield Case("HEAD /healthz", "HEAD", "/healthz", expect=frozenset({200}))
    yield Case("PROPFIND /v1/models", "PROPFIND", "/v1/models", expect=frozenset({405}))


def query_cases() -> Iterator[Case]:
    junk = ["limit=abc", "limit=-1", "limit=0", "limit=1e400", "limit=NaN", f"limit={10**30}", "limit=",
            "limit=1&limit=2", "after_id=%00", "after_id=" + "a" * 10240, "%", "%zz", "&&&=", "a=%ff%fe", "=x",
            "&".join(f"junk{i}=%00%ff" for i in range(1500)), "before_id=x&after_id=y"]
    for query in junk:
        yield Case(f"GET /v1/models?{query[:40]}", "GET", f"/v1/models?{query}", expect=frozenset({200, 400}),
                   answer=_json_object)
    for query in ["workspace_id=%00", "workspace_id=" + "w" * 10240, "workspace_id=%ff", "workspace_id=&x=1"]:
        yield Case(f"GET /v1/keys?{query[:40]}", "GET", f"/v1/keys?{query}", expect=frozenset({200, 400, 404}),
                   answer=_json_object)
    for target in ["/healthz?%ff=%00", "/metrics?" + "a=b&" * 500, "/v1/key?x=%", "/openapi.json?x=1"]:
        yield Case(f"GET {target[:40]}", "GET", target, expect=frozenset({200}))
    yield Case("chat with a junk query", "POST", "/v1/chat/completions?stream=true&model=x&%ff",
               orjson.dumps(BASE["/v1/chat/completions"]), expect=frozenset({200}),
               answer=ANSWERS["/v1/chat/completions"])


def target_cases() -> Iterator[Case]:
    yield Case("asterisk form", "GET", "*", expect=frozenset({404}))
    yield Case("absolute form, another host", "GET", "http://evil.example/v1/keys/x", expect=frozenset({404}))
    yield Case("fragment", "GET", "/v1/keys/x#frag", expect=frozenset({404}))
    yield Case("double leading slash", "GET", "//v1/keys", expect=frozenset({404}))
    yield Case("dot segments", "GET", "/v1/../v1/keys/./x", expect=frozenset({404}))


CASES = [*number_cases(), *encoding_cases(), *nesting_cases(), *size_cases(), *path_cases(), *method_cases(),
         *query_cases(), *target_cases()]


# --- the gateway and the tests ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("bad_input")
    with FakeUpstream() as fake:
        config = tmp / "specway.yaml"
        config.write_text(yaml.safe_dump({
            "server": {"body_limit_bytes": LIMIT, "log_level": "info"},
            "store": {"url": f"sqlite:///{tmp / 's.db'}"},
            "upstreams": {"fake": {"kind": "openai", "base_url": fake.url}},
            "models": [{"id": MODEL, "upstream": "fake", "name": "fake-model"}],
        }))
        port = free_port()
        proc, key = spawn(config, port, tmp / "serve.log")
        try:
            yield Gateway(port, key, proc.pid, tmp / "serve.log")
        finally:
            stop(proc)


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 250
    assert len({case.id for case in CASES}) == len(CASES), "case ids are unique"


@pytest.mark.parametrize("case", CASES, ids=[case.id[:90] for case in CASES])
def test_bad_input(gw: Gateway, case: Case) -> None:
    reply = send(gw, case)
    check(reply, case)
    if "allow" in case.extra:
        assert reply.headers["allow"] == case.extra["allow"]
    assert "x-injected" not in reply.headers


@pytest.mark.parametrize("target", ["/v1/keys/\xc3\xa9", "/v1/keys/a b", "/v1/keys/\x00"])
def test_a_request_line_that_is_not_http_is_a_400_in_the_error_shape(gw: Gateway, target: str) -> None:
    """Raw non-ASCII bytes, a space or a NUL in the request line: the HTTP parser refuses the request before the app
    sees it; the connection layer still answers in the one error shape."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=HANG) as sock:
        sock.sendall(b"GET " + target.encode("latin-1") + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = http.client.HTTPResponse(sock, method="GET")
        answer.begin()
        assert answer.status == 400
        assert answer.getheader("content-type", "").startswith("application/json")
        models.Error.model_validate_json(answer.read())


def test_rss_stays_bounded_and_nothing_is_logged_as_an_error_when_the_suite_is_replayed(gw: Gateway) -> None:
    """Rounds of every case, the large accepted bodies five times more (~15 MB of bodies read a round). The first
    round warms up (the allocator keeps the arenas the largest bodies needed, the store's page cache fills); a later
    round must not grow by much. This catches retained request bodies or a cache that grows with each distinct bad
    input, not a leak of a few bytes per request."""
    if not Path(f"/proc/{gw.pid}/status").exists():
        pytest.skip("no /proc on this system")
    heavy = [case for case in CASES if 200 in case.expect and len(case.body or b"") > 200_000]
    assert len(heavy) >= 3
    rounds = []
    for _ in range(3):
        for case in [*CASES, *heavy * 5]:
            check(send(gw, case), case)
        rounds.append(proc_kib(gw.pid, "VmRSS"))
    assert rounds[2] - rounds[1] < 8 * 1024, f"RSS after each round (KiB): {rounds}"
    assert rounds[2] < 400 * 1024, f"RSS after each round (KiB): {rounds}"
    logged = [json.loads(line) for line in gw.log.read_text().splitlines() if line.startswith("{")]
    assert [line for line in logged if line["level"] in ("error", "critical") or "Traceback" in str(line)] == []
    assert not [line for line in logged if line.get("logger") == "specway.requests" and line["status"] >= 500]


def test_every_pattern_of_the_spec_is_refused_in_words() -> None:
    """A value that does not match a pattern is answered with what the value must be, never with the pattern."""
    import json
    from pathlib import Path

    from handlers.errors import PATTERN_WORDS

    def patterns(node: object) -> set[str]:
        if isinstance(node, dict):
            own = {node["pattern"]} if isinstance(node.get("pattern"), str) else set()
            return own.union(*(patterns(v) for v in node.values()))
        if isinstance(node, list):
            return set().union(*(patterns(v) for v in node))
        return set()

    spec = json.loads((Path(__file__).resolve().parents[1] / "openapi.json").read_text(encoding="utf-8"))
    assert patterns(spec) == set(PATTERN_WORDS)
