"""SDK conformance, failures: errors as each SDK raises them, streams that break midway or that the caller drops, and
a fallback to the next model (fixtures and drivers in tests/sdk_support.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import Live
from tests.fake_upstream import FakeUpstream
from tests.sdk_support import (
    AN_SECRET,
    FORMATS,
    KINDS,
    MODEL,
    OA_SECRET,
    SDK,
    TEXT,
    USAGE,
    Clients,
    call,
    check_answer,
    error_of,
    expected_usage,
    fixture_clients,  # noqa: F401  (a fixture)
    fixture_fake,  # noqa: F401  (a fixture)
    fixture_fresh,  # noqa: F401  (a fixture)
    fixture_live,  # noqa: F401  (a fixture)
    make_clients,
    matrix,
    request_args,
    run,
)

# --- errors through the SDK ---------------------------------------------------------------------------------------


EMPTY = {"chat": ("messages", []), "responses": ("input", []), "messages": ("messages", [])}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_bad_body_is_bad_request(clients: Clients, fake: FakeUpstream, fmt: str, stream: bool) -> None:
    param, empty = EMPTY[fmt]
    with pytest.raises(SDK[fmt].BadRequestError) as e:
        call(clients, fmt, "acme/oa", stream=stream, **{param: empty})
    assert error_of(e.value)["param"] == param
    assert fake.requests == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_unknown_model_is_not_found(clients: Clients, fake: FakeUpstream, fmt: str) -> None:
    with pytest.raises(SDK[fmt].NotFoundError) as e:
        call(clients, fmt, "acme/no-such-model")
    assert error_of(e.value)["code"] == "model_not_found"
    assert fake.requests == []


def stream_matrix() -> list[Any]:
    return [pytest.param(f, k, s, id=f"{f}-{k}-{'stream' if s else 'whole'}") for f in FORMATS for k in KINDS
            for s in (False, True)]


@pytest.mark.parametrize(("fmt", "kind", "stream"), stream_matrix())
def test_upstream_400_is_bad_request_with_the_upstreams_message(clients: Clients, fake: FakeUpstream, fmt: str,
                                                                kind: str, stream: bool) -> None:
    fake.script(status=400, error="max_tokens: 999999 is greater than the model's maximum of 8192")
    with pytest.raises(SDK[fmt].BadRequestError) as e:
        call(clients, fmt, MODEL[kind], stream=stream)
    err = error_of(e.value)
    assert err["code"] == "upstream_rejected_request"
    assert "max_tokens: 999999 is greater than the model's maximum of 8192" in err["message"]
    assert len(fake.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_upstream_400_never_echoes_the_upstream_key(clients: Clients, fake: FakeUpstream, kind: str) -> None:
    secret = OA_SECRET if kind == "openai" else AN_SECRET
    fake.script(status=400, error=f"bad request for key {secret}: messages too long")
    with pytest.raises(openai.BadRequestError) as e:
        call(clients, "chat", MODEL[kind])
    assert secret not in e.value.response.text
    assert "messages too long" in error_of(e.value)["message"]


@pytest.mark.parametrize(("fmt", "kind", "stream"), stream_matrix())
def test_upstream_401_is_502_without_the_upstream_key(clients: Clients, fake: FakeUpstream, fmt: str, kind: str,
                                                     stream: bool) -> None:
    secret = OA_SECRET if kind == "openai" else AN_SECRET
    fake.script(status=401, error=f"Incorrect API key provided: {secret}")
    with pytest.raises(SDK[fmt].InternalServerError) as e:
        call(clients, fmt, MODEL[kind], stream=stream)
    assert e.value.status_code == 502
    assert error_of(e.value)["code"] == "upstream_auth_failed"
    assert secret in json.dumps(fake.requests[0].headers), "the gateway did send its key upstream"
    seen = e.value.response.text + str(e.value) + json.dumps(dict(e.value.response.headers))
    assert secret not in seen and secret[-8:] not in seen


@pytest.mark.parametrize(("fmt", "kind", "stream"), [
    ("chat", "openai", False), ("messages", "anthropic", True), ("responses", "anthropic", False),
    ("messages", "openai", True),
])
def test_upstream_slower_than_read_timeout_is_504(clients: Clients, fake: FakeUpstream, fmt: str, kind: str,
                                                  stream: bool) -> None:
    fake.script(delay=1.6)  # the upstreams' read timeout is 1 s; waiting it out would be a 200
    with pytest.raises(SDK[fmt].InternalServerError) as e:
        call(clients, fmt, MODEL[kind], stream=stream)
    assert e.value.status_code == 504
    assert error_of(e.value)["code"] == "upstream_timeout"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_closed_port_upstream_is_503(clients: Clients, fmt: str, stream: bool) -> None:
    with pytest.raises(SDK[fmt].InternalServerError) as e:
        call(clients, fmt, "acme/dead", stream=stream)
    assert e.value.status_code == 503
    assert error_of(e.value)["code"] == "upstream_unavailable"


@pytest.mark.parametrize(("fmt", "kind", "stream"), stream_matrix())
def test_upstream_500_is_502(clients: Clients, fake: FakeUpstream, fmt: str, kind: str, stream: bool) -> None:
    fake.script(status=500, error="the model crashed")
    with pytest.raises(SDK[fmt].InternalServerError) as e:
        call(clients, fmt, MODEL[kind], stream=stream)
    assert e.value.status_code == 502
    err = error_of(e.value)
    assert err["code"] == "upstream_error" and "the model crashed" in err["message"]


@pytest.mark.parametrize(("fmt", "kind"), [("chat", "anthropic"), ("messages", "openai"), ("responses", "openai")])
def test_upstream_429_is_429_with_a_bounded_retry_after(clients: Clients, fake: FakeUpstream, fmt: str,
                                                        kind: str) -> None:
    """A 429 that no other candidate absorbed reaches the caller as a 429 (the SDKs know how to wait one out), with
    the upstream's wait told within the 60 s SDKs accept."""
    fake.script(status=429, error="slow down", headers={"retry-after": "120"})
    with pytest.raises(SDK[fmt].RateLimitError) as e:
        call(clients, fmt, MODEL[kind])
    assert e.value.status_code == 429
    assert error_of(e.value)["code"] == "upstream_rate_limited"
    assert e.value.response.headers["retry-after"] == "60"


@pytest.mark.parametrize("fmt", ["chat", "messages"])
def test_the_sdk_retries_a_gateway_5xx(live: Live, fake: FakeUpstream, fmt: str) -> None:
    c = make_clients(live, live.key, retries=1)
    fake.script(status=500, error="transient")
    fake.script(text=TEXT, usage=USAGE)
    o = call(c, fmt, "acme/oa")
    assert o.text == TEXT
    assert [r.status_code for r in c.seen.responses] == [502, 200]
    assert len(fake.requests) == 2


# --- streams that break -------------------------------------------------------------------------------------------


def fault_matrix() -> list[Any]:
    return [pytest.param(f, k, m, fault, id=f"{f}-{k}-{m}-{fault}") for f in FORMATS for k in KINDS
            for m in ("stream", "helper") for fault in ("cut", "error-event")]


@pytest.mark.parametrize(("fmt", "kind", "mode", "fault"), fault_matrix())
def test_a_stream_broken_midway_raises_in_the_sdk(clients: Clients, fake: FakeUpstream, fmt: str, kind: str,
                                                  mode: str, fault: str) -> None:
    """Never a short answer that looks complete: the SDK raises from the format's error event."""
    words = " ".join(f"w{i}" for i in range(12))
    if fault == "cut":
        fake.script(text=words, usage=USAGE, cut_after=4)  # connection closed after 4 chunks, no terminator
    else:
        fake.script(text=words, usage=USAGE, fail_after=4, error="upstream overloaded mid-answer")
    with pytest.raises(SDK[fmt].APIError) as e:
        run(clients, fmt, mode, request_args(fmt, MODEL[kind]))
    assert clients.seen.last.status_code == 200, "the failure came after the first byte"
    err = error_of(e.value)
    # Anthropic's error event is its overloaded_error (529): the upstream said it is overloaded.
    overloaded = fault == "error-event" and kind == "anthropic"
    assert err["code"] == ("upstream_overloaded" if overloaded else "upstream_error"), err
    if fault == "error-event":
        assert "upstream overloaded mid-answer" in err["message"]


def open_stream(c: Clients, fmt: str, model: str) -> tuple[Iterator[Any], Callable[[], None]]:
    args = request_args(fmt, model)
    if fmt == "chat":
        s = c.openai.chat.completions.create(**args, stream=True)
    elif fmt == "responses":
        s = c.openai.responses.create(**args, stream=True)
    else:
        s = c.anthropic.messages.create(**args, stream=True)
    return iter(s), s.close


@pytest.mark.parametrize(("fmt", "kind"), matrix())
def test_client_disconnect_cancels_the_upstream_request(clients: Clients, fake: FakeUpstream, live: Live, fmt: str,
                                                        kind: str) -> None:
    fake.script(text=" ".join(f"w{i}" for i in range(60)), chunk_delay=0.05)  # about 3 s of stream
    events, close = open_stream(clients, fmt, MODEL[kind])
    for _ in range(4):
        next(events)
    decision = clients.seen.last.headers["x-specway-decision-id"]
    close()
    deadline = time.monotonic() + 2.5
    while fake.disconnects == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fake.disconnects == 1, "the gateway kept reading an upstream stream nobody listens to"
    record = explain(live, live.key, decision)
    assert record["outcome"] == "cancelled"


# --- fallback ---------------------------------------------------------------------------------------------------------


def explain(live: Live, key: str, decision: str) -> dict[str, Any]:
    """GET /v1/route/explain/{id}; a streamed answer's record is written just after its last byte."""
    deadline = time.monotonic() + 2
    with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {key}"}, timeout=5) as h:
        while True:
            r = h.get(f"/v1/route/explain/{decision}")
            if r.status_code == 200 or time.monotonic() > deadline:
                assert r.status_code == 200, r.text
                return r.json()
            time.sleep(0.05)


@pytest.mark.parametrize("mode", ["create", "stream", "helper"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_fallback_answers_from_the_next_model(live: Live, fake: FakeUpstream, fmt: str, mode: str) -> None:
    key = live.create_key(policy="with-fallback")
    c = make_clients(live, key)
    fake.script(status=500, error="primary down")
    fake.script(text=TEXT, usage=USAGE)
    o = run(c, fmt, mode, request_args(fmt, "acme/oa"))
    check_answer(o, fmt, "anthropic")
    assert o.usage == expected_usage(fmt, "anthropic")
    assert [r.path for r in fake.requests] == ["/v1/chat/completions", "/v1/messages"]
    assert [r.body["model"] for r in fake.requests] == ["gpt-up", "claude-up"]
    record = explain(live, key, o.headers["x-specway-decision-id"])
    assert [(a["model"], a["status"]) for a in record["attempts"]] == [("acme/oa", 500), ("acme/an", 200)]
    assert record["model"] == "acme/an" and record["outcome"] == "ok"
    assert "fallback" in record["explanation"]
