"""POST /v1/embeddings through the official OpenAI SDK, against a served gateway and a real upstream server: the
body passes through with the upstream's model name, the vectors come back unchanged (floats or base64), routing and
fallbacks are inference's, the hold is the input estimate at the input price (no output), the charge the upstream's
prompt_tokens, and every request leaves a decision record and a request-log line."""

from __future__ import annotations

import base64
import json
import logging
import struct
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import openai
import pytest

from handlers.store.base import Limits
from tests.conftest import Live, free_port, serve
from tests.fake_upstream import FakeUpstream, fake_vector

SECRET = "sk-embed-upstream-7d41a9"
PRICE = {"input": "2", "output": "100"}  # per million tokens; an embedding is charged its input only
EMBED = {"embeddings": True, "price": PRICE}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture(scope="module")
def live(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    timeouts = {"connect": 2, "read": 2, "total": 5}
    config = {
        "upstreams": {
            "oa": {"kind": "openai", "base_url": fake.url, "api_key_env": "SPECWAY_EMBED_OA_KEY", "timeouts": timeouts},
            "oa2": {"kind": "openai", "base_url": fake.url, "timeouts": timeouts},
            "dead": {"kind": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1", "timeouts": timeouts},
            "an": {"kind": "anthropic", "base_url": fake.anthropic_url, "timeouts": timeouts},
            "resp": {"kind": "responses", "base_url": fake.url, "timeouts": timeouts},
            "echo": {"kind": "echo"},
        },
        "models": [
            {"id": "acme/embed", "upstream": "oa", "name": "embed-up", "aliases": ["embed"], **EMBED},
            {"id": "acme/embed-backup", "upstream": "oa2", "name": "embed-up", **EMBED},
            {"id": "acme/embed-dead", "upstream": "dead", "name": "embed-up", **EMBED},
            {"id": "acme/embed-alone", "upstream": "oa", "name": "embed-up", **EMBED},
            {"id": "acme/chat", "upstream": "oa", "name": "gpt-up", "price": PRICE},
            {"id": "acme/an", "upstream": "an", "name": "claude-up", **EMBED},
            {"id": "acme/resp", "upstream": "resp", "name": "embed-up", **EMBED},
            {"id": "acme/echo", "upstream": "echo", "name": "echo", **EMBED},
        ],
        "policies": {"default": {
            "default_model": "acme/chat",
            "fallbacks": {"acme/embed": ["acme/embed-backup"],
                          "acme/embed-dead": ["acme/chat", "acme/an", "acme/embed-backup"]}}},
        "cooldown": {"seconds": 0},
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECWAY_EMBED_OA_KEY", SECRET)
        with serve(config, tmp_path_factory.mktemp("embeddings")) as g:
            g.run(g.gateway.store.add_credit(g.workspace_id, Decimal(10)))
            yield g


@pytest.fixture(autouse=True)
def _fresh(fake: FakeUpstream) -> None:
    fake.reset()


def client(live: Live, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key=key or live.key, max_retries=0, timeout=10)


def post(live: Live, body: dict[str, Any], key: str | None = None) -> httpx.Response:
    return httpx.post(f"{live.url}/v1/embeddings", json=body, headers={"Authorization": f"Bearer {key or live.key}"},
                      timeout=10)


def explain(live: Live, decision: str) -> dict[str, Any]:
    r = httpx.get(f"{live.url}/v1/route/explain/{decision}", headers=live.headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


def float32_base64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def test_the_sdk_default_asks_base64_and_decodes_the_upstreams_vectors(live: Live, fake: FakeUpstream) -> None:
    texts = ["hello embedding world", "one two"]
    raw = client(live).embeddings.with_raw_response.create(model="embed", input=texts)
    result = raw.parse()

    [sent] = fake.requests
    assert sent.path == "/v1/embeddings" and sent.headers["authorization"] == f"Bearer {SECRET}"
    # The caller's body, with the upstream's own model name (never the alias), and nothing added.
    assert sent.body == {"model": "embed-up", "input": texts, "encoding_format": "base64"}
    assert [d.embedding for d in result.data] == [fake_vector(t, 4) for t in texts]
    assert [d.index for d in result.data] == [0, 1] and result.object == "list"
    assert result.model == "embed"  # the name the caller used
    assert (result.usage.prompt_tokens, result.usage.total_tokens) == (5, 5)  # the upstream's count

    assert raw.headers["x-specway-model"] == "acme/embed"
    record = explain(live, raw.headers["x-specway-decision-id"])
    assert (record["format"], record["outcome"], record["model"], record["requested_model"]) == (
        "embeddings", "ok", "acme/embed", "embed")
    assert record["usage"]["input_tokens"] == 5 and record["usage"]["output_tokens"] == 0
    assert record["usage_estimated"] is False and Decimal(record["cost"]) == Decimal(5 * 2) / 1_000_000
    assert [(a["model"], a["status"]) for a in record["attempts"]] == [("acme/embed", 200)]


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_an_explicit_encoding_comes_back_exactly_as_the_upstream_sent_it(live: Live, fake: FakeUpstream,
                                                                         encoding: str) -> None:
    result = client(live).embeddings.create(model="acme/embed", input="a single text", encoding_format=encoding,
                                            dimensions=6)
    [sent] = fake.requests
    assert sent.body["encoding_format"] == encoding and sent.body["dimensions"] == 6
    vector = fake_vector("a single text", 6)
    [item] = result.data
    # The SDK decodes nothing it was told the encoding of: base64 stays the upstream's string.
    assert item.embedding == (vector if encoding == "float" else float32_base64(vector))
    assert result.model == "acme/embed"


def test_token_ids_dimensions_and_user_reach_the_upstream(live: Live, fake: FakeUpstream) -> None:
    sdk = client(live)
    one = sdk.embeddings.create(model="embed", input=[5, 6, 7], user="end-user-1", encoding_format="float")
    many = sdk.embeddings.create(model="embed", input=[[1, 2], [3]], dimensions=2, encoding_format="float")
    first, second = fake.requests
    assert first.body == {"model": "embed-up", "input": [5, 6, 7], "user": "end-user-1", "encoding_format": "float"}
    assert second.body["input"] == [[1, 2], [3]] and second.body["dimensions"] == 2
    assert [d.embedding for d in one.data] == [fake_vector([5, 6, 7], 4)]
    assert [d.embedding for d in many.data] == [fake_vector([1, 2], 2), fake_vector([3], 2)]
    assert (one.usage.prompt_tokens, many.usage.prompt_tokens) == (3, 3)


def test_the_answer_passes_the_upstreams_items_through_unchanged(live: Live, fake: FakeUpstream) -> None:
    data = [{"object": "embedding", "index": 0, "embedding": [0.1, -2.5e-07, 3], "extra": {"kept": True}}]
    fake.script(body={"object": "list", "data": data, "model": "embed-up", "usage": {"prompt_tokens": 7,
                                                                                      "total_tokens": 7}})
    r = post(live, {"model": "embed", "input": "x"})
    assert r.status_code == 200, r.text
    assert r.json() == {"object": "list", "data": data, "model": "embed",
                        "usage": {"prompt_tokens": 7, "total_tokens": 7}}
    assert "id" not in r.json() and r.headers["x-specway-decision-id"]


def test_the_charge_is_the_upstreams_prompt_tokens_at_the_input_price(live: Live, fake: FakeUpstream) -> None:
    fake.script(usage=(1234, 0, 0))
    r = post(live, {"model": "embed", "input": "short"})
    assert r.status_code == 200, r.text
    record = explain(live, r.headers["x-specway-decision-id"])
    assert record["usage"]["input_tokens"] == 1234 and Decimal(record["cost"]) == Decimal("0.002468")


def test_without_a_reported_usage_the_estimate_is_charged_and_marked(live: Live, fake: FakeUpstream) -> None:
    fake.script(body={"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [1.0]}]})
    r = post(live, {"model": "embed", "input": "x" * 400})  # the gateway's estimate: 100 tokens
    assert r.status_code == 200, r.text
    assert r.json()["usage"] == {"prompt_tokens": 100, "total_tokens": 100}
    record = explain(live, r.headers["x-specway-decision-id"])
    assert record["usage_estimated"] is True and Decimal(record["cost"]) == Decimal(100 * 2) / 1_000_000


def test_the_hold_is_the_input_alone(live: Live, fake: FakeUpstream) -> None:
    """A budget and a tokens-per-minute limit that the input fits but the input plus a chat's default output
    reservation (4096 tokens at 100 per million) would not; and an input over the budget, refused before any call."""
    key = live.create_key(limits=Limits(budget=Decimal("0.01"), tpm=2000))
    ok = post(live, {"model": "embed", "input": "word " * 800}, key)  # 4000 characters: about 1000 tokens
    assert ok.status_code == 200, ok.text
    assert len(fake.requests) == 1
    big = {"model": "embed", "input": ["word " * 4000] * 2}  # about 10000 tokens: 0.02
    assert post(live, big, key).json()["error"]["code"] == "rate_limit_exceeded"
    over = post(live, big, live.create_key(limits=Limits(budget=Decimal("0.01"))))
    assert over.status_code == 402 and over.json()["error"]["code"] == "budget_exceeded"
    assert len(fake.requests) == 1  # no upstream call
    assert explain(live, over.headers["x-specway-decision-id"])["outcome"] == "budget_exceeded"


def test_a_failing_upstream_falls_back_and_models_that_cannot_embed_are_skipped(live: Live, fake: FakeUpstream
                                                                                ) -> None:
    raw = client(live).embeddings.with_raw_response.create(model="acme/embed-dead", input="fall back")
    result = raw.parse()
    assert raw.headers["x-specway-model"] == "acme/embed-backup"
    assert result.model == "acme/embed-backup"  # another model's vectors answered: it says which
    assert [r.body["model"] for r in fake.requests] == ["embed-up"]
    record = explain(live, raw.headers["x-specway-decision-id"])
    verdicts = {c["model"]: (c["verdict"], c["reason"]) for c in record["candidates"]}
    assert verdicts["acme/embed-dead"] == ("chosen", "first choice")
    assert verdicts["acme/chat"][0] == "skipped" and "not an embedding model" in verdicts["acme/chat"][1]
    assert verdicts["acme/an"][0] == "skipped" and "'anthropic'" in verdicts["acme/an"][1]
    assert verdicts["acme/embed-backup"][0] == "fallback"
    assert [(a["model"], a["status"], (a["error"] or "")[:7]) for a in record["attempts"]] == [
        ("acme/embed-dead", None, "connect"), ("acme/embed-backup", 200, "")]
    assert record["explanation"].endswith("so the fallback acme/embed-backup answered.")


def test_an_upstream_5xx_falls_back_and_a_rejected_request_does_not(live: Live, fake: FakeUpstream) -> None:
    fake.script(status=500, error=f"overloaded, key {SECRET}")
    r = post(live, {"model": "embed", "input": "retry me"})
    assert r.status_code == 200 and r.headers["x-specway-model"] == "acme/embed-backup"
    attempts = explain(live, r.headers["x-specway-decision-id"])["attempts"]
    assert [(a["model"], a["status"]) for a in attempts] == [("acme/embed", 500), ("acme/embed-backup", 200)]
    assert SECRET not in json.dumps(attempts)

    fake.reset()
    fake.script(status=400, error="This model's maximum context length is 8192 tokens")
    r = post(live, {"model": "embed", "input": "too long"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "upstream_rejected_request" and "8192 tokens" in error["message"]
    assert len(fake.requests) == 1  # the caller's own fault: no fallback
    record = explain(live, r.headers["x-specway-decision-id"])
    assert record["outcome"] == "upstream_rejected_request" and record["cost"] is None


def test_an_answer_that_cannot_be_read_is_the_upstreams_failure(live: Live, fake: FakeUpstream) -> None:
    two = [{"object": "embedding", "index": i, "embedding": [0.5]} for i in range(2)]
    fake.script(body={"object": "list", "data": two, "usage": {"prompt_tokens": 1, "total_tokens": 1}})
    r = post(live, {"model": "acme/embed-alone", "input": "one input"})
    assert r.status_code == 502, r.text
    assert r.json()["error"]["code"] == "upstream_error" and "2 embeddings for 1 inputs" in r.json()["error"]["message"]
    fake.script(malformed=True)
    r = post(live, {"model": "acme/embed-alone", "input": "one input"})
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_error"
    assert explain(live, r.headers["x-specway-decision-id"])["cost"] is None


@pytest.mark.parametrize(("model", "why"), [
    ("acme/chat", "not an embedding model"),
    ("acme/an", "upstream 'an' of kind 'anthropic'"),
    ("acme/resp", "of kind 'responses'"),
    ("acme/echo", "of kind 'echo'"),
])
def test_a_model_that_cannot_embed_is_a_400_naming_why(live: Live, fake: FakeUpstream, model: str, why: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client(live).embeddings.create(model=model, input="hello")
    error = caught.value.body
    assert isinstance(error, dict)
    assert (error["code"], error["param"]) == ("unsupported_model", "model") and why in error["message"]
    assert fake.requests == []
    record = explain(live, caught.value.response.headers["x-specway-decision-id"])
    assert record["outcome"] == "unsupported_model" and record["format"] == "embeddings"


def test_keys_scopes_and_allowlists_apply(live: Live, fake: FakeUpstream) -> None:
    no_scope = live.create_key(scopes=("models:read",))
    with pytest.raises(openai.PermissionDeniedError) as caught:
        client(live, no_scope).embeddings.create(model="embed", input="x")
    assert caught.value.code == "insufficient_scope"
    narrow = live.create_key(models=("acme/embed-backup",))
    with pytest.raises(openai.PermissionDeniedError) as caught:
        client(live, narrow).embeddings.create(model="embed", input="x")
    assert caught.value.code == "model_not_allowed"
    assert client(live, narrow).embeddings.create(model="acme/embed-backup", input="x").data
    with pytest.raises(openai.NotFoundError) as missing:
        client(live).embeddings.create(model="acme/nothing", input="x")
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.AuthenticationError):
        client(live, "sk-sw-not-a-key").embeddings.create(model="embed", input="x")
    assert len(fake.requests) == 1


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "no model"}, "model"),
    ({"model": "embed"}, "input"),
    ({"model": "embed", "input": []}, "input"),
    ({"model": "embed", "input": ""}, "input"),
    ({"model": "embed", "input": ["a", 1]}, "input"),
    ({"model": "embed", "input": [True]}, "input"),
    ({"model": "embed", "input": [[1], []]}, "input"),
    ({"model": "embed", "input": [-1]}, "input"),
    ({"model": "embed", "input": ["x"] * 2049}, "input"),
    ({"model": "embed", "input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"model": "embed", "input": "x", "dimensions": 0}, "dimensions"),
])
def test_a_bad_request_is_a_400_before_any_upstream_call(live: Live, fake: FakeUpstream, body: dict[str, Any],
                                                         param: str) -> None:
    r = post(live, body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"].startswith(param)
    assert fake.requests == []


def test_fields_set_to_null_are_not_sent_and_undeclared_ones_are_dropped(live: Live, fake: FakeUpstream) -> None:
    r = post(live, {"model": "embed", "input": "x", "dimensions": None, "user": None, "encoding_format": None,
                    "truncate_prompt_tokens": 5})
    assert r.status_code == 200, r.text
    assert fake.requests[0].body == {"model": "embed-up", "input": "x"}
    assert r.json()["data"][0]["embedding"] == fake_vector("x", 4)


def test_the_request_log_has_the_embeddings_line(live: Live, fake: FakeUpstream, caplog: pytest.LogCaptureFixture
                                                 ) -> None:
    def logged(decision: str) -> list[dict[str, Any]]:
        lines = [json.loads(rec.getMessage()) for rec in caplog.records if rec.name == "specway.requests"]
        return [x for x in lines if x.get("decision_id") == decision]

    with caplog.at_level(logging.INFO, logger="specway.requests"):
        r = post(live, {"model": "embed", "input": "log me"})
        deadline = time.monotonic() + 10  # the line is written once the answer has left: wait for it, never a delay
        while not logged(r.headers["x-specway-decision-id"]) and time.monotonic() < deadline:
            time.sleep(0.02)
    assert r.status_code == 200
    [line] = logged(r.headers["x-specway-decision-id"])
    assert (line["format"], line["model"], line["outcome"], line["input_tokens"]) == ("embeddings", "acme/embed",
                                                                                     "ok", 2)
    assert "log me" not in json.dumps(line) and SECRET not in json.dumps(line)
