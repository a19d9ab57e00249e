"""The edge's answers to hostile or careless input, over real HTTP against a spawned `specway serve`: numbers that are
not JSON or that no encoder can write back, redirects, compressed or mis-encoded bodies, a client that leaves, and the
/metrics token."""

from __future__ import annotations

import gzip
import json
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from generated import models
from handlers.edge import paths
from tests.conftest import Live, free_port, spawn, stop
from tests.error_codes_support import problem
from tests.fake_upstream import FakeUpstream

TOKEN_ENV = "SPECWAY_TEST_METRICS_TOKEN"
TOKEN = "metrics-token-0123456789"
USER = [{"role": "user", "content": "Say hello."}]
BODIES = {"/v1/chat/completions": {"model": "acme/oa", "messages": USER},
          "/v1/messages": {"model": "acme/oa", "max_tokens": 64, "messages": USER},
          "/v1/responses": {"model": "acme/oa", "input": "Say hello."}}


@dataclass
class Served:
    url: str
    key: str
    log: Path
    fake: FakeUpstream

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def post(self, path: str, body: bytes, **headers: str) -> httpx.Response:
        return httpx.post(self.url + path, content=body, timeout=30,
                          headers={**self.headers, "content-type": "application/json", **headers})

    def log_line(self, request_id: str) -> dict[str, Any]:
        """The request's log line, once the gateway has written it."""
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            for line in self.log.read_text().splitlines():
                if request_id in line and line.startswith("{"):
                    entry: dict[str, Any] = json.loads(line)
                    if entry.get("request_id") == request_id:
                        return entry
            time.sleep(0.05)
        raise AssertionError(f"no log line for {request_id}")

    def errors_logged(self) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in self.log.read_text().splitlines() if line.startswith("{")]
        return [line for line in lines if line["level"] in ("error", "critical") or "Traceback" in str(line)]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("edge")
    with FakeUpstream() as fake, pytest.MonkeyPatch.context() as mp:
        mp.setenv(TOKEN_ENV, TOKEN)  # the spawned gateway inherits it
        config = tmp / "specway.yaml"
        config.write_text(yaml.safe_dump({
            "server": {"log_level": "info", "metrics_token_env": TOKEN_ENV},
            "store": {"url": f"sqlite:///{tmp / 's.db'}"},
            "upstreams": {"oa": {"kind": "openai", "base_url": fake.url, "passthrough": True},
                          "an": {"kind": "anthropic", "base_url": fake.anthropic_url}},
            "models": [{"id": "acme/oa", "upstream": "oa", "name": "oa-model"},
                       {"id": "acme/an", "upstream": "an", "name": "an-model"}],
        }))
        port = free_port()
        proc, key = spawn(config, port, tmp / "serve.log")
        try:
            yield Served(f"http://127.0.0.1:{port}", key, tmp / "serve.log", fake)
        finally:
            stop(proc)


def error_of(r: httpx.Response, status: int, code: str) -> models.ErrorDetail:
    assert r.status_code == status, r.text
    error = models.Error.model_validate(r.json()).error
    assert error.code == code, r.text
    assert problem(r.request.method, r.request.url.path, r.status_code, r.content) is None  # declared for the op
    return error


def raw(body: dict[str, Any], **numbers: str) -> bytes:
    """`body` as JSON, each placeholder string "<name>" in it replaced by the literal numbers[name]."""
    text = orjson.dumps(body)
    for name, literal in numbers.items():
        text = text.replace(f'"<{name}>"'.encode(), literal.encode())
    return text


# --- numbers ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("path", list(BODIES))
def test_nan_and_infinity_are_not_json(served: Served, path: str, literal: str) -> None:
    served.fake.reset()
    r = served.post(path, raw({**BODIES[path], "temperature": "<v>"}, v=literal))
    error = error_of(r, 400, "invalid_json")
    assert "NaN, Infinity and -Infinity are not JSON numbers" in error.message
    assert served.fake.requests == []


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/v1/chat/completions", {**BODIES["/v1/chat/completions"], "seed": "<v>"}, "seed"),
    ("/v1/chat/completions", {**BODIES["/v1/chat/completions"], "n": "<v>"}, "n"),
    ("/v1/chat/completions", {**BODIES["/v1/chat/completions"], "whatever": {"a": [0, "<v>"]}}, "whatever.a.1"),
    ("/v1/chat/completions", {**BODIES["/v1/chat/completions"], "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "number", "maximum": "<v>"}}}]}, "tools.0.function.parameters.maximum"),
    ("/v1/messages", {**BODIES["/v1/messages"], "messages": [*USER, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "f", "input": {"n": "<v>"}}]}]}, "messages.1.content.0.input.n"),
    ("/v1/messages", {**BODIES["/v1/messages"], "max_tokens": "<v>"}, "max_tokens"),
    ("/v1/responses", {**BODIES["/v1/responses"], "max_output_tokens": "<v>"}, "max_output_tokens"),
    ("/v1/responses", {**BODIES["/v1/responses"], "metadata": {"x": "<v>"}}, "metadata.x"),
    ("/v1/chat/completions", {**BODIES["/v1/chat/completions"], "": "<v>"}, ""),  # a field named "" is named too
])
@pytest.mark.parametrize("literal", [str(2**64), str(-(2**63) - 1), str(10**30), "1e400", "-1e400"])
def test_a_number_no_encoder_can_write_back_is_refused_naming_its_field(served: Served, path: str,
                                                                      body: dict[str, Any], param: str,
                                                                      literal: str) -> None:
    served.fake.reset()
    error = error_of(served.post(path, raw(body, v=literal)), 400, "number_out_of_range")
    assert error.param == param and error.message.startswith(param)
    assert served.fake.requests == []


def test_numbers_in_range_reach_a_same_format_upstream_as_written(served: Served) -> None:
    served.fake.reset()
    body = {**BODIES["/v1/chat/completions"], "seed": "<seed>", "x_min": "<min>", "x_zero": "<zero>",
            "x_tiny": "<tiny>", "x_huge": "<huge>"}
    r = served.post("/v1/chat/completions", raw(body, seed=str(2**64 - 1), min=str(-(2**63)), zero="-0.0",
                                                tiny="1e-400", huge="1.7976931348623157e308"))
    assert r.status_code == 200, r.text
    sent = served.fake.requests[-1].body
    assert sent["seed"] == 2**64 - 1 and sent["x_min"] == -(2**63) and sent["x_huge"] == 1.7976931348623157e308
    assert sent["x_zero"] == 0.0 and math.copysign(1.0, sent["x_zero"]) == -1.0 and sent["x_tiny"] == 0.0


@pytest.mark.parametrize(("model", "literal"), [("acme/oa", str(2**64 - 1)), ("acme/an", str(-(2**63)))])
def test_a_tool_input_at_the_edge_of_the_range_is_translated_as_written(served: Served, model: str,
                                                                        literal: str) -> None:
    served.fake.reset()
    messages = [*USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f",
                                                          "input": {"n": "<v>"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]
    r = served.post("/v1/messages", raw({"model": model, "max_tokens": 64, "messages": messages}, v=literal))
    assert r.status_code == 200, r.text
    sent = served.fake.requests[-1].body
    if model == "acme/oa":  # Chat Completions carries tool arguments as JSON text
        assert sent["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"n":' + literal + "}"
    else:
        assert sent["messages"][1]["content"][0]["input"] == {"n": int(literal)}


# --- redirects, encodings -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["/v1/keys/%2e%2e%2f", "/v1/keys/", "/v1/keys/x/", "/v1/workspaces/",
                                    "/v1/workspaces/x/credit/", "/v1/models/", "/v1/route/explain/",
                                    "/v1/route/explain/x/", "/v1/chat/completions/", "/healthz/", "/metrics/"])
def test_no_redirect_is_ever_built_from_the_host_header(served: Served, target: str) -> None:
    r = httpx.get(served.url + target, headers={**served.headers, "Host": "evil.example"}, timeout=10)
    assert "location" not in r.headers
    error_of(r, 404, "model_not_found" if target == "/v1/models/" else "not_found")  # a model id may hold a "/"


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "gzip, identity"])
def test_a_compressed_body_is_refused_with_415(served: Served, encoding: str) -> None:
    body = gzip.compress(orjson.dumps(BODIES["/v1/chat/completions"]))
    error = error_of(served.post("/v1/chat/completions", body, **{"content-encoding": encoding}), 415,
                     "unsupported_content_encoding")
    assert "Content-Encoding" in error.message


def test_an_identity_content_encoding_is_plain_json(served: Served) -> None:
    body = orjson.dumps(BODIES["/v1/chat/completions"])
    assert served.post("/v1/chat/completions", body, **{"content-encoding": "identity"}).status_code == 200


@pytest.mark.parametrize(("encode", "says"), [
    (lambda text: b"\xef\xbb\xbf" + text.encode(), "byte order mark"),
    (lambda text: text.encode("utf-16"), "UTF-16"),
    (lambda text: text.encode("utf-16-le"), "UTF-16"),
])
def test_a_body_not_in_plain_utf8_says_why(served: Served, encode: Any, says: str) -> None:
    body = encode(json.dumps(BODIES["/v1/chat/completions"]))
    assert says in error_of(served.post("/v1/chat/completions", body), 400, "invalid_json").message


def test_long_paths_are_matched_but_not_cached() -> None:
    long = "/v1/keys/" + "k" * 10_000
    info = paths.match(long)
    assert info is not None and info.template == "/v1/keys/{keyId}"
    assert (long, "") not in paths._cache
    assert paths.match("/v1/keys/short") is paths._cache["/v1/keys/short", ""]


# --- a client that leaves -----------------------------------------------------------------------------------------


def test_a_client_gone_while_sending_its_body_is_logged_at_info_without_a_traceback(served: Served) -> None:
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {served.key}\r\n"
            "x-request-id: gone-mid-body\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    with socket.create_connection(("127.0.0.1", int(served.url.rsplit(":", 1)[1])), timeout=10) as sock:
        sock.sendall(head.encode() + b'{"messages": [')
        time.sleep(0.3)  # the gateway is now waiting for the rest of the body
    entry = served.log_line("gone-mid-body")
    assert entry["level"] == "info" and entry["status"] == 499 and entry["outcome"] == "client_disconnected"
    assert served.errors_logged() == []


def test_a_client_gone_mid_stream_is_logged_at_info_without_a_traceback(served: Served) -> None:
    served.fake.reset()
    served.fake.script(text=" ".join(["tok"] * 200), chunk_delay=0.05)
    body = {**BODIES["/v1/chat/completions"], "stream": True}
    with httpx.Client(timeout=30) as client, client.stream(
            "POST", served.url + "/v1/chat/completions", json=body,
            headers={**served.headers, "x-request-id": "gone-mid-stream"}) as r:
        assert r.status_code == 200
        next(r.iter_bytes())
    entry = served.log_line("gone-mid-stream")
    assert entry["level"] == "info" and entry["outcome"] == "cancelled"
    assert served.errors_logged() == []


# --- /metrics -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer",
                                           "relay key"])
def test_metrics_refuse_anything_but_their_token(served: Served, authorization: str | None) -> None:
    value = f"Bearer {served.key}" if authorization == "relay key" else authorization
    r = httpx.get(served.url + "/metrics", headers={"Authorization": value} if value else {}, timeout=10)
    error_of(r, 401, "invalid_metrics_token")
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert "specway_" not in r.text and TOKEN not in r.text


@pytest.mark.parametrize("scheme", ["Bearer", "bearer"])
def test_metrics_answer_their_token(served: Served, scheme: str) -> None:
    r = httpx.get(served.url + "/metrics", headers={"Authorization": f"{scheme} {TOKEN}"}, timeout=10)
    assert r.status_code == 200 and "specway_requests_total" in r.text


def test_metrics_stay_public_when_no_token_is_configured(live: Live) -> None:
    r = httpx.get(live.url + "/metrics", timeout=10)
    assert r.status_code == 200 and "specway_requests_total" in r.text


def test_a_metrics_token_variable_that_is_unset_stops_the_start(tmp_path: Path) -> None:
    config = tmp_path / "specway.yaml"
    config.write_text(yaml.safe_dump({"server": {"metrics_token_env": "SPECWAY_TEST_UNSET_TOKEN"},
                                      "store": {"url": f"sqlite:///{tmp_path / 's.db'}"}}))
    env = {k: v for k, v in os.environ.items() if k != "SPECWAY_TEST_UNSET_TOKEN"}
    done = subprocess.run([sys.executable, "-m", "handlers.cli", "--config", str(config), "serve", "--port",
                           str(free_port())], check=False, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2, done.stderr
    assert "server.metrics_token_env" in done.stderr and "SPECWAY_TEST_UNSET_TOKEN" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_spec_declares_the_metrics_401() -> None:
    spec = json.loads(paths.SPEC.read_text())
    assert "401" in spec["paths"]["/metrics"]["get"]["responses"]

