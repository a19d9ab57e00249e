"""The app's edges over real HTTP: every bad input answers in the one error shape, never a 500 or a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from generated import models
from tests.conftest import Live, serve

CHAT = {"messages": [{"role": "user", "content": "Say hello in one sentence."}]}


def assert_error(r: httpx.Response, status: int, code: str | None = None, param: str | None = None) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = models.Error.model_validate(r.json())
    assert "Traceback" not in r.text
    if code is not None:
        assert body.error.code == code, r.text
    if param is not None:
        assert body.error.param == param, r.text
    assert r.headers.get("x-request-id")
    return r.json()


@pytest.fixture
def client(live: Live) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url, headers=live.headers, timeout=10) as c:
        yield c


def test_quickstart_on_every_endpoint(client: httpx.Client) -> None:
    r = client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200, r.text
    chat = models.ChatCompletion.model_validate(r.json())
    assert chat.id.startswith("chatcmpl-") and chat.choices[0].message.content
    r = client.post("/v1/messages", json={**CHAT, "max_tokens": 256})
    msg = models.Message.model_validate(r.json())
    assert msg.id.startswith("msg_") and msg.content[0].text
    r = client.post("/v1/responses", json={"input": "Say hello in one sentence."})
    resp = models.ResponseObject.model_validate(r.json())
    assert resp.id.startswith("resp_") and resp.output_text
    assert r.headers["x-specway-decision-id"] == resp.id.removeprefix("resp_")


def test_tools_that_are_not_objects_are_echoed_as_the_spec_says(client: httpx.Client) -> None:
    """Tools are carried, never validated (the reference says so): the Responses answer echoes them as they came,
    and stays valid against the spec's ResponseObject."""
    tools = [False, {"": None}, [[]], {"type": "function", "name": "f"}]
    r = client.post("/v1/responses", json={"input": "hi", "tools": tools})
    assert r.status_code == 200, r.text
    echoed = models.ResponseObject.model_validate(r.json()).model_dump()["tools"]
    assert echoed[:3] == tools[:3] and echoed[3]["name"] == "f"


@pytest.mark.parametrize(("path", "body", "first_event"), [
    ("/v1/chat/completions", CHAT, b"data: {"),
    ("/v1/messages", {**CHAT, "max_tokens": 64}, b"event: message_start"),
    ("/v1/responses", {"input": "hi"}, b"event: response.created"),
])
def test_stream_true_answers_sse(client: httpx.Client, path: str, body: dict, first_event: bytes) -> None:
    r = client.post(path, json={**body, "stream": True})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.content.startswith(first_event)


def test_unknown_path_is_404(client: httpx.Client) -> None:
    assert_error(client.get("/v1/nothing-here"), 404, "not_found")


def test_wrong_method_is_405_with_allow(client: httpx.Client) -> None:
    r = client.get("/v1/chat/completions")
    assert_error(r, 405, "method_not_allowed")
    assert "POST" in r.headers["allow"]


def test_wrong_content_type_is_415(client: httpx.Client) -> None:
    r = client.post("/v1/chat/completions", content=b"hello", headers={"content-type": "text/plain"})
    assert_error(r, 415, "unsupported_media_type")


def test_malformed_json_is_400(client: httpx.Client) -> None:
    r = client.post("/v1/chat/completions", content=b'{"messages": [', headers={"content-type": "application/json"})
    assert_error(r, 400, "invalid_json")


def test_non_utf8_body_is_400(client: httpx.Client) -> None:
    r = client.post("/v1/chat/completions", content=b'{"messages": "\xff\xfe"}',
                    headers={"content-type": "application/json"})
    assert_error(r, 400)


def test_body_not_an_object_is_400(client: httpx.Client) -> None:
    assert_error(client.post("/v1/chat/completions", json=[1, 2]), 400, "invalid_request")


def test_empty_body_is_400(client: httpx.Client) -> None:
    r = client.post("/v1/chat/completions", content=b"", headers={"content-type": "application/json"})
    assert_error(r, 400)


def test_chunked_body_without_content_length_is_read(client: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"messages": [{"role": "user", '
        yield b'"content": "chunked hello"}]}'

    r = client.post("/v1/chat/completions", content=chunks(), headers={"content-type": "application/json"})
    assert "content-length" not in r.request.headers
    assert r.status_code == 200, r.text
    assert "chunked hello" in r.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("field", ["messages"])
def test_missing_or_empty_messages_name_the_field(client: httpx.Client, field: str) -> None:
    assert_error(client.post("/v1/chat/completions", json={}), 400, param="messages")
    assert_error(client.post("/v1/chat/completions", json={"messages": []}), 400, param="messages")
    assert_error(client.post("/v1/messages", json={"messages": []}), 400, param="messages")
    assert_error(client.post("/v1/responses", json={}), 400, param="input")


def test_wrong_field_type_names_the_path(client: httpx.Client) -> None:
    body = {"messages": [{"role": 5, "content": "x"}]}
    assert_error(client.post("/v1/chat/completions", json=body), 400, param="messages.0.role")
    assert_error(client.post("/v1/chat/completions", json={**CHAT, "max_tokens": "5"}), 400, param="max_tokens")


def test_both_max_tokens_is_400(client: httpx.Client) -> None:
    r = client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 5, "max_completion_tokens": 5})
    assert_error(r, 400, param="max_tokens")


def test_unknown_fields_are_accepted(client: httpx.Client) -> None:
    r = client.post("/v1/chat/completions", json={**CHAT, "n": 1, "user": "u", "logit_bias": {}, "whatever": [1]})
    assert r.status_code == 200, r.text


def test_request_id_is_echoed_or_made(client: httpx.Client) -> None:
    assert client.get("/v1/models", headers={"x-request-id": "abc-123"}).headers["x-request-id"] == "abc-123"
    assert len(client.get("/v1/models").headers["x-request-id"]) == 32


def test_spec_and_docs_are_served(client: httpx.Client) -> None:
    spec = client.get("/openapi.json").json()
    assert spec["openapi"] == "3.0.3" and "/v1/chat/completions" in spec["paths"]
    assert client.get("/docs/").status_code == 200


def test_missing_and_bad_keys_are_401(live: Live) -> None:
    with httpx.Client(base_url=live.url) as c:
        assert_error(c.post("/v1/chat/completions", json=CHAT), 401, "invalid_api_key")
        r = c.post("/v1/chat/completions", json=CHAT, headers={"Authorization": "Bearer sk-sw-nope"})
        assert_error(r, 401, "invalid_api_key")
        assert "sk-sw-nope" not in r.text


def test_x_api_key_header_is_accepted(live: Live) -> None:
    with httpx.Client(base_url=live.url) as c:
        r = c.post("/v1/messages", json={**CHAT, "max_tokens": 16}, headers={"x-api-key": live.key})
        assert r.status_code == 200, r.text


def test_revoked_key_is_401(live: Live) -> None:
    secret = live.create_key()
    key = live.run(live.gateway.store.key_by_secret(secret))
    live.run(live.gateway.store.revoke_key(key.id))
    live.gateway.keys.forget(key.id)
    with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {secret}"}) as c:
        assert_error(c.get("/v1/models"), 401, "invalid_api_key")


@pytest.mark.parametrize(("method", "path", "scope"), [
    ("POST", "/v1/chat/completions", "inference"),
    ("POST", "/v1/responses", "inference"),
    ("POST", "/v1/messages", "inference"),
    ("GET", "/v1/models", "models:read"),
    ("GET", "/v1/models/specway/echo", "models:read"),
    ("GET", "/v1/key", "key:read"),
    ("GET", "/v1/route/explain/abc", "explain:read"),
])
def test_each_scope_is_enforced(live: Live, method: str, path: str, scope: str) -> None:
    others = tuple(s for s in ("inference", "models:read", "key:read", "explain:read", "admin") if s != scope)
    secret = live.create_key(scopes=others)
    with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {secret}"}) as c:
        r = c.request(method, path, json={**CHAT, "input": "x"} if method == "POST" else None)
        body = assert_error(r, 403, "insufficient_scope")
        assert f"'{scope}'" in body["error"]["message"]


def test_body_over_the_limit_is_413(tmp_path: Path) -> None:
    with serve({"server": {"body_limit_bytes": 2048}}, tmp_path) as g, httpx.Client(base_url=g.url, headers=g.headers) as c:
        big = {"messages": [{"role": "user", "content": "x" * 4096}]}
        assert_error(c.post("/v1/chat/completions", json=big), 413, "request_too_large")

        def chunks() -> Iterator[bytes]:
            yield b'{"messages": [{"role": "user", "content": "'
            for _ in range(8):
                yield b"y" * 1024
            yield b'"}]}'

        r = c.post("/v1/chat/completions", content=chunks(), headers={"content-type": "application/json"})
        assert_error(r, 413, "request_too_large")
        ok = c.post("/v1/chat/completions", json=CHAT)
        assert ok.status_code == 200


def _body_of(size: int) -> bytes:
    """A valid chat request of exactly `size` bytes."""
    head, tail = b'{"messages": [{"role": "user", "content": "', b'"}]}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_of_exactly_the_limit_passes_and_one_byte_more_does_not(tmp_path: Path, chunked: bool) -> None:
    limit = 2048
    with serve({"server": {"body_limit_bytes": limit}}, tmp_path) as g, \
            httpx.Client(base_url=g.url, headers={**g.headers, "content-type": "application/json"}) as c:
        for size, status in ((limit, 200), (limit + 1, 413)):
            body = _body_of(size)
            assert len(body) == size
            content: bytes | Iterator[bytes] = iter([body[:1000], body[1000:]]) if chunked else body
            r = c.post("/v1/chat/completions", content=content)
            assert r.status_code == status, (size, r.text)


def test_a_crash_is_a_500_in_the_error_shape(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    from handlers.endpoints import discovery

    async def boom(principal: object) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(discovery, "get_key", boom)
    with httpx.Client(base_url=live.url, headers=live.headers) as c:
        r = c.get("/v1/key")
    assert_error(r, 500, "internal_error")
    assert "secret internals" not in r.text


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("OPTIONS", "/v1/keys", "GET, POST"),
    ("PUT", "/v1/keys/key_1", "DELETE, GET, PATCH"),
    ("GET", "/v1/workspaces/ws_1/credit", "POST"),
    ("DELETE", "/v1/models/acme/fast", "GET"),
])
def test_allow_lists_every_method_the_spec_declares(client: httpx.Client, method: str, path: str, allow: str) -> None:
    r = client.request(method, path)
    assert_error(r, 405, "method_not_allowed")
    assert r.headers["allow"] == allow


def test_health_and_readiness_need_no_key(live: Live) -> None:
    assert httpx.get(f"{live.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{live.url}/readyz").json()
    assert ready == {"status": "ok", "checks": {"store": "ok", "limits": "ok"}}


def test_readiness_fails_when_a_dependency_is_gone(tmp_path: Path) -> None:
    with serve(None, tmp_path) as g:
        g.run(g.gateway.store.close())
        r = httpx.get(f"{g.url}/readyz")
        assert_error(r, 503, "not_ready")
        assert "store" in r.json()["error"]["message"]
        g.run(g.gateway.store.open())
