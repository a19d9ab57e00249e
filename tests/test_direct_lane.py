"""The direct lane (handlers/edge/connexion_adapter.py DirectLane) answers exactly as the whole Connexion stack does:
every request below is sent twice to one gateway, once with the lane and once without, and the two answers must
agree in status, content type, the headers an error carries and the error body, and, for answers, in their shape."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from connexion.exceptions import BadRequestProblem
from connexion.validators import ParameterValidator

from handlers.edge.middleware import Edge
from tests.conftest import Live, serve

CHAT = {"messages": [{"role": "user", "content": "Say hello."}]}
MESSAGES = {**CHAT, "max_tokens": 64}
JSON = {"content-type": "application/json"}
# (name, path, headers beside the key's, body bytes, whether the key is sent)
CASES: list[tuple[str, str, dict[str, str], bytes, bool]] = [
    ("chat", "/v1/chat/completions", JSON, orjson.dumps(CHAT), True),
    ("chat stream", "/v1/chat/completions", JSON, orjson.dumps({**CHAT, "stream": True}), True),
    ("charset", "/v1/chat/completions", {"content-type": "application/json; charset=utf-8"}, orjson.dumps(CHAT),
     True),
    ("json suffix", "/v1/chat/completions", {"content-type": "application/vnd.api+json"}, orjson.dumps(CHAT), True),
    ("text/plain", "/v1/chat/completions", {"content-type": "text/plain"}, orjson.dumps(CHAT), True),
    ("form", "/v1/chat/completions", {"content-type": "application/x-www-form-urlencoded"}, b"a=1", True),
    ("no content type", "/v1/chat/completions", {}, orjson.dumps(CHAT), True),
    ("not json", "/v1/chat/completions", JSON, b"{nope", True),
    ("empty", "/v1/chat/completions", JSON, b"", True),
    ("wrong type", "/v1/chat/completions", JSON, orjson.dumps({"messages": "hi"}), True),
    ("huge number", "/v1/chat/completions", JSON, b'{"messages":[{"role":"user","content":"x"}],"seed":1e400}', True),
    ("gzip", "/v1/chat/completions", {**JSON, "content-encoding": "gzip"}, orjson.dumps(CHAT), True),
    ("bad ceiling", "/v1/chat/completions", {**JSON, "x-specway-max-cost": "lots"}, orjson.dumps(CHAT), True),
    ("ceiling", "/v1/chat/completions", {**JSON, "x-specway-max-cost": "0.5"}, orjson.dumps(CHAT), True),
    ("unknown model", "/v1/chat/completions", JSON, orjson.dumps({**CHAT, "model": "nope/nope"}), True),
    ("no key", "/v1/chat/completions", JSON, orjson.dumps(CHAT), False),
    ("messages", "/v1/messages", {**JSON, "anthropic-version": "2023-06-01"}, orjson.dumps(MESSAGES), True),
    ("messages without max_tokens", "/v1/messages", JSON, orjson.dumps(CHAT), True),
    ("count tokens", "/v1/messages/count_tokens", JSON, orjson.dumps(CHAT), True),
    ("responses", "/v1/responses", JSON, orjson.dumps({"input": "Say hello."}), True),
    ("embeddings", "/v1/embeddings", JSON, orjson.dumps({"input": "hello"}), True),
]
_PER_REQUEST = {"x-request-id", "x-specway-decision-id", "date", "content-length", "server"}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with serve(None, tmp_path_factory.mktemp("lane")) as running:
        yield running


def _edge(live: Live) -> Edge:
    edge = live.audit.app
    assert isinstance(edge, Edge) and edge.direct is not None
    return edge


def _answer(live: Live, path: str, headers: dict[str, str], body: bytes, keyed: bool) -> dict[str, Any]:
    sent = {**headers, **(live.headers if keyed else {})}
    r = httpx.post(live.url + path, content=body, headers=sent, timeout=10)
    shape: dict[str, Any] = {"status": r.status_code, "type": r.headers.get("content-type"),
                             "headers": sorted(set(r.headers) - _PER_REQUEST)}
    if r.status_code >= 400:
        shape["body"] = r.json()
    elif r.headers.get("content-type", "").startswith("text/event-stream"):
        shape["events"] = [line.split(":", 1)[0] for line in r.text.splitlines() if line]
    else:
        shape["keys"] = sorted(r.json())
    return shape


def test_the_lane_serves_the_inference_operations(live: Live) -> None:
    lane = _edge(live).direct
    assert lane is not None
    assert {("/v1/chat/completions", "POST"), ("/v1/messages", "POST"), ("/v1/responses", "POST"),
            ("/v1/embeddings", "POST"), ("/v1/messages/count_tokens", "POST")} <= lane.paths()
    scope = {"path": "/v1/chat/completions", "method": "POST", "headers": [(b"content-type", b"application/json")],
             "query_string": b"", "root_path": ""}
    assert lane.get(scope) is not None
    assert lane.get({**scope, "query_string": b"beta=true"}) is None  # Connexion checks query parameters
    assert lane.get({**scope, "method": "GET"}) is None
    assert not any("{" in path for path, _ in lane.paths())


@pytest.mark.parametrize(("name", "path", "headers", "body", "keyed"), CASES, ids=[c[0] for c in CASES])
def test_the_same_answer_with_and_without_the_lane(live: Live, name: str, path: str, headers: dict[str, str],
                                                   body: bytes, keyed: bool) -> None:
    edge = _edge(live)
    lane = edge.direct
    through_lane = _answer(live, path, headers, body, keyed)
    edge.direct = None
    try:
        through_connexion = _answer(live, path, headers, body, keyed)
    finally:
        edge.direct = lane
    assert through_lane == through_connexion


class _FailsMidway:
    """A route whose answer starts, then fails."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        raise ValueError("failed midway")


def test_an_error_after_the_answer_started_is_not_answered_twice(live: Live) -> None:
    """The connection ends, as under Starlette's handlers (no second start, no error body after the answer's
    bytes), and the next request is served."""
    lane = _edge(live).direct
    assert lane is not None
    where = ("/v1/chat/completions", "POST")
    check, call = lane._ops[where]
    lane._ops[where] = (check, _FailsMidway())  # type: ignore[assignment]
    try:
        # The body stops short (RemoteProtocolError), or the close overtakes it (ReadError: reset by peer).
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            httpx.post(live.url + where[0], json=CHAT, headers=live.headers, timeout=10)
    finally:
        lane._ops[where] = (check, call)
    assert httpx.post(live.url + where[0], json=CHAT, headers=live.headers, timeout=10).status_code == 200


# Header parameters as a client may send them: absent, valid, invalid, twice (the first counts), "null", empty.
HEADER_CASES: list[list[tuple[bytes, bytes]]] = [
    [],
    [(b"x-specway-max-cost", b"0.5")],
    [(b"x-specway-max-cost", b"lots")],
    [(b"x-specway-max-cost", b"lots"), (b"x-specway-max-cost", b"0.5")],
    [(b"x-specway-max-cost", b"0.5"), (b"x-specway-max-cost", b"lots")],
    [(b"x-specway-session", b"")],
    [(b"x-specway-session", b"null")],
    [(b"x-specway-session", b"s" * 513), (b"x-specway-max-cost", b"lots")],
    [(b"anthropic-version", b"2023-06-01"), (b"anthropic-beta", b"a,b")],
    [(b"anthropic-beta", b""), (b"x-specway-max-cost", b"1")],
]


def _outcome(validator: ParameterValidator, scope: dict[str, Any]) -> str | None:
    try:
        validator.validate(scope)
    except BadRequestProblem as refused:
        return str(refused.detail)
    return None


@pytest.mark.parametrize("query", [b"", b"beta=true"])
def test_header_parameters_are_checked_as_connexion_checks_them(live: Live, query: bytes) -> None:
    """The lane's parameter check reads only the headers it needs and makes each validator once: every case passes
    or fails as Connexion's own ParameterValidator has it, and a refusal names the parameter and keeps its words."""
    lane = _edge(live).direct
    assert lane is not None
    for (path, _), (check, _) in lane._ops.items():
        ours = check._parameters
        op = check._operation
        theirs = ParameterValidator(op.parameters, uri_parser=op.uri_parser_class(op.parameters, op.body_definition()))
        for headers in HEADER_CASES:
            scope = {"type": "http", "path": path, "method": "POST", "query_string": query, "root_path": "",
                     "headers": [(b"content-type", b"application/json"), *headers]}
            mine, connexions = _outcome(ours, scope), _outcome(theirs, scope)
            assert (mine is None) == (connexions is None), (path, headers, mine, connexions)
            if mine is not None and connexions is not None:
                assert mine.startswith("The header parameter '") and connexions.splitlines()[0] in mine
