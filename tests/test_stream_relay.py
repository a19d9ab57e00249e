"""Same-format streams relay the upstream's text events as they came (only what the gateway owns rewritten in their
bytes); any other event, and any event whose bytes do not hold what the gateway owns as the renderer would write it,
is rendered. Through a live gateway (the SDKs read the streams) and at the renderers."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import openai
import orjson
import pytest

from handlers.inference.canonical import Answer, TextDelta
from handlers.inference.formats import chat, messages
from handlers.inference.formats.chat.reader import UpstreamReader as ChatReader
from handlers.inference.formats.messages.reader import UpstreamReader as MessagesReader
from tests.conftest import Live, serve
from tests.fake_upstream import FakeUpstream
from tests.formats_support import ANSWER, REQUESTS, parse

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture(scope="module")
def gw(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    config = {
        "upstreams": {"oa": {"kind": "openai", "base_url": fake.url},
                      "an": {"kind": "anthropic", "base_url": fake.anthropic_url}},
        "models": [{"id": "acme/gpt", "upstream": "oa", "name": "gpt-up"},
                   {"id": "acme/claude", "upstream": "an", "name": "claude-up"}],
    }
    with serve(config, tmp_path_factory.mktemp("relay")) as g:
        yield g


@pytest.fixture(autouse=True)
def fresh(fake: FakeUpstream) -> None:
    fake.reset()


def _chunks(body: str) -> list[dict]:
    return [orjson.loads(frame[6:]) for frame in body.split("\n\n") if frame.startswith("data: {")]


def test_a_chat_stream_relays_the_upstreams_text_chunks_with_our_id_and_model(gw: Live, fake: FakeUpstream) -> None:
    fake.script(text="one two three")
    body = {"model": "acme/gpt", "messages": USER, "stream": True, "stream_options": {"include_usage": True}}
    r = httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=gw.headers, timeout=30)
    assert r.status_code == 200, r.text
    decision = r.headers["x-specway-decision-id"]
    chunks = _chunks(r.text)
    assert {c["id"] for c in chunks} == {f"chatcmpl-{decision}"} and {c["model"] for c in chunks} == {"acme/gpt"}
    texts = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert "".join(c["choices"][0]["delta"]["content"] for c in texts) == "one two three"
    # relayed as they came: the upstream's own field is there, which the renderer never writes
    assert len(texts) == 3 and all(c["system_fingerprint"] == "fp_fake" for c in texts)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    assert r.text.endswith("data: [DONE]\n\n")

    fake.script(text="one two three")
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0)
    read = list(client.chat.completions.create(model="acme/gpt", messages=USER, stream=True))  # type: ignore[arg-type]
    assert "".join(c.choices[0].delta.content or "" for c in read if c.choices) == "one two three"
    assert read[-1].choices[0].finish_reason == "stop"


def test_a_messages_stream_from_an_anthropic_upstream_reads_whole_in_the_sdk(gw: Live, fake: FakeUpstream) -> None:
    fake.script(text="un deux trois")
    client = anthropic.Anthropic(base_url=gw.url, api_key=gw.key, max_retries=0)
    with client.messages.stream(model="acme/claude", max_tokens=50, messages=USER) as stream:  # type: ignore[arg-type]
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "un deux trois" and final.content[0].text == text  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"


def _chat_chunk(delta: dict, **head: object) -> str:
    chunk = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 7, "model": "gpt-up", **head,
             "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}
    return orjson.dumps(chunk).decode()


def test_the_chat_reader_marks_only_chunks_of_text_alone() -> None:
    reader = ChatReader()
    [text] = reader.read("message", _chat_chunk({"content": "hi"}, system_fingerprint="fp"))
    assert isinstance(text, TextDelta) and text.raw is not None
    [role_and_text] = reader.read("message", _chat_chunk({"role": "assistant", "content": "hi"}))
    filtered = orjson.loads(_chat_chunk({"content": "hi"}))
    filtered["choices"][0]["content_filter_results"] = {"hate": {"filtered": False}}  # Azure's
    [unknown] = reader.read("message", orjson.dumps(filtered).decode())
    assert role_and_text.raw is None and unknown.raw is None


def test_the_chat_renderer_rewrites_a_relayed_chunks_head_or_renders_it() -> None:
    renderer = chat.StreamRenderer(ANSWER, parse("chat", REQUESTS["chat"]))
    raw = _chat_chunk({"content": "café"}).replace("café", "caf\\u00e9")  # the upstream's own escaping
    relayed = orjson.loads(renderer.event(TextDelta("café", raw=raw))[6:])
    assert relayed["id"] == "chatcmpl-dec123" and relayed["model"] == "pub/model"
    assert relayed["created"] == ANSWER.created and relayed["choices"][0]["delta"] == {"content": "café"}
    assert b"caf\\u00e9" in renderer.event(TextDelta("café", raw=raw))  # its bytes, not encoded again
    spaced = '{"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 7, "model": "gpt-up", "choices": []}'
    fresh = chat.StreamRenderer(ANSWER, parse("chat", REQUESTS["chat"]))
    rendered = fresh.event(TextDelta("hi", raw=spaced))  # the head not as `"field":value`: rendered
    assert orjson.loads(rendered[6:])["choices"][0]["delta"] == {"content": "hi"} and b'"id": ' not in rendered


def test_the_messages_renderer_relays_a_delta_of_its_open_block_only() -> None:
    reader = MessagesReader()
    delta = '{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":"caf\\u00e9"}}'
    reader.read("content_block_start", '{"type":"content_block_start","index":0,"content_block":{"type":"text"}}')
    [text] = reader.read("content_block_delta", delta % 0)
    assert text.raw == delta % 0
    renderer = messages.StreamRenderer(Answer("dec123", "pub/model", 1, 3), parse("messages", REQUESTS["messages"]))
    first = renderer.event(TextDelta("café"))  # opens the block
    assert b'"text":"caf\xc3\xa9"' in first
    assert renderer.event(text).endswith(b"data: " + (delta % 0).encode() + b"\n\n")  # relayed as it came
    elsewhere = TextDelta("café", raw=delta % 3)  # the upstream's block 3 is not the caller's open block 0
    assert b'"index":0,' in renderer.event(elsewhere) and b"\\u00e9" not in renderer.event(elsewhere)
