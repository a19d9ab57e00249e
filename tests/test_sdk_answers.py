"""SDK conformance, the answer: text, usage, ids, model, stop reasons and what the upstream received, whole, streamed
and through the SDKs' stream helpers (fixtures and drivers in tests/sdk_support.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Live
from tests.fake_upstream import FakeUpstream
from tests.sdk_support import (
    FORMATS,
    KINDS,
    MAX_TOKENS,
    MODEL,
    MODES,
    PROMPT,
    SYSTEM,
    TEMPERATURE,
    TEXT,
    TOOLS,
    USAGE,
    Clients,
    check_answer,
    check_received,
    expected_usage,
    fixture_clients,  # noqa: F401  (a fixture)
    fixture_fake,  # noqa: F401  (a fixture)
    fixture_fresh,  # noqa: F401  (a fixture)
    fixture_live,  # noqa: F401  (a fixture)
    matrix,
    request_args,
    run,
)

# --- the answer: text, usage, ids, model, what the upstream received ---------------------------------------------


@pytest.mark.parametrize(("fmt", "kind", "mode"), matrix(with_modes=True))
def test_answer_arrives_complete(clients: Clients, fake: FakeUpstream, live: Live, fmt: str, kind: str,
                                 mode: str) -> None:
    fake.script(text=TEXT, usage=USAGE)
    o = run(clients, fmt, mode, request_args(fmt, MODEL[kind]))
    check_answer(o, fmt, kind)
    assert o.usage == expected_usage(fmt, kind)
    assert o.stop == {"chat": "stop", "responses": "completed", "messages": "end_turn"}[fmt]
    assert o.calls == []
    body = check_received(fake, live, kind, stream=mode != "create")
    assert "tools" not in body
    sent = clients.seen.last.request.headers  # both SDKs send the relay key as a Bearer token
    assert sent["authorization"] == f"Bearer {live.key}" and "x-api-key" not in sent


STOPS = {  # canonical name -> (openai word, anthropic word), and how each caller format says it
    "length": (("length", "max_tokens"), {"chat": "length", "messages": "max_tokens",
                                          "responses": "incomplete:max_output_tokens"}),
    "content_filter": (("content_filter", "refusal"), {"chat": "content_filter", "messages": "refusal",
                                                       "responses": "incomplete:content_filter"}),
    "stop": (("stop", "end_turn"), {"chat": "stop", "messages": "end_turn", "responses": "completed"}),
}


@pytest.mark.parametrize("reason", list(STOPS))
@pytest.mark.parametrize("mode", ["create", "stream"])
@pytest.mark.parametrize(("fmt", "kind"), matrix())
def test_stop_reasons_are_mapped(clients: Clients, fake: FakeUpstream, fmt: str, kind: str, mode: str,
                                 reason: str) -> None:
    (oa_word, an_word), expected = STOPS[reason]
    fake.script(text=TEXT, usage=USAGE, finish=oa_word if kind == "openai" else an_word)
    o = run(clients, fmt, mode, request_args(fmt, MODEL[kind]))
    assert o.stop == expected[fmt]
    assert o.text == TEXT and o.usage == expected_usage(fmt, kind)


@pytest.mark.parametrize("mode", ["create", "stream"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_stop_sequence_survives_messages_to_anthropic(clients: Clients, fake: FakeUpstream, fmt: str,
                                                      mode: str) -> None:
    """Only Messages has a word for it; the other formats call it a plain stop."""
    fake.script(text=TEXT, finish="stop_sequence")
    o = run(clients, fmt, mode, request_args(fmt, "acme/an", **SAMPLING[fmt]))
    assert o.stop == {"chat": "stop", "responses": "completed", "messages": "stop_sequence"}[fmt]


@pytest.mark.parametrize("kind", KINDS)
def test_messages_stream_starts_with_the_input_tokens_when_the_upstream_does(clients: Clients, fake: FakeUpstream,
                                                                             kind: str) -> None:
    fake.script(text=TEXT, usage=USAGE)
    events = list(clients.anthropic.messages.create(**request_args("messages", MODEL[kind]), stream=True))
    start = events[0].message.usage  # type: ignore[union-attr]
    expected = expected_usage("messages", kind)
    # An Anthropic upstream reports them in its own message_start; an OpenAI one only at the end, so message_start
    # carries the gateway's own count of the prompt (never 0, which clients would show), and the end the real one.
    if kind == "anthropic":
        assert (start.input_tokens, start.cache_read_input_tokens) == (expected["input"], expected["cached"])
    else:
        assert start.input_tokens > 0 and start.cache_read_input_tokens == 0  # not reported yet: none, as a number


SAMPLING = {  # the caller's top_p and stop words, per format (anthropic 2.x sends top_p as an extra body field)
    "chat": {"top_p": 0.9, "stop": ["END"]},
    "responses": {"top_p": 0.9},
    "messages": {"extra_body": {"temperature": TEMPERATURE, "top_p": 0.9}, "stop_sequences": ["END"]},
}


@pytest.mark.parametrize(("fmt", "kind"), matrix())
def test_sampling_fields_reach_the_upstream(clients: Clients, fake: FakeUpstream, live: Live, fmt: str,
                                           kind: str) -> None:
    run(clients, fmt, "create", request_args(fmt, MODEL[kind], **SAMPLING[fmt]))
    body = check_received(fake, live, kind, stream=False)
    assert body["top_p"] == 0.9
    if fmt != "responses":
        assert body["stop" if kind == "openai" else "stop_sequences"] == ["END"]


@pytest.mark.parametrize("kind", KINDS)
def test_chat_max_tokens_spellings(clients: Clients, fake: FakeUpstream, kind: str) -> None:
    messages = [{"role": "user", "content": PROMPT}]
    clients.openai.chat.completions.create(model=MODEL[kind], messages=messages, max_completion_tokens=77)
    clients.openai.chat.completions.create(model=MODEL[kind], messages=messages)
    sent, unbounded = (r.body for r in fake.requests)
    assert sent["max_tokens"] == 77
    # Anthropic requires max_tokens: the upstream's default_max_tokens (4096) fills in; OpenAI gets none.
    assert unbounded.get("max_tokens") == (None if kind == "openai" else 4096)


@pytest.mark.parametrize("kind", KINDS)
def test_chat_stream_without_include_usage_has_no_usage_chunk(clients: Clients, fake: FakeUpstream,
                                                              kind: str) -> None:
    fake.script(text=TEXT, usage=USAGE)
    chunks = list(clients.openai.chat.completions.create(**request_args("chat", MODEL[kind]), stream=True))
    assert all(len(ch.choices) == 1 and ch.usage is None for ch in chunks)
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == TEXT
    assert chunks[-1].choices[0].finish_reason == "stop"


def responses_object(c: Clients, mode: str, args: dict[str, Any]) -> Any:
    """The final Response object, as the SDK returns it whole, in response.completed, or from the helper."""
    if mode == "create":
        return c.openai.responses.create(**args)
    if mode == "stream":
        return list(c.openai.responses.create(**args, stream=True))[-1].response
    with c.openai.responses.stream(**args) as s:
        return s.get_final_response()


@pytest.mark.parametrize("mode", MODES)
def test_responses_echo_the_request_settings(clients: Clients, fake: FakeUpstream, mode: str) -> None:
    r = responses_object(clients, mode, request_args("responses", "acme/an", tools=TOOLS["responses"]))
    assert (r.temperature, r.max_output_tokens) == (TEMPERATURE, MAX_TOKENS)
    assert [t.name for t in r.tools] == ["get_weather"]


@pytest.mark.parametrize("mode", MODES)
def test_responses_echo_the_instructions(clients: Clients, fake: FakeUpstream, mode: str) -> None:
    assert responses_object(clients, mode, request_args("responses", "acme/oa")).instructions == SYSTEM
