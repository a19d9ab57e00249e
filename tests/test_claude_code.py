"""Claude Code's calls besides its main turn, on every upstream kind, through the Anthropic SDK's beta client (which
posts to /v1/messages?beta=true with anthropic-beta headers, as Claude Code does):

- count_tokens with a body like Claude Code's (system blocks with cache_control, tools, thinking, a system message
  mid-conversation): asked of an anthropic upstream, estimated elsewhere (`x-specway-estimated: true`);
- the small fast model's side requests (short, non-streamed, a small max_tokens, no tools);
- anthropic-beta values no upstream but Anthropic knows: kept for anthropic upstreams, never sent elsewhere;
- cache_control everywhere Claude Code puts it (system blocks, tools, tool_result blocks, the last message's blocks):
  carried to anthropic byte for byte, accepted elsewhere;
- usage with every field the SDK's Usage types declare, in message_start, message_delta and whole answers.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic.types.beta as beta_types
import pytest
from anthropic import types

from tests.conformance_support import (
    MODEL,
    Clients,
    fixture_clients,  # noqa: F401  (a fixture)
    fixture_fake,  # noqa: F401  (a fixture)
    fixture_fresh,  # noqa: F401  (a fixture)
    fixture_live,  # noqa: F401  (a fixture)
    limit_of,
    received,
    results_of,
    system_of,
)
from tests.fake_upstream import FakeUpstream

KINDS = ("openai", "anthropic", "responses")
BETAS = ["claude-code-20250219", "interleaved-thinking-2025-05-14", "fine-grained-tool-streaming-2025-05-14"]
EPHEMERAL = {"type": "ephemeral"}
SYSTEM = [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
          {"type": "text", "text": "Working directory: the repository.", "cache_control": EPHEMERAL}]
TOOLS = [{"name": "Bash", "description": "Run a shell command.",
          "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
         {"name": "Read", "description": "Read a file.", "cache_control": EPHEMERAL,
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]
SIGNED = {"type": "thinking", "thinking": "I should list the files.", "signature": "EqQBCkYIBxgCKkB+c2ln/w=="}
LISTED = "README.md\nsrc/"
MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "<system-reminder>Be brief.</system-reminder>"},
                                 {"type": "text", "text": "What is in this repository?"}]},
    {"role": "assistant", "content": [SIGNED, {"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                               "input": {"command": "ls"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": LISTED,
                                  "cache_control": EPHEMERAL},
                                 {"type": "text", "text": "Go on.", "cache_control": EPHEMERAL}]},
]
MID_SYSTEM = {"role": "system", "content": "The user switched to plan mode."}
THINKING = {"type": "enabled", "budget_tokens": 1024}


def _main_turn(kind: str) -> dict[str, Any]:
    return {"model": MODEL[kind], "max_tokens": 4096, "system": SYSTEM, "tools": TOOLS, "messages": MESSAGES,
            "thinking": THINKING, "betas": BETAS, "metadata": {"user_id": "user_1_session_2"}}


def _no_beta_elsewhere(fake: FakeUpstream, kind: str) -> None:
    sent = fake.requests[-1]
    assert "beta" not in sent.query, sent.query  # ?beta=true is the SDK's marker for the gateway, not a feature
    if kind == "anthropic":
        assert sent.headers["anthropic-beta"].split(",")[:len(BETAS)] == BETAS
    else:
        assert "anthropic-beta" not in sent.headers and "anthropic-version" not in sent.headers


@pytest.mark.parametrize("kind", [*KINDS, "echo"])
def test_count_tokens_of_a_claude_code_body(clients: Clients, fake: FakeUpstream, kind: str) -> None:
    body = {key: value for key, value in _main_turn(kind).items() if key not in ("max_tokens", "metadata")}
    body["messages"] = [*MESSAGES[:1], MID_SYSTEM, *MESSAGES[1:]]
    fake.script(usage=(777, 0, 0))
    raw = clients.anthropic.beta.messages.with_raw_response.count_tokens(**body)
    counted = raw.parse().input_tokens
    if kind == "anthropic":  # asked, with what a message request would carry
        sent = fake.requests[-1]
        assert sent.path == "/v1/messages/count_tokens"
        assert (sent.body["system"], sent.body["tools"], sent.body["thinking"]) == (SYSTEM, TOOLS, THINKING)
        assert sent.body["messages"] == body["messages"]
        _no_beta_elsewhere(fake, kind)
        assert (counted, raw.headers.get("x-specway-estimated")) == (777, None)
    else:
        assert fake.requests == []
        assert raw.headers["x-specway-estimated"] == "true" and counted > 50  # the system, tools and turns count


@pytest.mark.parametrize("kind", KINDS)
def test_a_side_request_of_the_small_fast_model(clients: Clients, fake: FakeUpstream, kind: str) -> None:
    fake.script(text="Repository tour")
    answer = clients.anthropic.beta.messages.create(
        model=MODEL[kind], max_tokens=24, betas=BETAS, metadata={"user_id": "user_1_session_2"},
        system=[{"type": "text", "text": "Give this conversation a title of three words."}],
        messages=[{"role": "user", "content": "What is in this repository?"}])
    body = received(fake, kind, stream=False)
    assert limit_of(kind, body) == 24 and "tools" not in body
    assert system_of(kind, body) == "Give this conversation a title of three words."
    _no_beta_elsewhere(fake, kind)
    assert [b.text for b in answer.content if b.type == "text"] == ["Repository tour"]
    assert answer.stop_reason == "end_turn"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("kind", KINDS)
def test_the_main_turn_with_cache_control_everywhere(clients: Clients, fake: FakeUpstream, kind: str,
                                                     stream: bool) -> None:
    fake.script(text="A small repository.")
    args = _main_turn(kind)
    if stream:
        with clients.anthropic.beta.messages.stream(**args) as s:
            answer = s.get_final_message()
    else:
        answer = clients.anthropic.beta.messages.create(**args)
    body = received(fake, kind, stream)
    _no_beta_elsewhere(fake, kind)
    if kind == "anthropic":  # byte for byte, the thinking signed and before its tool_use
        assert (body["system"], body["tools"], body["messages"]) == (SYSTEM, TOOLS, MESSAGES)
    else:
        assert SIGNED["signature"] not in json.dumps(body)
        assert "cache_control" not in json.dumps(body)  # OpenAI caches prefixes itself; a strict server refuses it
        assert results_of(kind, body) == [("toolu_1", LISTED)]
        assert "Working directory: the repository." in system_of(kind, body)
    assert [b.text for b in answer.content if b.type == "text"] == ["A small repository."]


# --- usage with every field the SDK declares ---------------------------------------------------------------------

NATIVE = {"service_tier": "standard", "server_tool_use": {"web_search_requests": 2, "web_fetch_requests": 0},
          "cache_creation": {"ephemeral_5m_input_tokens": 4, "ephemeral_1h_input_tokens": 0}}


def _declared(*models: type[Any]) -> set[str]:
    return {name for model in models for name in model.model_fields}


@pytest.mark.parametrize("kind", KINDS)
def test_stream_usage_has_every_field_the_sdk_declares(clients: Clients, fake: FakeUpstream, kind: str) -> None:
    fake.script(text="Hi.", usage=(30, 2, 5, 4), native_usage=NATIVE)
    args = {"model": MODEL[kind], "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}
    with clients.anthropic.messages.with_streaming_response.create(**args, stream=True) as raw:
        events = [json.loads(line[5:]) for line in raw.iter_lines() if line.startswith("data:")]
    start = next(e for e in events if e["type"] == "message_start")["message"]["usage"]
    delta = next(e for e in events if e["type"] == "message_delta")["usage"]
    assert set(start) >= _declared(types.Usage, beta_types.BetaUsage)
    assert set(delta) >= _declared(types.MessageDeltaUsage, beta_types.BetaMessageDeltaUsage)
    types.Usage.model_validate(start)
    types.MessageDeltaUsage.model_validate(delta)
    counts = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    assert all(isinstance(start[k], int) and isinstance(delta[k], int) for k in counts), (start, delta)
    if kind == "anthropic":  # Anthropic's own fields as it said them; cache counts apart from input_tokens
        assert {k: start[k] for k in NATIVE} == NATIVE and delta["server_tool_use"] == NATIVE["server_tool_use"]
        assert (start["input_tokens"], start["cache_read_input_tokens"], start["cache_creation_input_tokens"]) == \
            (30, 5, 4)
    else:  # no such fields upstream: null; the counts arrive at the end, message_start has the gateway's estimate
        assert {k: start[k] for k in NATIVE} == dict.fromkeys(NATIVE)
        assert start["input_tokens"] > 0 and start["cache_read_input_tokens"] == 0
        written = 4 if kind == "responses" else 0  # the fake's chat dialect reports no cache writes
        # OpenAI counts cache reads and writes inside input_tokens, Anthropic apart from it
        assert (delta["input_tokens"], delta["cache_read_input_tokens"], delta["cache_creation_input_tokens"]) == \
            (30 - 5 - written, 5, written)


@pytest.mark.parametrize("kind", KINDS)
def test_whole_usage_has_every_field_the_sdk_declares(clients: Clients, fake: FakeUpstream, kind: str) -> None:
    fake.script(text="Hi.", usage=(30, 2, 5), native_usage=NATIVE)
    args = {"model": MODEL[kind], "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}
    usage = clients.anthropic.messages.with_raw_response.create(**args).http_response.json()["usage"]
    assert set(usage) >= _declared(types.Usage, beta_types.BetaUsage)
    assert usage["service_tier"] == ("standard" if kind == "anthropic" else None)
    assert usage["cache_read_input_tokens"] == 5 and usage["cache_creation_input_tokens"] == 0
